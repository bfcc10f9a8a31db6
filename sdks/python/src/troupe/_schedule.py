"""Scheduled work: the Reminder and RetryPolicy types and their wire conversions.

The model is shared with the other SDKs and written down in docs/scheduling.md.
Durations and times travel as strings; the daemon parses them (durations such
as ``"90s"``/``"1h30m"``, ISO 8601 ``"PT1M30S"`` and ``"R5/PT10S"`` for periods,
RFC 3339 times) and answers INVALID_ARGUMENT for what it cannot read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo

from ._duration import DurationLike, period_wire, to_millis, to_timedelta
from ._errors import InvalidArgument
from ._payload import decode_result, encode_result
from ._proto.troupe.v1 import client_pb2, common_pb2

MissedName = Literal["fire_once", "skip"]
"""What happens to firings that came due while the daemon was down."""

Duration = DurationLike
"""A duration: seconds as a number, a ``timedelta``, ``"90s"``, ``"1h30m"`` or ``"PT1M30S"``."""

When = str | int | float | timedelta | datetime
"""A point in time: an RFC 3339 string, an aware ``datetime``, or a duration from now."""

TimeZoneLike = str | ZoneInfo
"""An IANA time zone: its name (``"Europe/Berlin"``) or a ``zoneinfo.ZoneInfo``."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

_MISSED: Mapping[str, client_pb2.MissedFirings] = {
    "fire_once": client_pb2.MISSED_FIRINGS_FIRE_ONCE,
    "skip": client_pb2.MISSED_FIRINGS_SKIP,
}
_MISSED_NAMES: Mapping[int, MissedName] = {
    client_pb2.MISSED_FIRINGS_UNSPECIFIED: "fire_once",
    client_pb2.MISSED_FIRINGS_FIRE_ONCE: "fire_once",
    client_pb2.MISSED_FIRINGS_SKIP: "skip",
}


def _ms(value: timedelta) -> int:
    # Whole milliseconds, rounded half up, computed on integers so large values stay exact.
    micros = value // timedelta(microseconds=1)
    return (micros + 500) // 1000


def format_duration(value: Duration, what: str, *, positive: bool = False) -> str:
    """A duration argument as sent on the wire, ``"<n>ms"``, read by the SDK's one grammar
    (:mod:`troupe._duration`) so that a bad value fails here with InvalidArgument naming
    ``what``; a zero duration is refused when ``positive``."""
    return f"{to_millis(value, what, allow_zero=not positive)}ms"


def format_time(value: datetime) -> str:
    """An aware datetime as RFC 3339 in UTC with milliseconds, e.g. ``2026-12-01T00:00:00.000Z``."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidArgument(
            f"naive datetime {value.isoformat()} has no time zone;"
            " use an aware one, e.g. datetime.now(timezone.utc)"
        )
    utc = value.astimezone(timezone.utc)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _is_rfc3339(text: str) -> bool:
    # The daemon's own test: a time has a date ("-") and a time ("T"); a duration has neither
    # (ISO durations start with "P").
    return "T" in text and "-" in text and not text.startswith(("P", "p"))


def format_when(value: When, what: str) -> str:
    """A time argument: a datetime, or an RFC 3339 string, as RFC 3339 (the daemon checks the
    string); anything else as a duration from now, checked here."""
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, str) and _is_rfc3339(value.strip()):
        return value.strip()
    if isinstance(value, str) and not value.strip():
        return "0ms"  # the daemon has always read an empty time as "now"
    return format_duration(value, what)


def format_instant(value: datetime | str, what: str) -> str:
    """A point in time only, an aware datetime or an RFC 3339 string, as RFC 3339 (the daemon
    checks the string); a duration is refused, since ``what`` has a sibling that takes one."""
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, str) and _is_rfc3339(value.strip()):
        return value.strip()
    raise InvalidArgument(
        f"{what} {value!r} is not a time: give an aware datetime or an RFC 3339 string such as"
        " '2026-12-01T09:00:00Z' (for a duration from now, use delay=)"
    )


def format_missed(value: str) -> client_pb2.MissedFirings:
    """``"fire_once"`` or ``"skip"`` as the MissedFirings enum."""
    try:
        return _MISSED[value]
    except (KeyError, TypeError):
        raise InvalidArgument(f"missed must be 'fire_once' or 'skip', got {value!r}") from None


def from_unix_ms(ms: int) -> datetime:
    """Milliseconds since the Unix epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


