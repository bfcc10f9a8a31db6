"""The one duration grammar of every option that takes a duration.

``idle_timeout``, ``turn_timeout``, client and call ``timeout``, reminder and timer
``due``/``period``, :class:`RetryPolicy` backoffs and the app's reconnect delay all
read a duration here, where the option is given, so that a bad value fails at the
decorator, constructor or call that took it with :class:`InvalidArgument` naming the
option, never later inside the library. The TypeScript SDK's ``src/duration.ts``
reads the same strings; docs/scheduling.md has the grammar.

- a number (``int`` or ``float``): seconds, as everywhere in Python's standard library;
- a ``datetime.timedelta``;
- a string of one or more ``<number><unit>`` parts, ``"90s"``, ``"1h30m"``,
  ``"500ms"``, ``"30d"``, ``"1.5h"`` (units ``ms s m h d w`` and their long names,
  as the daemon's flags read them), or ISO 8601 ``"PT1M30S"``/``"P30D"``.

Months and years are refused: they have no fixed length (the daemon refuses ``P1M``).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from ._errors import InvalidArgument

DurationLike = str | int | float | timedelta
"""A duration: seconds as a number, a ``timedelta``, ``"90s"``, ``"1h30m"`` or ``"PT1M30S"``."""

_MS_PER_UNIT: dict[str, float] = {}
for _names, _ms in (
    (("ms", "msec", "msecs", "millis", "millisecond", "milliseconds"), 1),
    (("s", "sec", "secs", "second", "seconds"), 1_000),
    (("m", "min", "mins", "minute", "minutes"), 60_000),
    (("h", "hr", "hrs", "hour", "hours"), 3_600_000),
    (("d", "day", "days"), 86_400_000),
    (("w", "week", "weeks"), 604_800_000),
):
    for _name in _names:
        _MS_PER_UNIT[_name] = _ms

_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"
_PART = re.compile(rf"\s*{_NUMBER}\s*([a-zA-Z]+)\s*")
_ISO = re.compile(
    rf"^[Pp](?:{_NUMBER}[Ww])?(?:{_NUMBER}[Dd])?"
    rf"(?:[Tt](?:{_NUMBER}[Hh])?(?:{_NUMBER}[Mm])?(?:{_NUMBER}[Ss])?)?$"
)
_ISO_MS = (604_800_000, 86_400_000, 3_600_000, 60_000, 1_000)
# What a user may put where an ISO 8601 duration has months or years (P1M, P1Y, P1Y2M).
_ISO_CALENDAR = re.compile(r"^[Pp](?:\d+(?:\.\d+)?[YyMm])+")

_HINT = (
    "write seconds as a number, a timedelta, or a string such as '90s', '1h30m', '500ms',"
    " '30d' or ISO 8601 'PT1M30S'"
)


def _bad(option: str, value: object, why: str) -> InvalidArgument:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidArgument(f"{option} {shown} is not a duration ({why}); {_HINT}")


def _string_ms(option: str, text: str) -> float:
    text = text.strip()
    if not text:
        raise _bad(option, text, "it is empty")
    if text[0] in "Pp":
        if _ISO_CALENDAR.match(text):
            raise _bad(option, text, "months and years have no fixed length; use days, e.g. P30D")
        iso = _ISO.match(text)
        if iso is None or all(g is None for g in iso.groups()) or text[-1] in "Tt":
            raise _bad(option, text, "not ISO 8601 PnWnDTnHnMnS")
        return sum(
            float(g) * ms for g, ms in zip(iso.groups(), _ISO_MS, strict=True) if g is not None
        )
    if text.startswith("-"):
        raise _bad(option, text, "a duration cannot be negative")
    total, pos = 0.0, 0
    while pos < len(text):
        part = _PART.match(text, pos)
        if part is None:
            why = "a number needs a unit" if _NUMBER_END.search(text) else "unreadable"
            raise _bad(option, text, why)
        unit = _MS_PER_UNIT.get(part.group(2))
        if unit is None:
            raise _bad(option, text, f"unknown unit {part.group(2)!r}; use ms, s, m, h, d or w")
        total += float(part.group(1)) * unit
        pos = part.end()
    return total


_NUMBER_END = re.compile(rf"{_NUMBER}\s*$")


def duration_ms(value: object, option: str, *, allow_zero: bool = False) -> float:
    """``value`` in milliseconds (not rounded); InvalidArgument naming ``option`` when it is
    not a duration, is negative, or is zero and ``allow_zero`` is false."""
    if isinstance(value, bool):
        # bool is an int; True seconds is a mistake, not a duration.
        raise _bad(option, value, "a bool")
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, int | float):
        ms = float(value) * 1000
        if math.isnan(ms) or math.isinf(ms):
            raise _bad(option, value, "not finite")
    elif isinstance(value, str):
        ms = _string_ms(option, value)
    else:
        raise _bad(option, value, f"a {type(value).__name__}")
    if ms < 0:
        raise _bad(option, value, "a duration cannot be negative")
    if ms == 0 and not allow_zero:
        raise _bad(option, value, f"{option} must be longer than zero")
    if ms > _MAX_MS:
        raise _bad(option, value, "longer than 100 years")
    return ms


# The daemon's longest duration; longer values are surely mistakes (and overflow timedelta).
_MAX_MS = 100 * 365.25 * 86_400_000


def to_millis(value: object, option: str, *, allow_zero: bool = False) -> int:
    """Whole milliseconds of ``value`` (see :func:`duration_ms`); a positive duration shorter
    than 1 ms is 1 ms, never 0, which the wire reads as "not set"."""
    ms = duration_ms(value, option, allow_zero=allow_zero)
    return 0 if ms == 0 else max(1, round(ms))


def to_seconds(value: object, option: str) -> float:
    """A positive duration in seconds, as asyncio and grpc take timeouts."""
    return duration_ms(value, option) / 1000


def to_timedelta(value: object, option: str, *, allow_zero: bool = False) -> timedelta:
    """A duration as a timedelta, with millisecond precision (what the daemon keeps)."""
    return timedelta(milliseconds=to_millis(value, option, allow_zero=allow_zero))


def period_wire(value: object, option: str = "period", *, repetitions: bool = True) -> str:
    """A period as the daemon reads it: ``"<ms>ms"``, or ``"R<n>/<ms>ms"`` for an ISO 8601
    repetition such as ``"R5/PT10S"`` (five firings in all) where ``repetitions`` allows one
    (reminders; a timer fires until it is deleted)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "Rr" and "/" in text:
            if not repetitions:
                raise InvalidArgument(
                    f"{option} {value!r} has a repetition count; a timer fires until it is"
                    " deleted or its actor deactivates: give the period alone (e.g. 'PT1S'),"
                    " or use a reminder for a fixed number of firings"
                )
            count, rest = text[1:].split("/", 1)
            if count and not (count.isdigit() and 0 < int(count) < 2**32):
                raise InvalidArgument(
                    f"{option} {value!r}: the repetition count in R<n>/... must be a whole"
                    f" number from 1 to {2**32 - 1}, e.g. 'R5/PT10S'"
                )
            return f"R{count}/{to_millis(rest, option)}ms"
    return f"{to_millis(value, option)}ms"


def timeout_seconds(value: object, option: str = "timeout") -> float | None:
    """A call timeout in seconds, as grpc takes it; None (no timeout of its own) stays None."""
    return None if value is None else to_seconds(value, option)
