"""Watches that re-open a broken stream by themselves (``reconnect=True``): against an
in-process fake of the daemon's Watch and WatchType that scripts each stream, and against the
real daemon restarted under them. Run once per core (TROUPE_SDK_CORE)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

import troupe
from troupe import _events
from troupe._payload import encode_result
from troupe._proto.troupe.v1 import client_pb2, client_pb2_grpc

from .conftest import Daemon, fake_server, free_port, hosting
from .events_common import WAIT, take

# A daemon's restart and the watches' paused attempts around it (up to 5 s each) take longer.
RESTART_WAIT = 30


# --- the fake daemon ------------------------------------------------------------------------


@dataclass
class Stream:
    """What the fake answers one watch RPC: ``refuse`` a status instead of the headers;
    else the headers, ``events``, then ``end`` (None: the stream ends without an error), or
    it stays open when ``hold``."""

    events: list[client_pb2.ActorEvent] = field(default_factory=list)
    end: grpc.StatusCode | None = None
    hold: bool = False
    refuse: grpc.StatusCode | None = None


class FakeWatches(client_pb2_grpc.ActorClientServicer):
    """Answers each Watch or WatchType with the next of ``streams`` (past them: headers, then
    open until cancelled), recording every request. A stream ends only once ``begun`` is set:
    the test sets it when its watch has begun, as a stream that ended with its headers
    would fail the first open (the status came before the watch returned)."""

    def __init__(self) -> None:
        self.streams: list[Stream] = []
        self.requests: list[client_pb2.WatchRequest | client_pb2.WatchTypeRequest] = []
        self.begun = asyncio.Event()

    async def _serve(
        self, request: client_pb2.WatchRequest | client_pb2.WatchTypeRequest, context: Any
    ) -> AsyncIterator[client_pb2.ActorEvent]:
        self.requests.append(request)
        stream = self.streams.pop(0) if self.streams else Stream(hold=True)
        if stream.refuse is not None:
            await context.abort(stream.refuse, f"fake refusal {stream.refuse.name}")
        await context.send_initial_metadata(())
        for event in stream.events:
            yield event
        await self.begun.wait()
        if stream.hold:
            await asyncio.Event().wait()  # until the client cancels
        if stream.end is not None:
            await context.abort(stream.end, "the daemon is shutting down (fake)")

    # grpc.aio serves a stream from a handler that is an async generator function itself.
    async def Watch(
        self, request: client_pb2.WatchRequest, context: Any
    ) -> AsyncIterator[client_pb2.ActorEvent]:
        async for event in self._serve(request, context):
            yield event

    async def WatchType(
        self, request: client_pb2.WatchTypeRequest, context: Any
    ) -> AsyncIterator[client_pb2.ActorEvent]:
        async for event in self._serve(request, context):
            yield event


@pytest.fixture
async def fake() -> AsyncIterator[tuple[str, FakeWatches]]:
    servicer = FakeWatches()
    async with fake_server(client_pb2_grpc.add_ActorClientServicer_to_server, servicer) as address:
        yield address, servicer


def _event(n: int, *, missed_before: bool = False) -> client_pb2.ActorEvent:
    return client_pb2.ActorEvent(
        payload=encode_result(n),
        cursor=f"00000000000000aa-{n}",
        missed_before=missed_before,
    )


class Heard(logging.Handler):
    """The "troupe" logger's records, as they come; ``changed`` (of the test's loop) is set
    at each, from whichever thread logs it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self._loop.call_soon_threadsafe(self.changed.set)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]

    async def until(
        self,
        heard: Callable[[list[str]], bool],
        *,
        level: int = logging.DEBUG,
        timeout: float = WAIT,
    ) -> None:
        """Return once ``heard(self.messages(level))`` holds."""

        async def wait() -> None:
            while not heard(self.messages(level)):
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout)