def encode_data(data: Any) -> common_pb2.Payload:
    """A reminder's data: bytes travel raw, anything else as JSON (None is ``null``)."""
    try:
        return encode_result(data)
    except TypeError as e:
        raise TypeError(f"reminder/alarm/timer data must be JSON-serialisable or bytes: {e}") from e


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """How the daemon retries a failed firing of a reminder or alarm.

    A firing fails when the handler raises (or the app is away). The daemon
    retries it after ``initial_backoff``, doubling the wait up to ``max_backoff``,
    for ``max_attempts`` attempts in all; then it drops that firing and logs it
    (a periodic reminder keeps its schedule). Fields left as None take the
    daemon's defaults (3 attempts, 1 s, 60 s). The backoffs take any duration
    (seconds, a timedelta, ``"1s"``, ``"PT1M"``) and read back as timedeltas.
    """

    max_attempts: int | None
    initial_backoff: timedelta | None
    max_backoff: timedelta | None

    def __init__(
        self,
        max_attempts: int | None = None,
        initial_backoff: DurationLike | None = None,
        max_backoff: DurationLike | None = None,
    ) -> None:
        if max_attempts is not None and (
            not isinstance(max_attempts, int)
            or isinstance(max_attempts, bool)
            or not 1 <= max_attempts < 2**32
        ):
            raise InvalidArgument(f"max_attempts must be a positive int, got {max_attempts!r}")
        # Frozen: the fields are set the way dataclasses' own __init__ sets them.
        object.__setattr__(self, "max_attempts", max_attempts)
        for what, value in (("initial_backoff", initial_backoff), ("max_backoff", max_backoff)):
            object.__setattr__(self, what, None if value is None else to_timedelta(value, what))

    def to_proto(self) -> client_pb2.RetryPolicy:
        """The wire form; None fields are sent as 0 (the daemon's default)."""
        return client_pb2.RetryPolicy(
            max_attempts=self.max_attempts or 0,
            initial_backoff_ms=max(1, _ms(self.initial_backoff)) if self.initial_backoff else 0,
            max_backoff_ms=max(1, _ms(self.max_backoff)) if self.max_backoff else 0,
        )

    @classmethod
    def from_proto(cls, msg: client_pb2.RetryPolicy) -> RetryPolicy:
        """Decode the wire form; zeros (the daemon's defaults) become None."""
        return cls(
            max_attempts=msg.max_attempts or None,
            initial_backoff=(
                timedelta(milliseconds=msg.initial_backoff_ms) if msg.initial_backoff_ms else None
            ),
            max_backoff=timedelta(milliseconds=msg.max_backoff_ms) if msg.max_backoff_ms else None,
        )


@dataclass(frozen=True)
class Reminder:
    """A registered reminder or alarm, as the daemon reports it.

    Attributes:
        actor_type: the actor's type.
        actor_id: the actor's id.
        name: the reminder's name; empty for an alarm.
        next_due: when it fires next (aware, UTC).
        period: time between firings; None for a one-shot or calendar reminder.
        cron: the cron pattern it fires at; None for a one-shot or periodic reminder.
        time_zone: the IANA time zone ``cron`` is read in (``"UTC"`` when none was
            given); None without ``cron``.
        jitter: the jitter it was set with; None for none.
        jitter_delay: the delay that jitter chose after each scheduled time
            (already in ``next_due``); zero without jitter.
        remaining: firings left; None when unbounded.
        until: no firing after this time (aware, UTC); None for no end.
        data: the data passed to the handler (JSON value, or bytes).
        attempts: failed attempts of the pending firing.
        fired: successful firings so far.
        alarm: whether this is the actor's alarm rather than a named reminder.
        retry: the retry policy, with the daemon's defaults filled in.
        missed: what happens to firings missed while the daemon was down.
        paused: whether it is paused (``pause_reminder``): it does not fire until
            resumed, and ``next_due`` is when it was due.
        tell_method: for a delayed tell waiting to be delivered (``tell(...,
            delay=...)``), the method it calls, with ``data`` as its argument; None
            for a reminder.
    """

    actor_type: str
    actor_id: str
    name: str
    next_due: datetime
    period: timedelta | None = None
    remaining: int | None = None
    until: datetime | None = None
    data: Any = None
    attempts: int = 0
    fired: int = 0
    alarm: bool = False
    retry: RetryPolicy = RetryPolicy()
    missed: MissedName = "fire_once"
    cron: str | None = None
    time_zone: str | None = None
    jitter: timedelta | None = None
    jitter_delay: timedelta = timedelta(0)
    paused: bool = False
    tell_method: str | None = None

    @classmethod
    def from_proto(cls, msg: client_pb2.Reminder) -> Reminder:
        """Decode the daemon's Reminder message."""
        return cls(
            actor_type=msg.actor.type,
            actor_id=msg.actor.id,
            name=msg.name,
            next_due=from_unix_ms(msg.next_due_unix_ms),
            period=timedelta(milliseconds=msg.period_ms) if msg.period_ms else None,
            remaining=msg.remaining or None,
            until=from_unix_ms(msg.until_unix_ms) if msg.until_unix_ms else None,
            data=decode_result(msg.payload) if msg.HasField("payload") else None,
            attempts=msg.attempts,
            fired=msg.fired,
            alarm=msg.alarm,
            retry=RetryPolicy.from_proto(msg.retry),
            missed=_MISSED_NAMES.get(msg.missed, "fire_once"),
            cron=msg.cron or None,
            time_zone=(msg.time_zone or "UTC") if msg.cron else None,
            jitter=timedelta(milliseconds=msg.jitter_ms) if msg.jitter_ms else None,
            jitter_delay=timedelta(milliseconds=msg.jitter_delay_ms),
            paused=msg.paused,
            tell_method=msg.tell_method or None,
        )


