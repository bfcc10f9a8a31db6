"""Durable tells against the real daemon (docs/delivery.md): ``tell(..., durable=True)``
from a client and from a turn, and a type's ``durable_tells`` default."""

from __future__ import annotations

import asyncio
from typing import Any

import troupe

from .conftest import Daemon, hosting


@troupe.actor("ledger", durable_tells=True)
class Ledger(troupe.Actor):
    @troupe.method
    async def add(self, n: int) -> None:
        self.state["entries"] = [*self.state.get("entries", []), n]

    @troupe.method
    async def relay(self, to: str, n: int) -> None:
        # From a turn: acknowledged once stored in the other actor's inbox.
        await self.ctx.tell("journal", to, "add", [n], durable=True)


@troupe.actor("journal")
class Journal(Ledger):
    pass


async def entries(client: troupe.Client, ty: str, id: str, want: int) -> list[Any]:
    """The actor's entries once there are ``want`` of them (tells run after they return)."""
    for _ in range(200):
        state = await client.get_state(ty, id)
        if len(state.get("entries", [])) >= want:
            return list(state["entries"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"{ty}/{id} has {await client.get_state(ty, id)}, want {want} entries")


def test_durable_tells_is_part_of_the_type_spec() -> None:
    spec = Ledger.__troupe_actor__  # type: ignore[attr-defined]
    assert spec.to_proto().durable_tells is True
    assert Journal.__troupe_actor__.to_proto().durable_tells is False  # type: ignore[attr-defined]


async def test_durable_tells_arrive_in_order(daemon: Daemon, client: troupe.Client) -> None:
    async with hosting(daemon.address, Ledger, Journal):
        for n in range(20):
            await client.tell("journal", "j1", "add", [n], durable=True)
        assert await entries(client, "journal", "j1", 20) == list(range(20))
        # The type's default makes these durable; best effort still works.
        for n in range(5):
            await client.tell("ledger", "l1", "add", [n])
        await client.tell("ledger", "l1", "add", [5], durable=False)
        assert await entries(client, "ledger", "l1", 6) == list(range(6))


async def test_a_turn_sends_a_durable_tell(daemon: Daemon, client: troupe.Client) -> None:
    async with hosting(daemon.address, Ledger, Journal):
        await client.actor("ledger", "l2").relay("j2", 7)
        assert await entries(client, "journal", "j2", 1) == [7]
