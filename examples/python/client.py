"""Streams positions for a few buses into their `vehicle` actors, then prints a summary.

Run with the daemon and vehicle_app.py running:

    python examples/python/client.py
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime, timezone
from typing import Any

import troupe

BUSES = ["bus-7", "bus-12", "bus-31", "bus-44"]
FIXES_PER_BUS = 8
# A small loop in the centre of Zurich; each bus starts at a different point on it.
CENTRE = (47.3769, 8.5417)
RADIUS_DEG = 0.01


async def wait_for_host(client: troupe.Client, seconds: float = 10) -> None:
    """The app may still be registering: retry NotFound/Unavailable for a few seconds."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            await client.actor("vehicle", BUSES[0]).position()
            return
        except (troupe.NotFound, troupe.Unavailable):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def drive(client: troupe.Client, bus: str, index: int) -> int:
    """Send this bus's fixes in order; different buses are driven concurrently."""
    vehicle = client.actor("vehicle", bus)
    start = time.time()
    reports = 0
    for step in range(FIXES_PER_BUS):
        angle = 2 * math.pi * (index / len(BUSES) + step / 40)
        lat = CENTRE[0] + RADIUS_DEG * math.sin(angle)
        lon = CENTRE[1] + RADIUS_DEG * math.cos(angle)
        reports = await vehicle.report(lat=round(lat, 6), lon=round(lon, 6), ts=start + step * 15)
    return reports


def distance_m(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Equirectangular approximation; plenty for a few hundred metres."""
    mean_lat = math.radians((a["lat"] + b["lat"]) / 2)
    dx = math.radians(b["lon"] - a["lon"]) * math.cos(mean_lat)
    dy = math.radians(b["lat"] - a["lat"])
    return 6_371_000 * math.hypot(dx, dy)


async def live_map(events: troupe.Watch, moves: dict[str, int]) -> None:
    """Count each bus's moves as its actor publishes them: what a map on a screen would
    redraw from."""
    async for event in events:
        moves[event.actor_id] = moves.get(event.actor_id, 0) + 1
        if sum(moves.values()) == len(BUSES) * FIXES_PER_BUS:
            return


async def main() -> None:
    async with troupe.Client(timeout=10) as client:
        await wait_for_host(client)
        # Every bus's moves, as they happen, from one watch of the whole type.
        moves: dict[str, int] = {}
        async with client.watch_type("vehicle") as events:
            watching = asyncio.create_task(live_map(events, moves))
            totals = await asyncio.gather(*(drive(client, bus, i) for i, bus in enumerate(BUSES)))
            await asyncio.wait_for(watching, 10)
        print(
            f"live map: {sum(moves.values())} moves of {len(moves)} buses watched as they"
            " happened (client.watch_type)"
        )

        print(f"{'bus':<8} {'reports':>7} {'last position':>22} {'last leg':>9} {'history':>8}")
        for bus, total in zip(BUSES, totals, strict=True):
            vehicle = client.actor("vehicle", bus)
            position, history = await asyncio.gather(vehicle.position(), vehicle.history())
            leg = distance_m(history[-2], history[-1]) if len(history) > 1 else 0.0
            where = f"{position['lat']:.5f}, {position['lon']:.5f}"
            print(f"{bus:<8} {total:>7} {where:>22} {leg:>7.0f} m {len(history):>8}")

        try:
            await client.actor("vehicle", BUSES[0]).report(lat=123.0, lon=0.0, ts=time.time())
        except troupe.ActorError as e:
            print(f"bad fix refused by the actor: {e.remote_type}: {e.message}")

        stored = await client.get_state("vehicle", BUSES[0], ["reports"])
        print(f"stored state of {BUSES[0]}: reports={stored.get('reports')}")

        # Each report re-armed the bus's durable "parked" reminder.
        parked = [r for r in await client.list_reminders("vehicle") if r.name == "parked"]
        due_in = min(r.next_due for r in parked) - datetime.now(timezone.utc)
        minutes = round(due_in.total_seconds() / 60)
        print(f"parked reminders: {len(parked)}, first due in {minutes} min")


if __name__ == "__main__":
    asyncio.run(main())
