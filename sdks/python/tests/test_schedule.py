"""Unit tests of scheduled work without a daemon: conversions, Reminder decoding, dispatch."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import grpc
import pytest

import troupe
from troupe._payload import BYTES, JSON
from troupe._proto.troupe.v1 import app_pb2, client_pb2, common_pb2
from troupe._schedule import (
    alarm_request,
    format_duration,
    format_time,
    format_when,
    from_unix_ms,
    reminder_request,
    timer_request,
)
from troupe._session import _Session
from troupe._state import State

REF = common_pb2.ActorRef(type="t", id="1")


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        # Read by the SDK (tests/test_duration.py has the grammar) and sent as milliseconds,
        # so that what the SDK accepted is exactly what the daemon schedules.
        ("90s", "90000ms"),
        (" 1h30m ", "5400000ms"),
        ("PT1M30S", "90000ms"),
        (90, "90000ms"),
        (1.5, "1500ms"),
        (timedelta(seconds=90), "90000ms"),
        (timedelta(milliseconds=1500), "1500ms"),
        (timedelta(microseconds=1499), "1ms"),
        (timedelta(microseconds=1500), "2ms"),
        (timedelta(0), "0ms"),
        (timedelta(days=40), "3456000000ms"),
    ],
)
def test_durations_go_out_as_milliseconds(value: str | timedelta, wire: str) -> None:
    assert format_duration(value, "due") == wire


def test_period_must_be_positive_and_tiny_periods_round_up() -> None:
    assert format_duration(timedelta(microseconds=10), "period", positive=True) == "1ms"
    with pytest.raises(troupe.InvalidArgument, match="period must be longer than zero"):
        format_duration(timedelta(0), "period", positive=True)
    with pytest.raises(troupe.InvalidArgument, match=r"due .* cannot be negative"):
        format_duration(timedelta(seconds=-1), "due")


@pytest.mark.parametrize("value", [None, b"10s", True, "soon"])
def test_durations_of_other_types_are_invalid_arguments(value: Any) -> None:
    with pytest.raises(troupe.InvalidArgument, match=r"^due .* is not a duration"):
        format_duration(value, "due")


def test_aware_datetimes_are_rfc3339_utc() -> None:
    utc = datetime(2026, 12, 1, 0, 0, 0, tzinfo=timezone.utc)
    assert format_time(utc) == "2026-12-01T00:00:00.000Z"
    plus2 = datetime(2026, 12, 1, 2, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(plus2) == "2026-12-01T00:00:00.123Z"
    assert format_when(plus2, "at") == "2026-12-01T00:00:00.123Z"
    assert format_when(timedelta(seconds=2), "at") == "2000ms"
    assert format_when("2026-12-01T00:00:00Z", "at") == "2026-12-01T00:00:00Z"
    assert format_when(30, "at") == "30000ms"
    assert format_when("", "at") == "0ms"


def test_naive_datetimes_are_an_error() -> None:
    with pytest.raises(troupe.InvalidArgument, match="naive datetime"):
        format_when(datetime(2026, 12, 1), "at")
    with pytest.raises(troupe.InvalidArgument, match="at 'tomorrow' is not a duration"):
        format_when("tomorrow", "at")


def test_retry_policy_wire_form_and_validation() -> None:
    p = troupe.RetryPolicy(
        max_attempts=5, initial_backoff=timedelta(milliseconds=50), max_backoff=timedelta(seconds=2)
    )
    wire = p.to_proto()
    assert (wire.max_attempts, wire.initial_backoff_ms, wire.max_backoff_ms) == (5, 50, 2000)
    assert troupe.RetryPolicy.from_proto(wire) == p
    assert troupe.RetryPolicy().to_proto() == client_pb2.RetryPolicy()
    assert troupe.RetryPolicy.from_proto(client_pb2.RetryPolicy()) == troupe.RetryPolicy()
    with pytest.raises(troupe.InvalidArgument, match="max_attempts"):
        troupe.RetryPolicy(max_attempts=0)
    with pytest.raises(troupe.InvalidArgument, match="initial_backoff must be longer than zero"):
        troupe.RetryPolicy(initial_backoff=timedelta(0))
    with pytest.raises(troupe.InvalidArgument, match="max_backoff 'a minute' is not a duration"):
        troupe.RetryPolicy(max_backoff="a minute")
    # Any duration, read back as a timedelta.
    assert troupe.RetryPolicy(initial_backoff="500ms", max_backoff=60) == troupe.RetryPolicy(
        initial_backoff=timedelta(milliseconds=500), max_backoff=timedelta(minutes=1)
    )


def test_reminder_request_carries_every_option() -> None:
    until = datetime(2030, 1, 1, tzinfo=timezone.utc)
    req = reminder_request(
        REF,
        "collect",
        timedelta(seconds=10),
        "R5/PT10S",
        repeat=3,
        until=until,
        data={"amount": 12},
        retry=troupe.RetryPolicy(max_attempts=3),
        missed="skip",
    )
    assert req.actor == REF
    assert (req.name, req.due, req.period, req.repeat) == ("collect", "10000ms", "R5/10000ms", 3)
    assert req.until == "2030-01-01T00:00:00.000Z"
    assert req.payload.content_type == JSON
    assert json.loads(req.payload.data) == {"amount": 12}
    assert req.retry.max_attempts == 3
    assert req.missed == client_pb2.MISSED_FIRINGS_SKIP


def test_reminder_request_defaults_and_errors() -> None:
    req = reminder_request(
        REF, "r", "", None, repeat=0, until=None, data=None, retry=None, missed="fire_once"
    )
    assert (req.due, req.period, req.until, req.repeat) == ("0ms", "", "", 0)
    assert not req.HasField("retry")
    assert req.payload.data == b"null"
    assert req.missed == client_pb2.MISSED_FIRINGS_FIRE_ONCE
    raw = reminder_request(
        REF, "r", "1s", None, repeat=0, until=None, data=b"\x00", retry=None, missed="fire_once"
    )
    assert (raw.payload.content_type, raw.payload.data) == (BYTES, b"\x00")
    kwargs: dict[str, Any] = {"repeat": 0, "until": None, "data": None, "retry": None}
    with pytest.raises(troupe.InvalidArgument, match="missed must be"):
        reminder_request(REF, "r", "1s", None, **{**kwargs, "missed": "later"})
    with pytest.raises(troupe.InvalidArgument, match="repeat must be"):
        reminder_request(REF, "r", "1s", None, **{**kwargs, "repeat": -1, "missed": "skip"})
    with pytest.raises(TypeError, match="JSON-serialisable"):
        reminder_request(REF, "r", "1s", None, **{**kwargs, "data": object(), "missed": "skip"})
    with pytest.raises(TypeError, match="RetryPolicy"):
        reminder_request(REF, "r", "1s", None, **{**kwargs, "retry": 3, "missed": "skip"})


def test_alarm_and_timer_requests() -> None:
    at = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)
    alarm = alarm_request(REF, at, "wake", troupe.RetryPolicy(max_attempts=2))
    assert alarm.at == "2030-01-01T12:00:00.000Z"
    assert json.loads(alarm.payload.data) == "wake"
    assert alarm.retry.max_attempts == 2
    timer = timer_request(REF, "tick", "250ms", timedelta(seconds=1), [1], True)
    assert (timer.name, timer.due, timer.period, timer.keep_alive) == ("tick", "250ms", "1000ms", 1)
    assert json.loads(timer.payload.data) == [1]
    with pytest.raises(troupe.InvalidArgument, match="repetition count; a timer fires until"):
        timer_request(REF, "tick", "1s", "R5/PT1S", None, False)


def test_reminder_is_decoded_from_the_wire() -> None:
    msg = client_pb2.Reminder(
        actor=REF,
        name="collect",
        next_due_unix_ms=1_800_000_000_123,
        period_ms=10_000,
        remaining=4,
        until_unix_ms=1_900_000_000_000,
        payload=common_pb2.Payload(data=b'{"amount":12}', content_type=JSON),
        retry=client_pb2.RetryPolicy(max_attempts=3, initial_backoff_ms=1000, max_backoff_ms=60000),
        missed=client_pb2.MISSED_FIRINGS_SKIP,
        attempts=1,
        fired=7,
    )
    r = troupe.Reminder.from_proto(msg)
    assert (r.actor_type, r.actor_id, r.name) == ("t", "1", "collect")
    assert r.next_due == datetime(2027, 1, 15, 8, 0, 0, 123000, tzinfo=timezone.utc)
    assert r.next_due.tzinfo is timezone.utc
    assert r.period == timedelta(seconds=10)
    assert r.remaining == 4
    assert r.until == from_unix_ms(1_900_000_000_000)
    assert r.data == {"amount": 12}
    assert (r.attempts, r.fired, r.alarm, r.missed) == (1, 7, False, "skip")
    assert r.retry == troupe.RetryPolicy(3, timedelta(seconds=1), timedelta(seconds=60))


def test_one_shot_reminder_and_alarm_decode_to_nones() -> None:
    r = troupe.Reminder.from_proto(
        client_pb2.Reminder(actor=REF, name="$alarm", next_due_unix_ms=5, alarm=True)
    )
    assert r.next_due == datetime(1970, 1, 1, 0, 0, 0, 5000, tzinfo=timezone.utc)
    assert (r.period, r.remaining, r.until, r.data) == (None, None, None, None)
    assert r.alarm and r.missed == "fire_once"
    raw = troupe.Reminder.from_proto(
        client_pb2.Reminder(payload=common_pb2.Payload(data=b"\x01", content_type=BYTES))
    )
    assert raw.data == b"\x01"


# ---- dispatch of scheduled turns to the actor's hooks ----

seen: list[tuple[str, Any]] = []


@troupe.actor("sched")
class Sched(troupe.Actor):
    @troupe.method
    def ping(self) -> str:
        return "pong"

    async def on_reminder(self, name: str, data: Any) -> None:
        if data == "boom":
            self.state["written"] = True
            raise RuntimeError("reminder failed")
        self.state["last"] = [name, data]
        seen.append(("reminder", (name, data)))

    def on_alarm(self, data: Any) -> None:  # a sync override works too
        seen.append(("alarm", data))

    async def on_timer(self, name: str, data: Any) -> None:
        seen.append(("timer", (name, data)))


@troupe.actor("plain")
class Plain(troupe.Actor):
    @troupe.method
    def ping(self) -> str:
        return "pong"


async def _fire(
    cls: type[troupe.Actor], kind: int, name: str, payload: common_pb2.Payload
) -> app_pb2.TurnResult:
    app = troupe.App(actors=[cls], address="127.0.0.1:1")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        session = _Session(app, channel)
        obj = cls()
        obj._troupe_id = "a1"
        obj._troupe_state = State({})
        spec_name = next(iter(app._specs))
        session.instances[(spec_name, "a1")] = obj
        turn = app_pb2.Turn(
            call_id=9,
            actor=common_pb2.ActorRef(type=spec_name, id="a1"),
            kind=kind,  # type: ignore[arg-type]
            name=name,
            payload=payload,
        )
        await session._turn(turn)
        out = session.out.get_nowait()
        assert out.WhichOneof("kind") == "turn_result"
        return out.turn_result
    finally:
        await channel.close(None)


def _json(value: Any) -> common_pb2.Payload:
    return common_pb2.Payload(data=json.dumps(value).encode(), content_type=JSON)


async def test_reminder_turn_calls_on_reminder_with_the_json_value() -> None:
    seen.clear()
    result = await _fire(Sched, common_pb2.TURN_KIND_REMINDER, "r1", _json({"n": 1}))
    assert result.call_id == 9
    assert result.WhichOneof("outcome") == "reply"
    assert result.reply.data == b"null"
    assert seen == [("reminder", ("r1", {"n": 1}))]
    assert {c.key: c.set for c in result.changes} == {"last": b'["r1",{"n":1}]'}


async def test_alarm_and_timer_turns_call_their_hooks() -> None:
    seen.clear()
    await _fire(Sched, common_pb2.TURN_KIND_ALARM, "", _json("wake"))
    await _fire(
        Sched,
        common_pb2.TURN_KIND_TIMER,
        "tick",
        common_pb2.Payload(data=b"\x00", content_type=BYTES),
    )
    await _fire(Sched, common_pb2.TURN_KIND_TIMER, "empty", common_pb2.Payload())
    assert seen == [("alarm", "wake"), ("timer", ("tick", b"\x00")), ("timer", ("empty", None))]


async def test_failing_handler_answers_with_an_actor_failure_and_no_changes() -> None:
    result = await _fire(Sched, common_pb2.TURN_KIND_REMINDER, "r", _json("boom"))
    assert result.WhichOneof("outcome") == "error"
    assert result.error.type == "RuntimeError"
    assert result.error.message == "reminder failed"
    assert not result.changes


@pytest.mark.parametrize(
    ("kind", "hook"),
    [
        (common_pb2.TURN_KIND_REMINDER, "on_reminder"),
        (common_pb2.TURN_KIND_ALARM, "on_alarm"),
        (common_pb2.TURN_KIND_TIMER, "on_timer"),
    ],
)
async def test_hooks_not_overridden_say_so(kind: int, hook: str) -> None:
    result = await _fire(Plain, kind, "x", _json(None))
    assert result.error.type == "NotImplementedError"
    assert "'plain'" in result.error.message
    assert f"override {hook}" in result.error.message


async def test_method_turns_are_unchanged() -> None:
    result = await _fire(Sched, common_pb2.TURN_KIND_CALL, "ping", common_pb2.Payload())
    assert result.reply.data == b'"pong"'
