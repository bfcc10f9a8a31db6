"""Small calls over plain TCP: the emulated WAN's own latency floor.

bench/transport.sh runs this beside its plain-TCP calibration, so the
small-call p99 the transport gets while bulk fills the link can be read
against what the same path gives a bare TCP request/reply at the same load
(the tbf queues and the latency proxy are in both).

    transport_pingpong.py serve PORT
    transport_pingpong.py call HOST PORT CONNECTIONS SECONDS   (prints one line)
"""

import asyncio
import socket
import sys
import time

SIZE = 1024


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def serve(port: int) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _no_delay(writer)
        try:
            while True:
                writer.write(await reader.readexactly(SIZE))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "0.0.0.0", port)
    async with server:
        await server.serve_forever()


async def call(host: str, port: int, connections: int, seconds: float) -> str:
    latencies_ms: list[float] = []
    end = time.monotonic() + seconds

    async def caller() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        _no_delay(writer)
        message = b"x" * SIZE
        try:
            while time.monotonic() < end:
                begin = time.monotonic()
                writer.write(message)
                await writer.drain()
                await reader.readexactly(SIZE)
                latencies_ms.append((time.monotonic() - begin) * 1000)
        finally:
            writer.close()

    await asyncio.gather(*(caller() for _ in range(connections)))
    if not latencies_ms:
        return "no call completed"
    latencies_ms.sort()

    def pct(p: float) -> float:
        return latencies_ms[min(len(latencies_ms) - 1, int(p * len(latencies_ms)))]

    return (
        f"{len(latencies_ms)} calls, p50 {pct(0.50):.1f} ms, p90 {pct(0.90):.1f} ms, "
        f"p99 {pct(0.99):.1f} ms"
    )


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "serve":
        asyncio.run(serve(int(argv[2])))
        return 0
    if len(argv) == 6 and argv[1] == "call":
        print(asyncio.run(call(argv[2], int(argv[3]), int(argv[4]), float(argv[5]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
