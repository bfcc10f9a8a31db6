"""What a wake-up of another thread costs on this host, the figure that bounds sequential calls.

    python bench/python/wake_cost.py [--round-trips 20000]

A sequential call through Troupe wakes a thread in another process (or on the
other side of an SDK's hand-off) about eight times, and each wake-up of a
thread on another CPU costs what the host makes it cost: on a virtual machine
whose idle CPUs halt (cpuidle `haltpoll` with `guest_halt_poll_ns=0`), each
one is an interrupt to a halted virtual CPU, ten times a wake-up on the same
CPU. So the same build's sequential calls/s can differ twofold between hosts
(docs/architecture.md has the figures); the bench scripts print this line so
that a table says which kind of host made it.

Two processes pass a byte back and forth over pipes, pinned to the same CPU
and then to two CPUs; a round trip is two wake-ups. Stdlib only, loopback
free, bounded by --round-trips.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
IDLE_DRIVER = Path("/sys/devices/system/cpu/cpuidle/current_driver")


def round_trip_us(cpus: tuple[int, int], round_trips: int) -> float:
    """Mean µs per round trip between a parent pinned to cpus[0] and a child on cpus[1]."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setaffinity(0, {cpus[1]})
            for _ in range(round_trips):
                os.read(to_child_r, 1)
                os.write(to_parent_w, b"x")
        finally:
            os._exit(0)
    os.sched_setaffinity(0, {cpus[0]})
    # The first few round trips bring both processes in; they are not timed.
    warm = min(100, round_trips)
    for _ in range(warm):
        os.write(to_child_w, b"x")
        os.read(to_parent_r, 1)
    start = time.perf_counter()
    for _ in range(round_trips - warm):
        os.write(to_child_w, b"x")
        os.read(to_parent_r, 1)
    elapsed = time.perf_counter() - start
    os.waitpid(pid, 0)
    for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
        os.close(fd)
    return elapsed * 1e6 / max(1, round_trips - warm)


def idle_policy() -> str:
    """The host's idle driver, and its halt-polling window when it has one."""
    try:
        driver = IDLE_DRIVER.read_text().strip()
    except OSError:
        return "cpuidle unknown"
    try:
        poll = f", guest_halt_poll_ns={HALT_POLL.read_text().strip()}"
    except OSError:
        poll = ""
    return f"cpuidle {driver}{poll}"


def summary(round_trips: int) -> str:
    """One line: the idle policy and the round trips on one CPU and across two."""
    allowed = sorted(os.sched_getaffinity(0))
    try:
        same = round_trip_us((allowed[0], allowed[0]), round_trips)
        line = f"host: {idle_policy()}; wake-up round trip {same:.1f} µs on one CPU"
        if len(allowed) > 1:
            across = round_trip_us((allowed[0], allowed[1]), round_trips)
            line += f", {across:.1f} µs across two ({across / same:.1f}x)"
        else:
            line += " (one CPU allowed)"
    finally:
        os.sched_setaffinity(0, set(allowed))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20000)
    args = parser.parse_args()
    print(summary(max(1, args.round_trips)))


if __name__ == "__main__":
    main()
