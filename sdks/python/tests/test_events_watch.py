"""Watching one actor's events: client.watch(type, id) streaming them (ActorClient.Watch), on
a fake of the call and on the real daemon through the test kit; the SyncClient's watch, the
client's token and certificate on the watch's channel, and Client.close ending watches (of a
type too). Run once per core (TROUPE_SDK_CORE)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

import troupe
from troupe._proto.troupe.v1 import client_pb2, common_pb2
from troupe.testing import TestEnv

from .conftest import hosting
from .events_common import WAIT, Bus, take
from .test_tls import make_certs, tls_daemon_of


def test_watch_refuses_an_after_that_is_not_a_cursor() -> None:
    client = troupe.Client("127.0.0.1:1")
    with pytest.raises(TypeError, match="after must be an event's cursor"):
        client.watch("bus", "b1", after=cast(Any, 42))
    with pytest.raises(TypeError, match="after must be an event's cursor"):
        client.watch_type("bus", after=cast(Any, 42))


class _FakeCall:
    """A watch RPC that answered its headers and sends ``events``, then stays open."""

    def __init__(self, events: list[client_pb2.ActorEvent]) -> None:
        self._events = events
        self.cancelled = False

    async def initial_metadata(self) -> tuple[()]:
        return ()

    def done(self) -> bool:
        return self.cancelled

    async def read(self) -> client_pb2.ActorEvent:
        if self._events:
            return self._events.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def cancel(self) -> bool:
        self.cancelled = True
        return True


async def test_an_event_that_does_not_name_its_actor_is_the_watched_actors() -> None:
    """A daemon from before ActorEvent.actor sends none: a one-actor watch's events are
    still its actor's; one that names its actor is taken at its word."""
    payload = common_pb2.Payload(content_type=common_pb2.CONTENT_TYPE_JSON, data=b"1")
    call = _FakeCall(
        [
            client_pb2.ActorEvent(payload=payload, cursor="0000000000000001-1"),
            client_pb2.ActorEvent(
                payload=payload,
                cursor="0000000000000001-2",
                actor=common_pb2.ActorRef(type="bus", id="b2"),
            ),
        ]
    )
    watch = troupe.Watch(
        lambda _after: cast(Any, call),
        "watch bus/b1",
        again="client.watch(...)",
        actor_type="bus",
        actor_id="b1",
    )
    async with watch as events:
        got = await take(events, 2)
    assert [(e.actor_type, e.actor_id, e.value) for e in got] == [
        ("bus", "b1", 1),
        ("bus", "b2", 1),
    ]
    assert call.cancelled


# --- On the daemon ----------------------------------------------------------------------------


def _cursor(cursor: str) -> tuple[int, int]:
    """A cursor's (epoch, number): they look like ``<16 hex digits>-<decimal>``."""
    epoch, _, seq = cursor.partition("-")
    assert len(epoch) == 16, cursor
    return int(epoch, 16), int(seq)


