"""Watching every actor of a type: client.watch_type(type) streaming their events
(ActorClient.WatchType), on the real daemon through the test kit, with an id prefix and the
SyncClient's watch_type. Run once per core (TROUPE_SDK_CORE)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import troupe
from troupe import ActorEvent
from troupe.testing import TestEnv

from .conftest import Daemon, hosting
from .events_common import WAIT, Bus, take


@troupe.actor("events_tram")
class Tram(troupe.Actor):
    @troupe.method
    async def publish(self, value: Any) -> None:
        self.ctx.publish(value)


def _by_actor(events: list[ActorEvent]) -> dict[str, list[Any]]:
    """Each actor's values, in the order they came."""
    by_actor: dict[str, list[Any]] = {}
    for event in events:
        by_actor.setdefault(event.actor_id, []).append(event.value)
    return by_actor


async def test_watch_type_streams_every_actor_of_the_type(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus, Tram)

    async def publish(actor_id: str, batches: list[list[Any]]) -> None:
        # One turn after another, so that the actor's order is the batches'.
        for batch in batches:
            await troupe_env.actor(Bus, actor_id).publish(batch)

    async with troupe_env.client.watch_type(Bus) as events:
        # Another type's events are not this stream's.
        await troupe_env.actor(Tram, "tram1").publish("tram")
        await asyncio.gather(
            publish("t1", [[1, 2], [3]]),
            publish("t2", [["x"], ["y", "z"]]),
        )
        got = await take(events, 6)
    assert _by_actor(got) == {"t1": [1, 2, 3], "t2": ["x", "y", "z"]}
    assert all(e.actor_type == "events_bus" for e in got)
    assert not any(e.missed_before for e in got)
    assert all(e.published_at_unix_ms > 0 for e in got)
    assert len({e.cursor for e in got}) == len(got)
    assert events.closed


async def test_watch_type_resumes_after_a_cursor(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.client.actor("events_bus", "r1"), troupe_env.client.actor("events_bus", "r2")
    async with troupe_env.client.watch_type("events_bus") as events:
        for i, value in enumerate(["a", "b", "c", "d"]):
            await bus[i % 2].publish([value])
        first = await take(events, 4)
    assert [(e.actor_id, e.value) for e in first] == [
        ("r1", "a"),
        ("r2", "b"),
        ("r1", "c"),
        ("r2", "d"),
    ]
    # After "b": "c" and "d" are held, so they come again; "a" and "b" do not.
    await bus[1].publish(["e"])
    async with troupe_env.client.watch_type(Bus, after=first[1].cursor) as events:
        resumed = await take(events, 3)
        # Nothing else came between: the next event is the one published now.
        await bus[0].publish(["f"])
        [after] = await take(events, 1)
    assert _by_actor(resumed) == {"r1": ["c"], "r2": ["d", "e"]}
    assert (after.actor_id, after.value) == ("r1", "f")
    assert not any(e.missed_before for e in [*resumed, after])


async def test_watch_type_of_an_id_prefix_gets_only_those_actors(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    client = troupe_env.client
    async with client.watch_type(Bus, id_prefix="acme/") as events:
        for actor_id, value in [("acme/1", "a"), ("other/2", "x"), ("acme/3", "b")]:
            await troupe_env.actor(Bus, actor_id).publish([value])
        got = await take(events, 2)
        # Nothing of other/2 came between, nor after.
        await troupe_env.actor(Bus, "acme/1").publish(["c"])
        [last] = await take(events, 1)
    assert [(e.actor_id, e.value) for e in [*got, last]] == [
        ("acme/1", "a"),
        ("acme/3", "b"),
        ("acme/1", "c"),
    ]
    # Resumed with its prefix, the watch keeps to it.
    async with client.watch_type(Bus, after=got[0].cursor, id_prefix="acme/") as events:
        resumed = await take(events, 2)
    assert [e.value for e in resumed] == ["b", "c"]
    with pytest.raises(troupe.InvalidArgument, match=r"id_prefix='pppp.*id prefix"):
        async with client.watch_type(Bus, id_prefix="p" * 300) as events:
            await asyncio.wait_for(anext(events), WAIT)


@pytest.mark.parametrize(
    ("actor_type", "after", "match"),
    [
        ("events_bus", "zz", r"watch_type events_bus: .*cursor"),
        ("", None, r"watch_type : "),
    ],
    ids=["malformed cursor", "empty type"],
)
async def test_watch_type_refuses_a_bad_cursor_or_type(
    troupe_env: TestEnv, actor_type: str, after: str | None, match: str
) -> None:
    await troupe_env.host(Bus)
    with pytest.raises(troupe.InvalidArgument, match=match):
        async with troupe_env.client.watch_type(actor_type, after=after) as events:
            await asyncio.wait_for(anext(events), WAIT)


async def test_watch_type_of_a_type_nobody_registered_is_not_found(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Bus):
        # Past the daemon's start-up grace (--host-wait 200ms), in which a watch of an
        # unknown type waits for its app rather than being refused.
        await asyncio.sleep(0.2)
        with pytest.raises(troupe.NotFound, match=r"watch_type events_nobody: .*events_nobody"):
            async with client.watch_type("events_nobody") as events:
                await asyncio.wait_for(anext(events), WAIT)


async def test_sync_client_watch_type(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    sync = await asyncio.to_thread(troupe.SyncClient, troupe_env.daemon.address, timeout=WAIT)
    try:
        events = await asyncio.to_thread(sync.watch_type(Bus, id_prefix="s").__enter__)
        await troupe_env.actor(Bus, "s1").publish(["a"])
        await troupe_env.actor(Bus, "t1").publish(["t"])
        await troupe_env.actor(Bus, "s2").publish(["b"])
        got = await asyncio.wait_for(asyncio.to_thread(lambda: [next(events), next(events)]), WAIT)
        assert [(e.actor_type, e.actor_id, e.value) for e in got] == [
            ("events_bus", "s1", "a"),
            ("events_bus", "s2", "b"),
        ]
        await asyncio.to_thread(events.close)
        assert await asyncio.to_thread(next, events, None) is None
    finally:
        await asyncio.to_thread(sync.close)
