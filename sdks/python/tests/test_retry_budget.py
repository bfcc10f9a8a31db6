"""The client-wide retry budget (gRFC A6 retry throttling), on the core in use
(TROUPE_SDK_CORE=native or python): against an address nothing listens on, a burst of
calls stops retrying once the budget is spent, and without a budget each call retries
until its deadline as before. An App's budget bounds its actors' calls the same way."""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any, cast

import pytest

import troupe
from troupe._retry import RetryThrottle

from .conftest import Daemon, hosting

_RETRIED = re.compile(r"; retried (once|(\d+) times) over")
BUDGET_TEXT = "retry budget was exhausted"


def unreachable_address() -> str:
    """127.0.0.1 with a port just freed: every connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


def retries_of(message: str) -> int:
    """How often a failed call's message says it was retried (0 when it says nothing)."""
    found = _RETRIED.search(message)
    if found is None:
        return 0
    return 1 if found.group(1) == "once" else int(found.group(2))


async def burst(client: troupe.Client, calls: int) -> list[str]:
    """The messages of ``calls`` invokes made together, each of which must fail
    Unavailable."""
    results = await asyncio.gather(
        *(client.invoke("t", str(i), "m") for i in range(calls)), return_exceptions=True
    )
    for result in results:
        assert isinstance(result, troupe.Unavailable), repr(result)
    return [str(result) for result in results]


async def test_a_burst_stops_retrying_once_the_budget_is_spent() -> None:
    budget = troupe.RetryBudget(max_tokens=10, token_ratio=0.1)
    async with troupe.Client(unreachable_address(), timeout=10, retry_budget=budget) as client:
        # Bounded here, not by the calls' 10 s: without a budget they would take that.
        messages = await asyncio.wait_for(burst(client, 8), 8)
        # Later calls find the budget spent: one attempt each.
        later = await asyncio.wait_for(burst(client, 3), 8)
    retries = [retries_of(m) for m in messages]
    # Ten tokens, each refused attempt takes one, a retry only while more than five are
    # left: 4 retries between all the calls, however they interleaved.
    assert sum(retries) == 4, messages
    assert all(BUDGET_TEXT in m for m in messages), messages
    assert sum("not retried" in m for m in messages) >= 4, messages
    for m in later:
        assert retries_of(m) == 0, m
        assert f"not retried: the client's {BUDGET_TEXT}" in m, m
        assert "connect" in m.lower() or "unavailable" in m.lower(), m


async def test_a_larger_budget_allows_more_retries() -> None:
    budget = troupe.RetryBudget(max_tokens=16, token_ratio=1)
    async with troupe.Client(unreachable_address(), timeout=10, retry_budget=budget) as client:
        messages = await asyncio.wait_for(burst(client, 2), 15)
    # 16 tokens: retries while more than 8 are left, 7 in all.
    assert sum(retries_of(m) for m in messages) == 7, messages
    assert all(BUDGET_TEXT in m for m in messages), messages


async def test_without_a_budget_each_call_retries_until_its_deadline() -> None:
    async with troupe.Client(unreachable_address(), timeout=1, retry_budget=None) as client:
        messages = await asyncio.wait_for(burst(client, 8), 10)
    for m in messages:
        assert retries_of(m) >= 2, m
        assert BUDGET_TEXT not in m, m
        assert "longer timeout" in m, m


async def test_sync_client_takes_the_budget_too() -> None:
    def calls() -> tuple[str, str]:
        budget = troupe.RetryBudget(max_tokens=10)
        with troupe.SyncClient(unreachable_address(), timeout=10, retry_budget=budget) as sync:
            with pytest.raises(troupe.Unavailable) as info:
                sync.invoke("t", "1", "m")
            first = str(info.value)
            with pytest.raises(troupe.Unavailable) as info:
                sync.invoke("t", "1", "m")
            second = str(info.value)
            return first, second

    first, second = await asyncio.wait_for(asyncio.to_thread(calls), 15)
    assert retries_of(first) == 4 and BUDGET_TEXT in first, first
    assert retries_of(second) == 0 and "not retried" in second, second


