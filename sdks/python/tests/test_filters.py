"""Call filters (``App(filters=...)``) and the call's metadata (``self.ctx.metadata``),
against the real daemon: filters run around every turn in order, see what the turn is,
may replace the result, answer without the handler or refuse, and a turn they fail keeps
no state change."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import troupe

from .conftest import Daemon, hosting

seen: list[tuple[Any, ...]] = []
ticked: asyncio.Event | None = None


@troupe.actor("guarded")
class Guarded(troupe.Actor):
    @troupe.method
    async def add(self, n: int, *, note: str = "") -> dict[str, Any]:
        self.state["total"] = self.state.get("total", 0) + n
        return {"total": self.state["total"], "metadata": dict(self.ctx.metadata)}

    @troupe.method(readonly=True)
    def total(self) -> int:
        return int(self.state.get("total", 0))

    @troupe.method
    async def tick_soon(self) -> None:
        await self.ctx.set_timer("tick", "10ms", data={"x": 1})

    async def on_timer(self, name: str, data: Any) -> None:
        self.state["ticked"] = data
        if ticked is not None:
            ticked.set()


async def record(call: troupe.IncomingCall, next_: troupe.Next) -> Any:
    seen.append(
        (
            call.actor_type,
            call.actor_id,
            call.method,
            call.kind,
            call.args,
            dict(call.kwargs),
            dict(call.metadata),
            call.readonly,
            call.actor.id,
        )
    )
    return await next_()


async def tenant_guard(call: troupe.IncomingCall, next_: troupe.Next) -> Any:
    if call.kind == "call" and call.metadata.get("tenant") != "acme":
        raise PermissionError(f"tenant {call.metadata.get('tenant')!r} may not call {call.method}")
    if call.metadata.get("cached"):
        return -1  # answered here: the handler does not run
    result = await next_()
    if call.kwargs.get("note") == "undo":
        raise ValueError("refused after the handler ran")
    if call.kwargs.get("note") == "twice":
        await next_()
    if call.method == "add":
        return {**result, "filtered": True}
    return result


async def test_filters_run_around_every_turn_and_see_what_it_is(daemon: Daemon) -> None:
    global ticked
    ticked = asyncio.Event()
    seen.clear()
    async with (
        hosting(daemon.address, Guarded, filters=[record, tenant_guard]),
        troupe.Client(daemon.address, timeout=20) as client,
    ):
        acme = client.actor("guarded", "g1", metadata={"tenant": "acme"})
        assert await acme.add(2, note="x") == {
            "total": 2,
            "metadata": {"tenant": "acme"},
            "filtered": True,
        }
        first = ("guarded", "g1", "add", "call", (2,), {"note": "x"}, {"tenant": "acme"}, False)
        assert seen == [(*first, "g1")]

        # Refused before the handler: ActorError with the exception's type and message.
        evil = client.actor("guarded", "g1", metadata={"tenant": "evil"})
        with pytest.raises(troupe.ActorError) as refused:
            await evil.add(5)
        assert refused.value.remote_type == "PermissionError"
        assert "'evil' may not call add" in refused.value.message
        # Refused after the handler ran: its state change is undone.
        with pytest.raises(troupe.ActorError) as undone:
            await acme.add(5, note="undo")
        assert undone.value.remote_type == "ValueError"
        # A filter may not run the handler twice.
        with pytest.raises(troupe.ActorError) as twice:
            await acme.add(7, note="twice")
        assert twice.value.remote_type == "RuntimeError"
        assert "at most once" in twice.value.message
        assert await acme.total() == 2
        assert seen[-1][2:4] == ("total", "call") and seen[-1][7] is True

        # Answered by the filter: the handler does not run.
        cached = client.actor("guarded", "g1", metadata={"tenant": "acme", "cached": "1"})
        assert await cached.add(100) == -1
        assert await acme.total() == 2

        # Scheduled turns pass through the filters too, without metadata.
        await acme.tick_soon()
        await asyncio.wait_for(ticked.wait(), 10)
        timer: tuple[Any, ...] = (
            "guarded",
            "g1",
            "on_timer",
            "timer",
            ("tick", {"x": 1}),
            {},
            {},
            False,
        )
        assert (*timer, "g1") in seen


async def test_without_filters_the_handler_reads_the_metadata(daemon: Daemon) -> None:
    async with (
        hosting(daemon.address, Guarded),
        troupe.Client(daemon.address, timeout=20) as client,
    ):
        reply = await client.actor("guarded", "m1", metadata={"request-id": "r-7"}).add(1)
        assert reply == {"total": 1, "metadata": {"request-id": "r-7"}}
        assert (await client.actor("guarded", "m1").add(1))["metadata"] == {}


def test_a_filter_must_be_callable() -> None:
    with pytest.raises(TypeError, match="not callable"):
        troupe.App(actors=[Guarded], filters=[42])  # type: ignore[list-item]
