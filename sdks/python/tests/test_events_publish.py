"""Publishing actor events: self.ctx.publish(value) in a turn (TurnScope.events, sent in
TurnResult.events when the turn succeeds), which turns' events the daemon delivers, and the
trace context an event carries from the turn that published it. The watches that deliver
them: test_events_watch.py, test_events_watch_type.py. Run once per core (TROUPE_SDK_CORE)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import troupe
from troupe._caller import Caller
from troupe._context import MAX_EVENTS_PER_TURN, Context
from troupe._payload import encode_result
from troupe._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from troupe._state import State
from troupe._turn import TurnScope, current_turn
from troupe.testing import TestEnv

from .conftest import fake_server
from .events_common import WAIT, Bus, take
from .test_watch_reconnect import FakeWatches, Stream

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
        current_turn.set(scope)  # as ActorHost._run_turn does, in the turn's own task
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


# --- On the daemon ----------------------------------------------------------------------------


@troupe.actor("events_greeter")
class Greeter(troupe.Actor):
    async def on_activate(self) -> None:
        self.ctx.publish("hello")

    @troupe.method
    async def ping(self) -> str:
        return "pong"


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
        [event] = await take(events, 1)
    assert event.value == "kept"
    assert not event.missed_before
    assert await troupe_env.state(Bus, "b2") == {}


async def test_events_belong_to_the_turn_that_published_them(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    async with troupe_env.client.watch(Bus, "b3") as events:
        await troupe_env.actor(Bus, "b3").outer()
        got = await take(events, 3)
    # The nested turns end first; the one that failed published nothing, and the outer
    # turn's events came with its own result, not with theirs.
    assert [e.value for e in got] == ["inner-ok", "outer-1", "outer-2"]


async def test_reminders_timers_and_alarms_publish(troupe_env: TestEnv) -> None:
    await troupe_env.host(Bus)
    async with troupe_env.client.watch(Bus, "b4") as events:
        await troupe_env.actor(Bus, "b4").schedule()
        await troupe_env.advance("4m")  # returns once the firings' turns ran
        got = await take(events, 3)
    assert [e.value for e in got] == [{"reminder": "r"}, {"timer": "t"}, {"alarm": {"n": 3}}]


async def test_publishing_from_on_activate_fails_the_activation(troupe_env: TestEnv) -> None:
    await troupe_env.host(Greeter)
    with pytest.raises(troupe.ActorError) as raised:
        await troupe_env.actor(Greeter, "g1").ping()
    assert raised.value.remote_type == "RuntimeError"
    assert "in on_activate of events_greeter/g1" in raised.value.message
    assert "events can only be published from a turn" in raised.value.message


# --- an event's trace context, on a fake of the daemon and on the daemon --------------------


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
        traced, untraced = await take(events, 2)
    assert (traced.traceparent, traced.tracestate) == (traceparent, "vendor=x")
    parent = trace.get_current_span(traced.trace_context()).get_span_context()
    assert (parent.trace_id, parent.span_id) == (CALLER_SPAN.trace_id, CALLER_SPAN.span_id)
    assert parent.is_remote and parent.trace_flags.sampled
    assert parent.trace_state.get("vendor") == "x"
    assert (untraced.traceparent, untraced.tracestate) == ("", "")
    assert not trace.get_current_span(untraced.trace_context()).get_span_context().is_valid


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
        [event] = await take(events, 1)
    # The daemon's turn span when it exports traces, else the caller's span: the caller's
    # trace either way.
    assert event.traceparent.split("-")[1] == f"{CALLER_SPAN.trace_id:032x}"
    parent = trace.get_current_span(event.trace_context()).get_span_context()
    assert parent.is_valid and parent.trace_id == CALLER_SPAN.trace_id