@pytest.mark.parametrize(
    ("given", "error", "says"),
    [
        ({"max_tokens": 0}, ValueError, "1 to 1000"),
        ({"max_tokens": 1001}, ValueError, "1 to 1000"),
        ({"max_tokens": 2.5}, TypeError, "an int"),
        ({"max_tokens": True}, TypeError, "an int"),
        ({"token_ratio": 0}, ValueError, "at least 0.001"),
        ({"token_ratio": 0.0004}, ValueError, "at least 0.001"),
        ({"token_ratio": float("nan")}, ValueError, "at least 0.001"),
        ({"token_ratio": "0.1"}, TypeError, "a number"),
    ],
)
def test_a_budget_out_of_grfc_a6_range_is_refused(
    given: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        troupe.RetryBudget(**given)


def test_retry_budget_must_be_a_retry_budget_or_none() -> None:
    with pytest.raises(TypeError, match=r"retry_budget must be a troupe\.RetryBudget"):
        troupe.Client("127.0.0.1:1", retry_budget=cast(Any, {"max_tokens": 3}))
    assert troupe.Client("127.0.0.1:1").retry_budget == troupe.RetryBudget(100, 0.1)
    assert troupe.Client("127.0.0.1:1", retry_budget=None).retry_budget is None


@troupe.actor("budget_forwarder")
class Forwarder(troupe.Actor):
    @troupe.method
    async def forward(self) -> str:
        """Calls another actor while this turn holds the daemon's one place for a call
        (--max-pending-calls 1): every attempt is refused as overloaded, with a retry
        pushback, so the call is retried until its 2 s or the app's budget end."""
        try:
            await self.ctx.invoke("budget_forwarder", "other", "forward", timeout=2)
        except troupe.Overloaded as e:
            return str(e)
        return "the call went through"


_ONE_CALL_AT_A_TIME = ("--max-pending-calls", "1", "--max-pending-per-type", "1")


@pytest.mark.daemon_args(*_ONE_CALL_AT_A_TIME)
async def test_an_apps_budget_bounds_its_actors_calls(daemon: Daemon) -> None:
    budget = troupe.RetryBudget(max_tokens=10)
    async with (
        hosting(daemon.address, Forwarder, retry_budget=budget),
        troupe.Client(daemon.address, timeout=10) as client,
    ):
        first = await asyncio.wait_for(client.invoke("budget_forwarder", "a", "forward"), 8)
        later = await asyncio.wait_for(client.invoke("budget_forwarder", "a", "forward"), 8)
    # Ten tokens: 4 retries, then the budget ends them (the default's 100 would go on
    # until the call's 2 s); the app's next calls find it spent.
    assert retries_of(first) == 4 and BUDGET_TEXT in first, first
    assert "the App, for its actors' calls" in first, first
    assert retries_of(later) == 0 and f"not retried: the client's {BUDGET_TEXT}" in later, later


@pytest.mark.daemon_args(*_ONE_CALL_AT_A_TIME)
async def test_an_app_without_a_budget_retries_its_actors_calls_until_their_deadline(
    daemon: Daemon,
) -> None:
    async with (
        hosting(daemon.address, Forwarder, retry_budget=None),
        troupe.Client(daemon.address, timeout=10) as client,
    ):
        message = await asyncio.wait_for(client.invoke("budget_forwarder", "a", "forward"), 8)
    assert retries_of(message) >= 2 and BUDGET_TEXT not in message, message


def test_an_apps_retry_budget_must_be_a_retry_budget_or_none() -> None:
    with pytest.raises(TypeError, match=r"retry_budget must be a troupe\.RetryBudget"):
        troupe.App([Forwarder], retry_budget=cast(Any, {"max_tokens": 3}))
    assert troupe.App([Forwarder]).retry_budget == troupe.RetryBudget(100, 0.1)
    assert troupe.App([Forwarder], retry_budget=None).retry_budget is None


def test_the_pure_python_throttle_counts_as_grfc_a6() -> None:
    throttle = RetryThrottle(troupe.RetryBudget(max_tokens=10))
    assert [throttle.on_failure() for _ in range(6)] == [True] * 4 + [False] * 2
    assert throttle.tokens == 4
    for _ in range(10):
        throttle.on_failure()
    assert throttle.tokens == 0
    for _ in range(51):
        throttle.on_success()
    # 5.1 exactly: thousandths, no float drift.
    assert throttle.tokens == 5.1
    assert not throttle.on_failure()
    for _ in range(100):
        throttle.on_success()
    assert throttle.tokens == 10