async def test_events_of_several_turns_arrive_in_order(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b1")
    async with troupe_env.client.watch(Bus, "b1") as events:
        assert await bus.publish([1, "two", {"three": [3]}]) == 3
        await bus.publish_bytes("four")
        await bus.publish([None, 6])
        got = await take(events, 6)
    assert [e.value for e in got] == [1, "two", {"three": [3]}, b"four", None, 6]
    assert not any(e.missed_before for e in got)
    assert all(e.published_at_unix_ms > 0 for e in got)
    cursors = [_cursor(e.cursor) for e in got]
    assert len({epoch for epoch, _ in cursors}) == 1
    seqs = [seq for _, seq in cursors]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert events.closed


async def test_resume_after_a_cursor(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b5")
    async with troupe_env.client.watch(Bus, "b5") as events:
        await bus.publish(["a", "b", "c"])
        first = await take(events, 3)
    cursor = first[1].cursor  # resume after "b": "c" is held, so it comes again
    await bus.publish(["d", "e"])
    async with troupe_env.client.watch(Bus, "b5", after=cursor) as events:
        resumed = await take(events, 3)
        # Nothing else came between: the next event is the one published now.
        await bus.publish(["f"])
        [after] = await take(events, 1)
    assert [e.value for e in resumed] == ["c", "d", "e"]
    assert resumed[0].cursor == first[2].cursor
    assert not any(e.missed_before for e in [*resumed, after])
    assert after.value == "f"


async def test_iterating_without_entering_starts_the_watch(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b6")
    async with troupe_env.client.watch(Bus, "b6") as events:
        await bus.publish(["a", "b"])
        [a, _] = await take(events, 2)
    # From a cursor, so the held "b" is there whenever the watch starts.
    watch = troupe_env.client.watch(Bus, "b6", after=a.cursor)
    try:
        [b] = await take(watch, 1)
    finally:
        await watch.aclose()
    assert b.value == "b"
    assert await anext(watch, None) is None  # closed: the iteration is over


async def test_a_malformed_cursor_is_invalid_argument(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    with pytest.raises(troupe.InvalidArgument, match=r"watch events_bus/b7: .*cursor"):
        async with troupe_env.client.watch(Bus, "b7", after="zz") as events:
            await asyncio.wait_for(anext(events), WAIT)


async def test_a_cursor_of_another_epoch_says_events_were_missed(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b8")
    async with troupe_env.client.watch(Bus, "b8") as events:
        await bus.publish(["a"])
        [a] = await take(events, 1)
    epoch, seq = _cursor(a.cursor)
    elsewhere = f"{(epoch + 1) % 2**64:016x}-{seq}"  # as from a restarted or other owner
    async with troupe_env.client.watch(Bus, "b8", after=elsewhere) as events:
        await bus.publish(["b"])
        got = [await asyncio.wait_for(anext(events), WAIT)]
        while got[-1].value != "b":
            got.append(await asyncio.wait_for(anext(events), WAIT))
    assert got[0].missed_before
    assert not any(e.missed_before for e in got[1:])
    assert [e.value for e in got] in (["a", "b"], ["b"])


async def test_watched_events_name_their_actor(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    async with troupe_env.client.watch(Bus, "b11") as events:
        await troupe_env.actor(Bus, "b11").publish(["a", "b"])
        got = await take(events, 2)
    assert [(e.actor_type, e.actor_id, e.value) for e in got] == [
        ("events_bus", "b11", "a"),
        ("events_bus", "b11", "b"),
    ]


@pytest.mark.parametrize("kind", ["watch", "watch_type"])
async def test_closing_the_client_ends_its_watches(troupe_env: TestEnv, kind: str) -> None:
    await troupe_env.host(Bus)
    client = troupe.Client(troupe_env.daemon.address)
    watch = client.watch(Bus, "b9") if kind == "watch" else client.watch_type(Bus)
    async with watch as events:
        waiting = asyncio.create_task(anext(events, None))
        await client.close()
        assert await asyncio.wait_for(waiting, WAIT) is None
    assert events.closed


async def test_sync_client_watch(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    # Its calls block: made from threads, so that this loop goes on hosting the actor.
    sync = await asyncio.to_thread(troupe.SyncClient, troupe_env.daemon.address, timeout=WAIT)
    try:
        events = await asyncio.to_thread(sync.watch(Bus, "b10").__enter__)
        await troupe_env.actor(Bus, "b10").publish(["a", "b"])
        got = await asyncio.wait_for(asyncio.to_thread(lambda: [next(events), next(events)]), WAIT)
        assert [e.value for e in got] == ["a", "b"]
        await asyncio.to_thread(events.close)
        assert await asyncio.to_thread(next, events, None) is None
    finally:
        await asyncio.to_thread(sync.close)


async def test_a_watch_carries_the_clients_token_and_certificate(
    daemon_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the native core the watch has a grpcio channel of its own: it must reach the
    daemon as the client's calls do."""
    for variable in ("TROUPE_API_TOKEN", "TROUPE_APP_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    certs = make_certs(tmp_path / "certs")
    d = tls_daemon_of(
        daemon_binary,
        tmp_path,
        certs,
        require_client_certs=True,
        env={"TROUPE_API_TOKEN": "api-events-7c1e", "TROUPE_APP_TOKEN": "app-events-2b9f"},
    )
    tls: dict[str, Any] = {
        "tls_ca": certs.ca,
        "tls_cert": certs.pem("app"),
        "tls_key": certs.key("app"),
    }
    await d.start()
    try:
        async with (
            hosting(d.address, Bus, token="app-events-2b9f", **tls),
            troupe.Client(d.address, timeout=WAIT, token="api-events-7c1e", **tls) as client,
            troupe.Client(d.address, timeout=WAIT, **tls) as anonymous,
        ):
            with pytest.raises(troupe.Unauthenticated, match="watch events_bus/s1"):
                await asyncio.wait_for(anonymous.watch(Bus, "s1").__aenter__(), WAIT)
            async with client.watch(Bus, "s1") as events:
                await client.actor(Bus, "s1").publish(["secure"])
                [event] = await take(events, 1)
            assert event.value == "secure"
    finally:
        await d.kill()
