"""A Python app for benchmarks against a daemon you started: hosts `counter` and `echo`.

    python bench/python/idle_app.py [ADDR] [--idle-timeout SECONDS] [--report SECONDS]

`counter` is stateful and write-behind: `incr` adds 1 (or its argument) to the
state key `count` and returns it. The Python counterpart of the Rust
tests/src/bin/bench_app.rs `counter`, e.g. for idle-out benchmarks: activate many
actors (tell_many ADDR counter N) and watch them all deactivate together.
`echo` has no state (`incr` returns its argument), so a benchmark measures the
daemon's activations, not the state it keeps (bench/idle_out.sh uses it).

ADDR defaults to $TROUPE_ADDR, then 127.0.0.1:7420. Without --idle-timeout the
type leaves its idle timeout to the daemon (`troupe serve --idle-timeout`).
Prints `registered` once the daemon accepted the type; with --report, a line
`active=N activated=A deactivated=D` every SECONDS while the numbers change.
SIGINT or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from dataclasses import dataclass

import troupe


@dataclass
class Stats:
    activated: int = 0
    deactivated: int = 0


STATS = Stats()


class Counter(troupe.Actor):
    """Declared as type `counter` in main(), with the idle timeout given there."""

    def on_activate(self) -> None:
        STATS.activated += 1

    def on_deactivate(self) -> None:
        STATS.deactivated += 1

    @troupe.method
    def incr(self, by: int = 1) -> int:
        count = int(self.state.get("count", 0)) + by
        self.state["count"] = count
        return count


class Echo(troupe.Actor):
    """Declared as type `echo` in main(): no state."""

    def on_activate(self) -> None:
        STATS.activated += 1

    def on_deactivate(self) -> None:
        STATS.deactivated += 1

    @troupe.method
    def incr(self, by: int = 1) -> int:
        return by


async def report(every: float) -> None:
    last = (-1, -1)
    while True:
        await asyncio.sleep(every)
        now = (STATS.activated, STATS.deactivated)
        if now != last:
            active = now[0] - now[1]
            print(f"active={active} activated={now[0]} deactivated={now[1]}", flush=True)
            last = now


async def run(args: argparse.Namespace) -> None:
    troupe.actor(
        "counter", state="write_behind", idle_timeout=args.idle_timeout, max_mailbox=10_000
    )(Counter)
    troupe.actor("echo", idle_timeout=args.idle_timeout, max_mailbox=10_000)(Echo)
    app = troupe.App(actors=[Counter, Echo], address=args.addr, app_name="bench-python-idle")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, app.stop)
    runner = asyncio.create_task(app.run())
    registered = asyncio.create_task(app.wait_registered(timeout=60))
    await asyncio.wait({runner, registered}, return_when=asyncio.FIRST_COMPLETED)
    if not registered.done():
        registered.cancel()
        await runner  # raises why the app stopped before registering
        return
    registered.result()
    print("registered", flush=True)
    reporter = asyncio.create_task(report(args.report)) if args.report > 0 else None
    try:
        await runner
    finally:
        if reporter is not None:
            reporter.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("addr", nargs="?", help="daemon address (default $TROUPE_ADDR)")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the type's idle timeout (default: the daemon's --idle-timeout)",
    )
    parser.add_argument(
        "--report",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="print active/activated/deactivated counts this often (default: never)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
