"""A turn whose caller stopped waiting is cancelled: the daemon sends CancelTurn, the
handler sees CancelledError at its next await, its state changes are discarded, and the
actor's next call runs at once instead of waiting out the turn timeout."""

from __future__ import annotations

import asyncio

import pytest

import troupe

from .conftest import Daemon, hosting

started = asyncio.Event()
stopped: list[str] = []


@troupe.actor("waiter")
class Waiter(troupe.Actor):
    @troupe.method
    async def wait_forever(self) -> None:
        self.state["touched"] = True
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.append(self.id)
            raise

    @troupe.method
    def touched(self) -> bool:
        return bool(self.state.get("touched", False))


async def test_a_call_whose_caller_left_stops_its_handler(
    daemon: Daemon, client: troupe.Client
) -> None:
    started.clear()
    stopped.clear()
    async with hosting(daemon.address, Waiter):
        waiter = client.actor("waiter", "w1")
        with pytest.raises(troupe.DeadlineExceeded):
            await client.invoke("waiter", "w1", "wait_forever", timeout=0.5)
        assert started.is_set()
        # The next turn of the actor runs once the cancelled one ended (the type's turn
        # timeout is a minute): the handler was stopped, its change undone.
        assert await asyncio.wait_for(waiter.touched(), 10) is False
        assert stopped == ["w1"]