@contextmanager
def listening() -> Iterator[Heard]:
    logger = logging.getLogger("troupe")
    handler, level = Heard(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- against the fake -----------------------------------------------------------------------


async def test_a_broken_stream_resumes_after_the_last_event_and_a_refusal_raises(
    fake: tuple[str, FakeWatches],
) -> None:
    address, servicer = fake
    servicer.streams = [
        Stream(events=[_event(1), _event(2)], end=grpc.StatusCode.UNAVAILABLE),
        Stream(refuse=grpc.StatusCode.INVALID_ARGUMENT),
    ]
    async with (
        troupe.Client(address, timeout=WAIT) as client,
        client.watch("bus", "b1", reconnect=True) as events,
    ):
        servicer.begun.set()
        got = await take(events, 2)
        with pytest.raises(troupe.InvalidArgument, match=r"watch bus/b1: fake refusal"):
            await asyncio.wait_for(anext(events), WAIT)
        assert events.closed
    assert [e.value for e in got] == [1, 2]
    assert [r.after for r in servicer.requests] == ["", got[1].cursor]
    assert [r.actor.id for r in servicer.requests if isinstance(r, client_pb2.WatchRequest)] == [
        "b1",
        "b1",
    ]


async def test_a_type_watch_resumes_with_its_prefix_and_logs_each_reopen_once(
    fake: tuple[str, FakeWatches],
) -> None:
    address, servicer = fake
    servicer.streams = [
        Stream(events=[_event(1)], end=grpc.StatusCode.UNAVAILABLE),
        # The daemon unreachable for a while: refused before any headers.
        Stream(refuse=grpc.StatusCode.UNAVAILABLE),
        Stream(refuse=grpc.StatusCode.UNAVAILABLE),
        # Then the daemon ends the re-opened stream (shutting down again).
        Stream(events=[_event(2, missed_before=True), _event(3)]),
        Stream(events=[_event(4)], hold=True),
    ]
    with listening() as heard:
        async with (
            troupe.Client(address, timeout=WAIT) as client,
            client.watch_type(
                "bus", after="00000000000000aa-0", id_prefix="acme/", reconnect=True
            ) as events,
        ):
            servicer.begun.set()
            got = await take(events, 4)
    assert [e.value for e in got] == [1, 2, 3, 4]
    # The daemon's word on missed events is kept; with a cursor to resume from, the SDK adds
    # none of its own.
    assert [e.missed_before for e in got] == [False, True, False, False]
    requests = servicer.requests
    assert all(isinstance(r, client_pb2.WatchTypeRequest) for r in requests)
    assert [(r.after, getattr(r, "id_prefix", None)) for r in requests] == [
        ("00000000000000aa-0", "acme/"),
        (got[0].cursor, "acme/"),
        (got[0].cursor, "acme/"),
        (got[0].cursor, "acme/"),
        (got[2].cursor, "acme/"),
    ]
    # Two breaks, two re-opens: each said once at INFO, the failed attempts only at DEBUG.
    reopened = heard.messages(logging.INFO)
    assert len(reopened) == 2, heard.messages()
    assert reopened[0].startswith(
        "watch_type bus id_prefix='acme/': the stream broke (UNAVAILABLE: the daemon is"
        " shutting down (fake)); re-opened it after cursor 00000000000000aa-1, attempt 3"
    ), reopened
    assert reopened[1].startswith(
        "watch_type bus id_prefix='acme/': the stream broke (the daemon ended the stream);"
        " re-opened it after cursor 00000000000000aa-3, attempt 1"
    ), reopened


async def test_a_watch_with_no_cursor_marks_the_first_event_after_a_reopen(
    fake: tuple[str, FakeWatches],
) -> None:
    """Re-opened from now on, a watch that had no cursor may have skipped events published
    while its stream was down, and the daemon cannot tell: the SDK says so itself."""
    address, servicer = fake
    servicer.streams = [
        Stream(end=grpc.StatusCode.UNAVAILABLE),
        Stream(refuse=grpc.StatusCode.UNAVAILABLE),
        Stream(events=[_event(1), _event(2)], hold=True),
    ]
    async with (
        troupe.Client(address, timeout=WAIT) as client,
        client.watch_type("bus", reconnect=True) as events,
    ):
        servicer.begun.set()
        got = await take(events, 2)
    assert [(e.value, e.missed_before) for e in got] == [(1, True), (2, False)]
    assert [r.after for r in servicer.requests] == ["", "", ""]


async def test_a_reconnecting_watch_still_raises_when_its_first_open_fails() -> None:
    """The first open is as without reconnect: the call returning means the daemon watches."""
    async with troupe.Client(f"127.0.0.1:{free_port()}", timeout=WAIT) as client:
        with pytest.raises(troupe.Unavailable, match="watch bus/b1"):
            await asyncio.wait_for(client.watch("bus", "b1", reconnect=True).__aenter__(), WAIT)


async def test_without_reconnect_a_broken_stream_raises(fake: tuple[str, FakeWatches]) -> None:
    address, servicer = fake
    servicer.streams = [Stream(events=[_event(1)], end=grpc.StatusCode.UNAVAILABLE)]
    async with (
        troupe.Client(address, timeout=WAIT) as client,
        client.watch("bus", "b1") as events,
    ):
        servicer.begun.set()
        await take(events, 1)
        with pytest.raises(troupe.Unavailable, match="watch bus/b1: the daemon is shutting"):
            await asyncio.wait_for(anext(events), WAIT)
    assert len(servicer.requests) == 1


async def test_a_daemon_that_drops_each_reopened_stream_is_retried_ever_more_slowly(
    fake: tuple[str, FakeWatches], monkeypatch: pytest.MonkeyPatch
) -> None:
    address, servicer = fake
    drops = [Stream(end=grpc.StatusCode.UNAVAILABLE) for _ in range(4)]
    servicer.streams = [
        *drops,
        Stream(events=[_event(1)], end=grpc.StatusCode.UNAVAILABLE),
        Stream(events=[_event(2)], hold=True),
    ]
    monkeypatch.setattr(_events, "_FIRST_PAUSE", 0.01)
    pauses: list[float] = []
    wait_before_attempt = _events.Watch._wait_before_attempt

    async def recorded(watch: _events.Watch) -> None:
        pauses.append(watch._pause)
        await wait_before_attempt(watch)

    monkeypatch.setattr(_events.Watch, "_wait_before_attempt", recorded)
    async with (
        troupe.Client(address, timeout=WAIT) as client,
        client.watch("bus", "b1", reconnect=True) as events,
    ):
        servicer.begun.set()
        got = await take(events, 2)
    assert [e.value for e in got] == [1, 2]
    # Each stream the daemon answered and dropped at once left the pause where it was,
    # doubling on; the event showed the daemon watching again.
    assert pauses == [0.01, 0.02, 0.04, 0.08, 0.01]


@pytest.mark.parametrize("how", ["aclose", "client close", "sync close"])
async def test_closing_a_watch_ends_its_pause_before_a_reopen(
    fake: tuple[str, FakeWatches], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    address, servicer = fake
    servicer.streams = [Stream(end=grpc.StatusCode.UNAVAILABLE)]
    # A pause far longer than the test waits: only the close can end it in time.
    monkeypatch.setattr(_events, "_FIRST_PAUSE", 10 * WAIT)
    broke = "the stream broke"
    with listening() as heard:
        if how == "sync close":
            sync = await asyncio.to_thread(troupe.SyncClient, address, timeout=WAIT)
            try:
                watch = await asyncio.to_thread(sync.watch("bus", "b1", reconnect=True).__enter__)
                servicer.begun.set()
                waiting = asyncio.create_task(asyncio.to_thread(next, watch, None))
                await heard.until(lambda messages: any(broke in m for m in messages))
                await asyncio.to_thread(watch.close)
                assert await asyncio.wait_for(waiting, WAIT) is None
            finally:
                await asyncio.to_thread(sync.close)
        else:
            client = troupe.Client(address, timeout=WAIT)
            try:
                events = await client.watch("bus", "b1", reconnect=True).__aenter__()
                servicer.begun.set()
                next_event = asyncio.create_task(anext(events, None))
                await heard.until(lambda messages: any(broke in m for m in messages))
                assert "re-opening" in repr(events)
                if how == "aclose":
                    await events.aclose()
                else:
                    await client.close()
                assert await asyncio.wait_for(next_event, WAIT) is None
                assert events.closed
            finally:
                await client.close()
    assert len(servicer.requests) == 1, "closed before any re-open"


# --- against the daemon ---------------------------------------------------------------------


@troupe.actor("reconnect_bus")
class Bus(troupe.Actor):
    @troupe.method
    async def publish(self, value: Any) -> None:
        self.ctx.publish(value)


async def test_a_reconnecting_watch_outlives_a_daemon_restart(
    daemon_binary: Path, tmp_path: Path
) -> None:
    # A re-open may reach the restarted daemon before the app is back: the daemon waits
    # for the app rather than refusing the type (NOT_FOUND), for this long after it starts.
    daemon = Daemon(
        binary=daemon_binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=["--host-wait", "20s"],
    )
    await daemon.start()
    try:
        async with (
            hosting(daemon.address, Bus) as app,
            troupe.Client(daemon.address, timeout=WAIT) as client,
        ):
            bus = client.actor(Bus, "w1")
            with listening() as heard:
                async with (
                    client.watch_type(Bus, reconnect=True) as by_type,
                    client.watch(Bus, "w1", reconnect=True) as one,
                    client.watch(Bus, "w1") as plain,
                ):
                    await bus.publish("before")
                    for events in (by_type, one, plain):
                        [event] = await take(events, 1)
                        assert event.value == "before"
                    type_next = asyncio.create_task(anext(by_type))
                    one_next = asyncio.create_task(anext(one))
                    plain_next = asyncio.create_task(anext(plain, None))
                    sessions = app.sessions
                    assert await daemon.stop() == 0, daemon.log_tail()
                    # Without reconnect the watch ends as before: Unavailable, or a plain end.
                    with suppress(troupe.Unavailable):
                        assert await asyncio.wait_for(plain_next, WAIT) is None
                    assert plain.closed
                    # The old daemon is gone: what re-opens from here on reaches the new one.
                    heard.records.clear()
                    await daemon.start()
                    await app.wait_registered(sessions=sessions + 1, timeout=RESTART_WAIT)

                    def both_reopened(messages: list[str]) -> bool:
                        reopened = [m for m in messages if "re-opened it after cursor" in m]
                        return {m.split(":")[0] for m in reopened} == {
                            "watch_type reconnect_bus",
                            "watch reconnect_bus/w1",
                        }

                    await heard.until(both_reopened, level=logging.INFO, timeout=RESTART_WAIT)
                    # Each watch's headers came once the restarted daemon held the
                    # stream's events (on one daemon the type's own stream, polled at once):
                    # the first publish reaches both.
                    await bus.publish("after-0")
                    got = [
                        await asyncio.wait_for(type_next, WAIT),
                        await asyncio.wait_for(one_next, WAIT),
                    ]
                    assert not by_type.closed and not one.closed
    finally:
        await daemon.kill()
    assert [(e.actor_id, e.value) for e in got] == [("w1", "after-0")] * 2, got
    # The restarted daemon counts anew, with a new epoch: the cursors resumed from are of
    # the old one, so the daemon says events may be missing.
    assert all(e.missed_before for e in got), got
    watch_lines = [m for m in heard.messages(logging.INFO) if m.startswith("watch")]
    assert len(watch_lines) == 2, heard.messages()