def format_time_zone(value: TimeZoneLike | None) -> str:
    """A time zone argument as its IANA name ("" for none); the daemon checks the name."""
    if value is None:
        return ""
    if isinstance(value, ZoneInfo):
        return value.key
    if isinstance(value, str):
        return value.strip()
    raise TypeError(
        f"time_zone must be an IANA name such as 'Europe/Berlin' or a zoneinfo.ZoneInfo,"
        f" got {type(value).__name__}"
    )


def reminder_request(
    actor: common_pb2.ActorRef,
    name: str,
    due: When,
    period: Duration | None,
    *,
    repeat: int,
    until: When | None,
    data: Any,
    retry: RetryPolicy | None,
    missed: str,
    cron: str | None = None,
    time_zone: TimeZoneLike | None = None,
    jitter: Duration | None = None,
) -> client_pb2.SetReminderRequest:
    """Build a SetReminderRequest, checking the arguments the SDK can check itself."""
    if not isinstance(name, str):
        raise TypeError(f"reminder name must be a str, got {type(name).__name__}")
    if cron is not None and not isinstance(cron, str):
        raise TypeError(f"cron must be a str such as '0 9 * * MON-FRI', got {type(cron).__name__}")
    if cron is not None and period is not None:
        raise InvalidArgument(
            f"reminder {name!r} has both a period and a cron schedule; give one:"
            " period for a fixed interval, cron for calendar times"
        )
    zone = format_time_zone(time_zone)
    if zone and not cron:
        raise InvalidArgument(
            f"time_zone {zone!r} is given without cron; a time zone only says how cron is read"
        )
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 0 <= repeat < 2**32:
        raise InvalidArgument(f"repeat must be an int >= 0 (0: unbounded), got {repeat!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a troupe.RetryPolicy, got {type(retry).__name__}")
    return client_pb2.SetReminderRequest(
        actor=actor,
        name=name,
        due=format_when(due, "due"),
        period="" if period is None else period_wire(period),
        repeat=repeat,
        until="" if until is None else format_when(until, "until"),
        payload=encode_data(data),
        retry=retry.to_proto() if retry is not None else None,
        missed=format_missed(missed),
        cron=cron or "",
        time_zone=zone,
        jitter="" if jitter is None else format_duration(jitter, "jitter", positive=True),
    )


def alarm_request(
    actor: common_pb2.ActorRef, at: When, data: Any, retry: RetryPolicy | None
) -> client_pb2.SetAlarmRequest:
    """Build a SetAlarmRequest."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a troupe.RetryPolicy, got {type(retry).__name__}")
    return client_pb2.SetAlarmRequest(
        actor=actor,
        at=format_when(at, "at"),
        payload=encode_data(data),
        retry=retry.to_proto() if retry is not None else None,
    )


def timer_request(
    actor: common_pb2.ActorRef,
    name: str,
    due: Duration,
    period: Duration | None,
    data: Any,
    keep_alive: bool,
) -> client_pb2.SetTimerRequest:
    """Build a SetTimerRequest."""
    if not isinstance(name, str):
        raise TypeError(f"timer name must be a str, got {type(name).__name__}")
    return client_pb2.SetTimerRequest(
        actor=actor,
        name=name,
        due=format_duration(due, "due"),
        period="" if period is None else period_wire(period, repetitions=False),
        payload=encode_data(data),
        keep_alive=bool(keep_alive),
    )
