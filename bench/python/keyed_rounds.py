"""One round of keyed calls through the Python SDK, for bench/keyed_memory.sh
(CLIENT=python): what a caller on the SDK sees while the daemon sheds load.

    python bench/python/keyed_rounds.py ADDRESS [--calls 100000] [--concurrency 64]
        [--actors 2000] [--no-retry] [--timeout 10] [--max-seconds 150] [--rate N]

Each call is an invoke of `m` on one of --actors `counter` actors (the Rust
bench app hosts them), with the SDK's fresh idempotency key, as ghz sends them
in the script's default mode. With the SDK's retries on (the default) a
RESOURCE_EXHAUSTED the daemon marks with a retry pushback is resent; with
--no-retry every call is sent once. Prints one line: calls/s, the p99 latency
of answered calls, and how many calls ended how. The round stops after --calls
calls or --max-seconds, whichever comes first; --rate holds the callers together to
at most N calls a second.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter

import troupe


async def round_of_calls(args: argparse.Namespace) -> str:
    outcomes: Counter[str] = Counter()
    latencies: list[float] = []
    started = time.monotonic()
    stop_at = started + args.max_seconds
    left = args.calls
    # With --rate, the time the next call may start: the callers take turns.
    next_start = started

    async with troupe.Client(args.address, timeout=args.timeout, retry=not args.no_retry) as client:

        async def caller() -> None:
            nonlocal left, next_start
            while left > 0 and time.monotonic() < stop_at:
                left -= 1
                if args.rate:
                    next_start += 1 / args.rate
                    await asyncio.sleep(max(0.0, next_start - time.monotonic()))
                actor = f"k{random.randrange(args.actors)}"
                sent = time.monotonic()
                try:
                    await client.invoke("counter", actor, "m")
                except troupe.TroupeError as e:
                    outcomes[type(e).__name__] += 1
                    continue
                latencies.append(time.monotonic() - sent)
                outcomes["ok"] += 1

        await asyncio.gather(*(caller() for _ in range(args.concurrency)))
    elapsed = time.monotonic() - started
    calls = sum(outcomes.values())
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    ended = " ".join(f"{n} {what}" for what, n in outcomes.most_common())
    return f"{calls / elapsed:.0f} {p99:.1f} {ended}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--actors", type=int, default=2000)
    parser.add_argument("--no-retry", action="store_true")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--max-seconds", type=float, default=150.0)
    parser.add_argument("--rate", type=float, default=0.0, help="calls per second at most")
    print(asyncio.run(round_of_calls(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
