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


inner_started = asyncio.Event()
inner_stopped: list[str] = []
outer_saw: list[BaseException] = []


@troupe.actor("cancel-inner")
class Inner(troupe.Actor):
    @troupe.method
    async def wait_until_cancelled(self) -> None:
        inner_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            inner_stopped.append(self.id)
            raise

    @troupe.method
    def ping(self) -> str:
        return "pong"


@troupe.actor("cancel-outer")
class Outer(troupe.Actor):
    @troupe.method
    async def call_inner(self, inner_id: str) -> None:
        try:
            await self.ctx.actor("cancel-inner", inner_id).wait_until_cancelled()
        except BaseException as e:
            outer_saw.append(e)
            raise


async def test_a_cancelled_turn_cancels_the_turns_it_waits_on(
    daemon: Daemon, client: troupe.Client
) -> None:
    inner_started.clear()
    inner_stopped.clear()
    outer_saw.clear()
    async with hosting(daemon.address, Outer, Inner):
        # No deadline anywhere: only the cascade of cancels ends the inner turn
        # before its turn timeout (a minute).
        call = asyncio.create_task(client.invoke("cancel-outer", "o1", "call_inner", ["n1"]))
        await asyncio.wait_for(inner_started.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        inner = client.actor("cancel-inner", "n1")
        assert await asyncio.wait_for(inner.ping(), 10) == "pong"
        assert inner_stopped == ["n1"]
        assert len(outer_saw) == 1
        assert isinstance(outer_saw[0], asyncio.CancelledError)
