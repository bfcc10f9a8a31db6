"""Hosts the `vehicle` actor: one actor per bus, keeping its last position and a short history.

Run with a daemon listening at $TROUPE_ADDR (default 127.0.0.1:7420):

    python examples/python/vehicle_app.py

Prints "registered" once the daemon accepted the actor type; stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from datetime import timedelta
from typing import Any

import troupe

HISTORY_LENGTH = 5
# A bus that reports nothing for this long is marked parked (by a durable reminder).
PARKED_AFTER = timedelta(minutes=10)


@troupe.actor("vehicle", idle_timeout=300)
class Vehicle(troupe.Actor):
    """A bus on the map. State: `position` (last fix), `history` (last few fixes), `reports`,
    `parked` (no report for PARKED_AFTER)."""

    @troupe.method
    async def report(self, lat: float, lon: float, ts: float) -> int:
        """Record a position fix; returns how many fixes this bus has reported in total."""
        if not (-90 <= lat <= 90 and -180 <= lon <= 180):
            raise ValueError(f"position out of range: lat={lat} lon={lon}")
        fix = {"lat": lat, "lon": lon, "ts": ts}
        last = self.state.get("position")
        if last is not None and ts < last["ts"]:
            # A late, out-of-order fix belongs in the history but must not move the bus back.
            history = sorted([*self.state.get("history", []), fix], key=lambda f: f["ts"])
        else:
            self.state["position"] = fix
            history = [*self.state.get("history", []), fix]
            # For whoever watches the buses move (client.watch_type("vehicle")).
            self.ctx.publish(fix)
        self.state["history"] = history[-HISTORY_LENGTH:]
        self.state["reports"] = self.state.get("reports", 0) + 1
        self.state["parked"] = False
        # Re-arm the "parked" reminder: setting it again replaces the pending one. It is
        # durable, so it fires even if the actor was deactivated or the daemon restarted.
        await self.ctx.set_reminder("parked", due=PARKED_AFTER, data={"last_ts": ts})
        return int(self.state["reports"])

    async def on_reminder(self, name: str, data: Any) -> None:
        """A reminder fired: here only "parked", PARKED_AFTER after the last report."""
        if name == "parked":
            self.state["parked"] = True

    @troupe.method(readonly=True)
    def position(self) -> dict[str, Any] | None:
        """The latest fix, or None before the first report."""
        value: dict[str, Any] | None = self.state.get("position")
        return value

    @troupe.method(readonly=True)
    def history(self) -> list[dict[str, Any]]:
        """The last few fixes, oldest first."""
        value: list[dict[str, Any]] = self.state.get("history", [])
        return value


async def main() -> None:
    app = troupe.App(actors=[Vehicle], app_name="vehicle-app")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, app.stop)
    runner = asyncio.create_task(app.run())
    registered = asyncio.create_task(app.wait_registered())
    await asyncio.wait({runner, registered}, return_when=asyncio.FIRST_COMPLETED)
    if registered.done():
        print(f"registered vehicle with the daemon at {app.address}", flush=True)
    else:
        registered.cancel()
    await runner


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main())
