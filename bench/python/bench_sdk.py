"""Throughput and latency of the Python SDK on both sides of a local troupe daemon.

    python bench/python/bench_sdk.py [--duration 5] [--max-calls 20000] [--actors 1000] [--unix]

Starts its own daemon ($TROUPE_BIN, default target/debug/troupe) on a free
127.0.0.1 port with a temporary data dir, and an app process (this file with
--app) hosting a stateless `echo` actor and a stateful `counter` actor. The
load runs in this process through troupe.Client: one sequential caller, then 64
concurrent callers, each spread over --actors actor ids. Every scenario stops
after --duration seconds or --max-calls calls, whichever comes first.
Everything runs on loopback; the processes share the machine's cores.

CPU per call is the CPU time (user + system, all threads, from /proc/PID/stat)
the app process, this client process and the daemon spent during the scenario,
divided by its calls: what the SDK costs on each side, whatever else runs on
the machine. Their sum bounds the calls/s the machine's cores allow.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import grpc
import wake_cost
from grpc_health.v1 import health_pb2, health_pb2_grpc

import troupe

REPO_ROOT = Path(__file__).resolve().parents[2]


@troupe.actor("bench-echo")
class Echo(troupe.Actor):
    @troupe.method
    async def echo(self, value: int) -> int:
        return value


@troupe.actor("bench-counter")
class Counter(troupe.Actor):
    @troupe.method
    async def incr(self, by: int = 1) -> int:
        count = int(self.state.get("count", 0)) + by
        self.state["count"] = count
        return count


def run_app(address: str) -> None:
    async def main() -> None:
        app = troupe.App(actors=[Echo, Counter], address=address, app_name="bench-app")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, app.stop)
        runner = asyncio.create_task(app.run())
        await app.wait_registered(timeout=30)
        print("registered", flush=True)
        await runner

    asyncio.run(main())


@dataclass
class Scenario:
    name: str
    actor_type: str
    method: str
    concurrency: int
    anchor: str
    anchor_calls_per_s: float | None


SCENARIOS = [
    Scenario("sequential, stateless", "bench-echo", "echo", 1, "-", None),
    Scenario(
        "sequential, stateful",
        "bench-counter",
        "incr",
        1,
        "Dapr Py SDK both sides 200-450/s (Go app 1,694/s)",
        450,
    ),
    Scenario(
        "64 concurrent, stateless",
        "bench-echo",
        "echo",
        64,
        "Dapr + Go app 8,730/s",
        8730,
    ),
    Scenario(
        "64 concurrent, stateful",
        "bench-counter",
        "incr",
        64,
        "Dapr Py SDK both sides 650-760/s",
        760,
    ),
]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, all its threads (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the command.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    scenario: Scenario
    calls: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    app_cpu_s: float
    client_cpu_s: float
    daemon_cpu_s: float

    def cpu_us_per_call(self, cpu_s: float) -> str:
        return f"{cpu_s / self.calls * 1e6:.0f}" if self.calls else "-"

    def summary(self) -> dict[str, str]:
        """The figures compare_cores.py tabulates, as printed."""
        row = self.row()
        keys = ["scenario", "calls", "calls/s", "p50 ms", "p99 ms"]
        keys += ["app µs", "client µs", "daemon µs"]
        return dict(zip(keys, row, strict=False))

    def row(self) -> list[str]:
        rate = self.calls / self.seconds if self.seconds else 0.0
        lat = sorted(self.latencies_ms)
        p50 = statistics.median(lat) if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
        anchor = self.scenario.anchor_calls_per_s
        ratio = f"{rate / anchor:.2f}x" if anchor else "-"
        return [
            self.scenario.name,
            str(self.calls) + (f" ({self.errors} err)" if self.errors else ""),
            f"{rate:,.0f}",
            f"{p50:.2f}",
            f"{p99:.2f}",
            self.cpu_us_per_call(self.app_cpu_s),
            self.cpu_us_per_call(self.client_cpu_s),
            self.cpu_us_per_call(self.daemon_cpu_s),
            self.scenario.anchor,
            ratio,
        ]


async def run_scenario(
    client: troupe.Client,
    sc: Scenario,
    actors: int,
    duration: float,
    max_calls: int,
    pids: tuple[int, int],
) -> Result:
    latencies: list[float] = []
    errors = 0
    issued = 0
    stop_at = time.perf_counter() + duration

    async def caller(worker: int) -> None:
        nonlocal issued, errors
        i = worker
        while issued < max_calls and time.perf_counter() < stop_at:
            issued += 1
            actor_id = f"a{i % actors}"
            i += sc.concurrency
            t0 = time.perf_counter()
            try:
                await client.invoke(sc.actor_type, actor_id, sc.method, [1])
            except troupe.TroupeError:
                errors += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)

    app_pid, daemon_pid = pids
    app_cpu, client_cpu = cpu_seconds(app_pid), cpu_seconds(os.getpid())
    daemon_cpu = cpu_seconds(daemon_pid)
    started = time.perf_counter()
    await asyncio.gather(*(caller(w) for w in range(sc.concurrency)))
    seconds = time.perf_counter() - started
    return Result(
        sc,
        len(latencies),
        errors,
        seconds,
        latencies,
        cpu_seconds(app_pid) - app_cpu,
        cpu_seconds(os.getpid()) - client_cpu,
        cpu_seconds(daemon_pid) - daemon_cpu,
    )


async def warm_up(client: troupe.Client, actors: int) -> None:
    """Activate every actor once so the scenarios measure calls, not activations."""
    sem = asyncio.Semaphore(64)

    async def one(actor_type: str, method: str, i: int) -> None:
        async with sem:
            await client.invoke(actor_type, f"a{i}", method, [0])

    for actor_type, method in (("bench-echo", "echo"), ("bench-counter", "incr")):
        await asyncio.gather(*(one(actor_type, method, i) for i in range(actors)))


async def wait_healthy(address: str, proc: asyncio.subprocess.Process) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(400):
            if proc.returncode is not None:
                raise SystemExit(f"daemon exited with {proc.returncode} during start-up")
            with contextlib.suppress(grpc.aio.AioRpcError):
                resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.05)
    raise SystemExit(f"daemon at {address} not healthy after 20 s")


def print_table(results: list[Result]) -> None:
    header = [
        "scenario",
        "calls",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "app CPU µs/call",
        "client CPU µs/call",
        "daemon CPU µs/call",
        "anchor",
        "ratio",
    ]
    rows = [header, *(r.row() for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if n == 0:
            print("-+-".join("-" * w for w in widths))


async def bench(args: argparse.Namespace, binary: Path, tmp: Path, log: BinaryIO) -> list[Result]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    # With --unix, the app and the client reach the daemon on its Unix socket.
    sock = tmp / "troupe.sock"
    sdk_address = f"unix:{sock}" if args.unix else address
    unix_args = ["--listen-unix", str(sock)] if args.unix else []
    daemon = await asyncio.create_subprocess_exec(
        str(binary),
        "serve",
        "--listen",
        address,
        "--data-dir",
        str(tmp / "data"),
        *unix_args,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    app: asyncio.subprocess.Process | None = None
    try:
        await wait_healthy(address, daemon)
        app = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--app",
            sdk_address,
            stdout=asyncio.subprocess.PIPE,
        )
        assert app.stdout is not None
        line = await asyncio.wait_for(app.stdout.readline(), 30)
        if line.strip() != b"registered":
            raise SystemExit(f"bench app did not register (said {line!r})")
        # Which kind of host made the table (sequential calls move twofold
        # with what a wake-up across CPUs costs).
        print(wake_cost.summary(5000), flush=True)
        print(
            f"daemon {binary} at {sdk_address}; {args.actors} actors per type;"
            f" SDK core: {troupe._core.name()}",
            flush=True,
        )
        async with troupe.Client(sdk_address, timeout=30) as client:
            await warm_up(client, args.actors)
            results = []
            for sc in SCENARIOS:
                results.append(
                    await run_scenario(
                        client,
                        sc,
                        args.actors,
                        args.duration,
                        args.max_calls,
                        (app.pid, daemon.pid),
                    )
                )
        print_table(results)
        return results
    finally:
        for proc in (app, daemon):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 20)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--app", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per scenario")
    parser.add_argument("--max-calls", type=int, default=20_000, help="calls per scenario")
    parser.add_argument("--actors", type=int, default=1000, help="actor ids per actor type")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE as JSON")
    parser.add_argument(
        "--unix",
        action="store_true",
        help="app and client reach the daemon on its Unix socket (--listen-unix), not TCP",
    )
    args = parser.parse_args()
    if args.app:
        run_app(args.app)
        return
    binary = Path(os.environ.get("TROUPE_BIN", REPO_ROOT / "target" / "debug" / "troupe"))
    if not binary.is_file():
        raise SystemExit(f"daemon binary {binary} not found; build it or set TROUPE_BIN")
    with tempfile.TemporaryDirectory(prefix="troupe-bench-") as tmp:
        log_path = Path(tmp, "daemon.log")
        with log_path.open("wb") as log:
            try:
                results = asyncio.run(bench(args, binary, Path(tmp), log))
            except BaseException:
                sys.stderr.write(log_path.read_text(errors="replace")[-4000:])
                raise
    if args.json:
        Path(args.json).write_text(json.dumps([r.summary() for r in results]))


if __name__ == "__main__":
    main()
