"""Actor events: self.ctx.publish(value) in a turn (TurnScope.events, sent in TurnResult.events
when the turn succeeds), client.watch(type, id) streaming them (ActorClient.Watch) and
client.watch_type(type) streaming every actor's of a type (ActorClient.WatchType), on the
real daemon through the test kit. Run once per core (TROUPE_SDK_CORE)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import troupe
from troupe import ActorEvent
from troupe._caller import Caller
from troupe._context import MAX_EVENTS_PER_TURN, Context
from troupe._payload import encode_result
from troupe._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from troupe._state import State
from troupe._turn import TurnScope, current_turn
from troupe.testing import TestEnv

from .conftest import Daemon, fake_server, hosting
from .test_tls import make_certs, tls_daemon_of
from .test_watch_reconnect import FakeWatches, Stream

# Every wait on the daemon is bounded by this (seconds).
WAIT = 10

# --- publish, no daemon ---------------------------------------------------------------------


def _ctx(actor: str = "bus/b1") -> Context:
    actor_type, actor_id = actor.split("/")
    # publish() never calls out: it records into the running turn.
    return Context(cast(Caller, None), actor_type, actor_id)


def _turn(method: str = "go", *, turn: bool = True, actor: str = "bus/b1") -> TurnScope:
    return TurnScope(State({}), actor, method, turn=turn)


def _in(scope: TurnScope, fn: Callable[[], object]) -> None:
    token = current_turn.set(scope)
    try:
        fn()
    finally:
        current_turn.reset(token)


def _values(scope: TurnScope) -> list[bytes]:
    assert scope.events is not None
    return [e.data for e in scope.events]


def test_publish_records_encoded_events_in_the_turn_in_order() -> None:
    ctx, scope = _ctx(), _turn()

    def publish() -> None:
        ctx.publish({"lat": 1.5})
        ctx.publish(None)
        ctx.publish(b"\x00raw")

    _in(scope, publish)
    assert _values(scope) == [b'{"lat":1.5}', b"null", b"\x00raw"]
    assert scope.events is not None
    kinds = [e.content_type for e in scope.events]
    assert kinds == [common_pb2.CONTENT_TYPE_JSON] * 2 + [common_pb2.CONTENT_TYPE_BYTES]


def test_publish_outside_a_turn_says_where_events_can_come_from() -> None:
    with pytest.raises(RuntimeError, match=r"outside any turn.*can only be published from a turn"):
        _ctx().publish(1)


def test_publish_from_a_hook_is_refused() -> None:
    scope = _turn("on_activate", turn=False)
    with pytest.raises(RuntimeError, match="in on_activate of bus/b1: events can only be"):
        _in(scope, lambda: _ctx().publish(1))
    assert scope.events is None


def test_publish_through_another_actors_context_is_refused() -> None:
    scope = _turn(actor="bus/other")
    with pytest.raises(RuntimeError, match="bus/b1 cannot publish an event in go of bus/other"):
        _in(scope, lambda: _ctx("bus/b1").publish(1))
    assert _values(scope) == []


def test_publish_after_the_turn_ended_is_refused() -> None:
    scope = _turn()
    scope.live = False  # as State._end leaves it
    with pytest.raises(RuntimeError, match="outside any turn"):
        _in(scope, lambda: _ctx().publish(1))


def test_a_value_that_cannot_be_encoded_raises_at_the_publish() -> None:
    scope = _turn()
    with pytest.raises(TypeError, match="a published event must be JSON-serialisable or bytes"):
        _in(scope, lambda: _ctx().publish(object()))
    assert _values(scope) == []


def test_a_turns_events_are_bounded_at_the_publish() -> None:
    ctx, scope = _ctx(), _turn()

    def publish_all() -> None:
        for i in range(MAX_EVENTS_PER_TURN):
            ctx.publish(i)

    _in(scope, publish_all)
    with pytest.raises(ValueError, match="more than 256 events in one turn of go"):
        _in(scope, lambda: ctx.publish("one too many"))
    assert len(_values(scope)) == MAX_EVENTS_PER_TURN


async def test_interleaved_turns_each_keep_their_own_events() -> None:
    """Two turns of one actor in flight at once (a reentrant or read-only one beside
    another): each event goes to the turn whose task, or a task it started, published it."""
    ctx = _ctx()
    first, second = _turn("first"), _turn("second")

    async def run(scope: TurnScope, values: list[str]) -> None:
        current_turn.set(scope)  # as _Session._run_turn does, in the turn's own task
        for value in values:
            ctx.publish(value)
            await asyncio.sleep(0)  # the other turn publishes in between
        # A task the turn starts publishes into it too.
        await asyncio.create_task(_publish_later(ctx, f"{scope.method}-child"))

    await asyncio.wait_for(
        asyncio.gather(run(first, ["f1", "f2"]), run(second, ["s1", "s2"])), WAIT
    )
    assert _values(first) == [b'"f1"', b'"f2"', b'"first-child"']
    assert _values(second) == [b'"s1"', b'"s2"', b'"second-child"']


async def _publish_later(ctx: Context, value: str) -> None:
    await asyncio.sleep(0)
    ctx.publish(value)


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
        got = await _take(events, 2)
    assert [(e.actor_type, e.actor_id, e.value) for e in got] == [
        ("bus", "b1", 1),
        ("bus", "b2", 1),
    ]
    assert call.cancelled


# The span of a call that publishes, as a caller's trace would have it.
CALLER_SPAN = SpanContext(
    trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
    span_id=0x00F067AA0BA902B7,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)


async def test_an_event_carries_the_trace_context_of_the_turn_that_published_it() -> None:
    """The traceparent and tracestate the daemon sends with an event come through, and
    trace_context() continues them; an event of an untraced turn gives an empty context."""
    traceparent = f"00-{CALLER_SPAN.trace_id:032x}-{CALLER_SPAN.span_id:016x}-01"
    servicer = FakeWatches()
    servicer.streams = [
        Stream(
            events=[
                client_pb2.ActorEvent(
                    payload=encode_result("traced"),
                    cursor="00000000000000aa-1",
                    traceparent=traceparent,
                    tracestate="vendor=x",
                ),
                client_pb2.ActorEvent(
                    payload=encode_result("untraced"), cursor="00000000000000aa-2"
                ),
            ],
            hold=True,
        )
    ]
    async with (
        fake_server(client_pb2_grpc.add_ActorClientServicer_to_server, servicer) as address,
        troupe.Client(address, timeout=WAIT) as client,
        client.watch("bus", "b1") as events,
    ):
        traced, untraced = await _take(events, 2)
    assert (traced.traceparent, traced.tracestate) == (traceparent, "vendor=x")
    parent = trace.get_current_span(traced.trace_context()).get_span_context()
    assert (parent.trace_id, parent.span_id) == (CALLER_SPAN.trace_id, CALLER_SPAN.span_id)
    assert parent.is_remote and parent.trace_flags.sampled
    assert parent.trace_state.get("vendor") == "x"
    assert (untraced.traceparent, untraced.tracestate) == ("", "")
    assert not trace.get_current_span(untraced.trace_context()).get_span_context().is_valid


# --- On the daemon ----------------------------------------------------------------------------


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


@troupe.actor("events_greeter")
class Greeter(troupe.Actor):
    async def on_activate(self) -> None:
        self.ctx.publish("hello")

    @troupe.method
    async def ping(self) -> str:
        return "pong"


@troupe.actor("events_tram")
class Tram(troupe.Actor):
    @troupe.method
    async def publish(self, value: Any) -> None:
        self.ctx.publish(value)


async def _take(events: troupe.Watch, n: int) -> list[ActorEvent]:
    async def take() -> list[ActorEvent]:
        return [await anext(events) for _ in range(n)]

    return await asyncio.wait_for(take(), WAIT)


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
        got = await _take(events, 6)
    assert [e.value for e in got] == [1, "two", {"three": [3]}, b"four", None, 6]
    assert not any(e.missed_before for e in got)
    assert all(e.published_at_unix_ms > 0 for e in got)
    cursors = [_cursor(e.cursor) for e in got]
    assert len({epoch for epoch, _ in cursors}) == 1
    seqs = [seq for _, seq in cursors]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert events.closed


async def test_a_failed_turn_publishes_nothing(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b2")
    async with troupe_env.client.watch("events_bus", "b2") as events:
        with pytest.raises(troupe.ActorError, match="failed after publishing"):
            await bus.publish_then_fail(["lost-1", "lost-2"])
        message = await bus.publish_unencodable()
        assert "a published event must be JSON-serialisable" in message
        await bus.publish(["kept"])
        # The first event is the successful turn's: the failed one's never came.
        [event] = await _take(events, 1)
    assert event.value == "kept"
    assert not event.missed_before
    assert await troupe_env.state(Bus, "b2") == {}


async def test_events_belong_to_the_turn_that_published_them(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    async with troupe_env.client.watch(Bus, "b3") as events:
        await troupe_env.actor(Bus, "b3").outer()
        got = await _take(events, 3)
    # The nested turns end first; the one that failed published nothing, and the outer
    # turn's events came with its own result, not with theirs.
    assert [e.value for e in got] == ["inner-ok", "outer-1", "outer-2"]


async def test_reminders_timers_and_alarms_publish(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    async with troupe_env.client.watch(Bus, "b4") as events:
        await troupe_env.actor(Bus, "b4").schedule()
        await troupe_env.advance("4m")  # returns once the firings' turns ran
        got = await _take(events, 3)
    assert [e.value for e in got] == [{"reminder": "r"}, {"timer": "t"}, {"alarm": {"n": 3}}]


async def test_resume_after_a_cursor(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b5")
    async with troupe_env.client.watch(Bus, "b5") as events:
        await bus.publish(["a", "b", "c"])
        first = await _take(events, 3)
    cursor = first[1].cursor  # resume after "b": "c" is held, so it comes again
    await bus.publish(["d", "e"])
    async with troupe_env.client.watch(Bus, "b5", after=cursor) as events:
        resumed = await _take(events, 3)
        # Nothing else came between: the next event is the one published now.
        await bus.publish(["f"])
        [after] = await _take(events, 1)
    assert [e.value for e in resumed] == ["c", "d", "e"]
    assert resumed[0].cursor == first[2].cursor
    assert not any(e.missed_before for e in [*resumed, after])
    assert after.value == "f"


async def test_iterating_without_entering_starts_the_watch(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    bus = troupe_env.actor(Bus, "b6")
    async with troupe_env.client.watch(Bus, "b6") as events:
        await bus.publish(["a", "b"])
        [a, _] = await _take(events, 2)
    # From a cursor, so the held "b" is there whenever the watch starts.
    watch = troupe_env.client.watch(Bus, "b6", after=a.cursor)
    try:
        [b] = await _take(watch, 1)
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
        [a] = await _take(events, 1)
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
        got = await _take(events, 2)
    assert [(e.actor_type, e.actor_id, e.value) for e in got] == [
        ("events_bus", "b11", "a"),
        ("events_bus", "b11", "b"),
    ]


@pytest.mark.parametrize("kind", ["watch", "watch_type"])
async def test_a_watched_event_carries_the_trace_of_the_call_that_caused_it(
    troupe_env: TestEnv, kind: str
) -> None:
    await troupe_env.host(Bus)
    client = troupe_env.client
    watch = client.watch(Bus, "b12") if kind == "watch" else client.watch_type(Bus)
    async with watch as events:
        with trace.use_span(NonRecordingSpan(CALLER_SPAN)):
            await troupe_env.actor(Bus, "b12").publish(["traced"])
        [event] = await _take(events, 1)
    # The daemon's turn span when it exports traces, else the caller's span: the caller's
    # trace either way.
    assert event.traceparent.split("-")[1] == f"{CALLER_SPAN.trace_id:032x}"
    parent = trace.get_current_span(event.trace_context()).get_span_context()
    assert parent.is_valid and parent.trace_id == CALLER_SPAN.trace_id


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
        got = await _take(events, 6)
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
        first = await _take(events, 4)
    assert [(e.actor_id, e.value) for e in first] == [
        ("r1", "a"),
        ("r2", "b"),
        ("r1", "c"),
        ("r2", "d"),
    ]
    # After "b": "c" and "d" are held, so they come again; "a" and "b" do not.
    await bus[1].publish(["e"])
    async with troupe_env.client.watch_type(Bus, after=first[1].cursor) as events:
        resumed = await _take(events, 3)
        # Nothing else came between: the next event is the one published now.
        await bus[0].publish(["f"])
        [after] = await _take(events, 1)
    assert _by_actor(resumed) == {"r1": ["c"], "r2": ["d", "e"]}
    assert (after.actor_id, after.value) == ("r1", "f")
    assert not any(e.missed_before for e in [*resumed, after])


async def test_watch_type_of_an_id_prefix_gets_only_those_actors(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    client = troupe_env.client
    async with client.watch_type(Bus, id_prefix="acme/") as events:
        for actor_id, value in [("acme/1", "a"), ("other/2", "x"), ("acme/3", "b")]:
            await troupe_env.actor(Bus, actor_id).publish([value])
        got = await _take(events, 2)
        # Nothing of other/2 came between, nor after.
        await troupe_env.actor(Bus, "acme/1").publish(["c"])
        [last] = await _take(events, 1)
    assert [(e.actor_id, e.value) for e in [*got, last]] == [
        ("acme/1", "a"),
        ("acme/3", "b"),
        ("acme/1", "c"),
    ]
    # Resumed with its prefix, the watch keeps to it.
    async with client.watch_type(Bus, after=got[0].cursor, id_prefix="acme/") as events:
        resumed = await _take(events, 2)
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


async def test_publishing_from_on_activate_fails_the_activation(troupe_env: TestEnv) -> None:
    await troupe_env.host(Greeter)
    with pytest.raises(troupe.ActorError) as raised:
        await troupe_env.actor(Greeter, "g1").ping()
    assert raised.value.remote_type == "RuntimeError"
    assert "in on_activate of events_greeter/g1" in raised.value.message
    assert "events can only be published from a turn" in raised.value.message


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
                [event] = await _take(events, 1)
            assert event.value == "secure"
    finally:
        await d.kill()
