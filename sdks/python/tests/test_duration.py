"""The one duration grammar (troupe._duration), and that every option taking a duration
reads it where the option is given: a bad value raises InvalidArgument naming the option
at the decorator, constructor or call, before anything reaches the daemon.

sdks/typescript/test/duration.test.ts has the same table for the TypeScript SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import troupe
from troupe._duration import duration_ms, period_wire, timeout_seconds

# (value, milliseconds): one table of what every duration option reads.
GOOD: list[tuple[object, float]] = [
    ("90s", 90_000),
    ("1h30m", 5_400_000),
    ("1h 30m", 5_400_000),
    ("500ms", 500),
    ("30d", 2_592_000_000),
    ("2w", 1_209_600_000),
    ("1.5h", 5_400_000),
    ("0.25s", 250),
    ("10 minutes", 600_000),
    ("1hour", 3_600_000),
    (" 5m ", 300_000),
    ("PT1M30S", 90_000),
    ("pt1m30s", 90_000),
    ("PT0.5S", 500),
    ("P30D", 2_592_000_000),
    ("P1DT1H", 90_000_000),
    ("P2W", 1_209_600_000),
    (90, 90_000),
    (1.5, 1_500),
    (0.001, 1),
    (timedelta(minutes=1, seconds=30), 90_000),
    (timedelta(milliseconds=250), 250),
]

# (value, what the message says is wrong).
BAD: list[tuple[object, str]] = [
    ("", "empty"),
    ("90", "a number needs a unit"),
    ("1h30", "a number needs a unit"),
    ("soon", "unreadable"),
    ("5 parsecs", "unknown unit 'parsecs'"),
    ("1M", "unknown unit 'M'"),  # months have no fixed length
    ("1y", "unknown unit 'y'"),
    ("-5s", "cannot be negative"),
    ("P1M", "months and years have no fixed length; use days"),
    ("P1Y", "months and years have no fixed length"),
    ("PT", "not ISO 8601"),
    ("P1DT", "not ISO 8601"),
    ("PT-5S", "not ISO 8601"),
    (-1, "cannot be negative"),
    (timedelta(seconds=-1), "cannot be negative"),
    (float("nan"), "not finite"),
    (float("inf"), "not finite"),
    (True, "a bool"),
    (b"10s", "a bytes"),
    ([10], "a list"),
    ("200y", "unknown unit"),
    (1e12, "longer than 100 years"),
]


@pytest.mark.parametrize(("value", "ms"), GOOD)
def test_the_grammar_reads(value: object, ms: float) -> None:
    assert duration_ms(value, "x") == pytest.approx(ms)


@pytest.mark.parametrize(("value", "why"), BAD)
def test_the_grammar_refuses_naming_option_value_and_fix(value: object, why: str) -> None:
    with pytest.raises(troupe.InvalidArgument) as err:
        duration_ms(value, "idle_timeout")
    message = str(err.value)
    assert message.startswith(f"idle_timeout {value!r} is not a duration")
    assert why in message
    assert "'1h30m'" in message, "says what to write instead"


def test_zero_is_a_duration_only_where_it_means_something() -> None:
    assert duration_ms("0s", "due", allow_zero=True) == 0
    with pytest.raises(troupe.InvalidArgument, match="idle_timeout must be longer than zero"):
        duration_ms(0, "idle_timeout")


def test_periods_take_the_iso_repetition() -> None:
    assert period_wire("R5/PT10S") == "R5/10000ms"
    assert period_wire("R/1m") == "R/60000ms"
    assert period_wire(timedelta(seconds=2)) == "2000ms"
    with pytest.raises(troupe.InvalidArgument, match="repetition count in R<n>"):
        period_wire("R0/PT1S")
    with pytest.raises(troupe.InvalidArgument, match="period 'PT0S' is not a duration"):
        period_wire("R5/PT0S")


def test_timeouts_are_seconds_and_none_is_none() -> None:
    assert timeout_seconds("1m") == 60
    assert timeout_seconds(timedelta(milliseconds=1500)) == 1.5
    assert timeout_seconds(None) is None


class _Base(troupe.Actor):
    @troupe.method
    def m(self) -> None:
        pass


# Each option that takes a duration, given a bad value: the call that takes it must raise.
OPTIONS: dict[str, Callable[[Any], object]] = {
    "idle_timeout": lambda v: troupe.actor("t", idle_timeout=v),
    "turn_timeout": lambda v: troupe.actor("t", turn_timeout=v),
    "timeout": lambda v: troupe.Client("127.0.0.1:1", timeout=v),
    "max_reconnect_delay": lambda v: troupe.App(
        [troupe.actor("t")(type("T", (_Base,), {}))], max_reconnect_delay=v
    ),
    "initial_backoff": lambda v: troupe.RetryPolicy(initial_backoff=v),
    "max_backoff": lambda v: troupe.RetryPolicy(max_backoff=v),
}


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("value", ["5 parsecs", -1, "PT", True])
def test_each_option_refuses_a_bad_duration_where_it_is_given(option: str, value: Any) -> None:
    with pytest.raises(troupe.InvalidArgument, match=rf"^{option} .* is not a duration"):
        OPTIONS[option](value)


@pytest.mark.parametrize("option", OPTIONS)
def test_each_option_takes_every_form(option: str) -> None:
    for value in ("90s", "PT1M30S", 90, 1.5, timedelta(seconds=90)):
        OPTIONS[option](value)


def test_the_decorator_sends_what_it_read() -> None:
    @troupe.actor("cart", idle_timeout="1h30m", turn_timeout="PT1M30S")
    class Cart(_Base):
        pass

    spec = troupe._actor.spec_of(Cart)
    assert (spec.idle_timeout_ms, spec.turn_timeout_ms) == (5_400_000, 90_000)


async def test_call_timeouts_fail_the_call_before_it_is_sent() -> None:
    # Port 1: nothing listens, so only a check made before sending can answer InvalidArgument.
    async with troupe.Client("127.0.0.1:1") as client:
        with pytest.raises(troupe.InvalidArgument, match=r"^timeout 'soon' is not a duration"):
            client.actor("t", "1", timeout="soon")
        with pytest.raises(troupe.InvalidArgument, match=r"^timeout 'soon' is not a duration"):
            await client.invoke("t", "1", "m", timeout="soon")
        with pytest.raises(troupe.InvalidArgument, match=r"^due 'soon' is not a duration"):
            await client.set_reminder("t", "1", "r", due="soon")
        with pytest.raises(troupe.InvalidArgument, match=r"^period '0s' is not a duration"):
            await client.set_timer("t", "1", "r", period="0s")
    with (
        troupe.SyncClient("127.0.0.1:1") as sync,
        pytest.raises(troupe.InvalidArgument, match=r"^timeout -1 is not a duration"),
    ):
        sync.actor("t", "1", timeout=-1)
