"""What the event tests share (test_events_*.py, test_watch_reconnect.py): the actor they
publish from on the daemon, and a bounded read of a watch."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import troupe
from troupe import ActorEvent

# Every wait on a watch or the daemon is bounded by this (seconds).
WAIT = 10


@troupe.actor("events_bus", reentrant=True)
class Bus(troupe.Actor):
    @troupe.method
    async def publish(self, values: list[Any]) -> int:
        for value in values:
            self.ctx.publish(value)
        return len(values)

    @troupe.method
    async def publish_bytes(self, text: str) -> None:
        self.ctx.publish(text.encode())

    @troupe.method
    async def publish_then_fail(self, values: list[Any]) -> None:
        for value in values:
            self.ctx.publish(value)
        self.state["touched"] = True
        raise RuntimeError("failed after publishing")

    @troupe.method
    async def publish_unencodable(self) -> str:
        try:
            self.ctx.publish({"not json": object()})
        except TypeError as e:
            return str(e)
        return "published"

    @troupe.method
    async def outer(self) -> None:
        """Publishes around two turns of its own it calls (re-entering itself): one that
        fails, one that succeeds. Their events are theirs, not this turn's."""
        self.ctx.publish("outer-1")
        me = self.ctx.actor(Bus, self.id)
        with contextlib.suppress(troupe.ActorError):
            await me.publish_then_fail(["inner-failed"])
        await me.publish(["inner-ok"])
        self.ctx.publish("outer-2")

    @troupe.method
    async def schedule(self) -> None:
        await self.ctx.set_reminder("r", "1m")
        await self.ctx.set_timer("t", "2m")
        await self.ctx.set_alarm("3m", {"n": 3})

    async def on_reminder(self, name: str, data: Any) -> None:
        self.ctx.publish({"reminder": name})

    async def on_timer(self, name: str, data: Any) -> None:
        self.ctx.publish({"timer": name})

    async def on_alarm(self, data: Any) -> None:
        self.ctx.publish({"alarm": data})


async def take(events: troupe.Watch, n: int) -> list[ActorEvent]:
    """The next ``n`` events of ``events``, within WAIT seconds."""

    async def read() -> list[ActorEvent]:
        return [await anext(events) for _ in range(n)]

    return await asyncio.wait_for(read(), WAIT)
