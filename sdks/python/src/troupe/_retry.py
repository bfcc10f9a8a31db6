"""Idempotency keys and retries of invoke and tell.

Every invoke and tell names its logical call with an idempotency key, resent unchanged
on every retry, so that a daemon which honours keys (proto/troupe/v1/client.proto) runs
the call once and answers each attempt with the first answer. Two answers are resent:

- UNAVAILABLE: the daemon restarted, a forward to another daemon broke, or the
  connection was refused or reset; the first attempt may or may not have reached the
  actor, and the key makes the resend safe.
- RESOURCE_EXHAUSTED with gRPC's retry pushback (``grpc-retry-pushback-ms``): the daemon
  refused the call before it ran (a full mailbox, memory near its limit) and says how
  long to wait at least. Without the pushback (a message over a size limit) a resend
  would fail alike, so it is not resent.

The retries of all of one client's calls (one connection) are bounded together by its
retry budget (:class:`RetryBudget`), gRPC's retry throttling (gRFC A6): while the daemon
is down or overloaded, every concurrent call would otherwise keep resending for its whole
deadline, multiplying the load on a daemon trying to recover.

On the native core, troupe._native owns the keys and the retries (crates/sdk-core's
key.rs and retry.rs, the same policy); this module's loop serves the pure-Python core,
and both cores' errors and log lines are worded here (:func:`failure_note`,
:func:`log_retry`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import unicodedata
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import grpc

from ._duration import to_millis
from ._errors import InvalidArgument, from_rpc_error

log = logging.getLogger("troupe")

T = TypeVar("T")

MAX_KEY_BYTES = 256
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 1.0
# The trailer in which the daemon says a RESOURCE_EXHAUSTED ran nothing, and how many
# milliseconds to wait at least before resending it (gRFC A6).
PUSHBACK_TRAILER = "grpc-retry-pushback-ms"
# A call without a deadline would otherwise retry forever against a daemon that
# never comes back; this bounds its retries, counted from its first failure.
NO_DEADLINE_RETRY_WINDOW = 10.0
# What a key made here is resent for beyond the call's retries: the daemon's flush of the
# answer, and room to spare.
MADE_KEY_MARGIN = 60.0
# Below this much time left another attempt is not sent: it would most likely end in
# DEADLINE_EXCEEDED, hiding the refusal that explains the failure.
MIN_ATTEMPT = 0.05


# gRFC A6 allows at most this many tokens in a retry budget.
MAX_BUDGET_TOKENS = 1000
# Tokens are counted in thousandths, as gRPC's implementations (and the native core) do:
# gRFC A6 gives token_ratio three decimal places, and whole thousandths add up exactly
# where repeated float additions would drift.
_MILLI = 1000


@dataclass(frozen=True)
class RetryBudget:
    """How many retries a client's calls may make together: gRPC's retry throttling
    (gRFC A6 ``retryThrottling``), one budget per client (and per app connection, for
    the calls its actors make).

    The budget holds ``max_tokens`` tokens and starts full. Every attempt of an invoke
    or tell that fails with a status worth resending (UNAVAILABLE, or RESOURCE_EXHAUSTED
    with a retry pushback) takes one; every call that succeeds puts back ``token_ratio``,
    up to ``max_tokens``; and a retry is sent only while more than ``max_tokens / 2``
    tokens are left. While the daemon answers, the budget stays full and changes
    nothing; while it is down or overloaded, the client's calls together make a few
    retries and then fail at once, instead of each resending until its deadline.

    The defaults are 100 tokens and 0.1 back per success (gRPC's example has 10 tokens,
    whose 4 retries are spent in under a second: a lone client would no longer ride out
    a daemon's restart; with 100 a lone call retries through a 10 s restart three times
    over, while a burst of 50 failing calls or more is sent once each). ``max_tokens`` is
    1 to 1000 and ``token_ratio`` at least 0.001 (counted to three decimals), as gRFC A6
    says.
    """

    max_tokens: int = 100
    token_ratio: float = 0.1

    def __post_init__(self) -> None:
        tokens: object = self.max_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise TypeError(f"RetryBudget max_tokens must be an int, not {tokens!r}")
        if not 1 <= tokens <= MAX_BUDGET_TOKENS:
            raise ValueError(
                f"RetryBudget max_tokens must be 1 to {MAX_BUDGET_TOKENS} (gRFC A6), not {tokens}"
            )
        ratio: object = self.token_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float):
            raise TypeError(f"RetryBudget token_ratio must be a number, not {ratio!r}")
        if not math.isfinite(ratio) or round(ratio * _MILLI) < 1:
            raise ValueError(
                "RetryBudget token_ratio must be at least 0.001 (gRFC A6 counts it to three"
                f" decimals), not {ratio}"
            )


# A client's budget unless it is given another: 100 tokens and 0.1.
DEFAULT_RETRY_BUDGET = RetryBudget()


def native_budget(budget: RetryBudget | None) -> tuple[int, float] | None:
    """``budget`` as the native core takes it: ``(max_tokens, token_ratio)``, or None for
    no budget."""
    return None if budget is None else (budget.max_tokens, float(budget.token_ratio))


def check_retry_budget(budget: object) -> RetryBudget | None:
    """``budget`` if it is a RetryBudget or None (no budget); else raises TypeError."""
    if budget is None or isinstance(budget, RetryBudget):
        return budget
    raise TypeError(
        f"retry_budget must be a troupe.RetryBudget, or None for no budget, not {budget!r}"
    )


class RetryThrottle:
    """The tokens of a :class:`RetryBudget` as one client's calls spend them on the
    pure-Python core (the native core keeps its own: crates/sdk-core's retry.rs). Used
    from one event loop, so it needs no lock."""

    def __init__(self, budget: RetryBudget) -> None:
        self._max = budget.max_tokens * _MILLI
        # More than a full budget per success refills it all the same.
        self._ratio = min(round(budget.token_ratio * _MILLI), self._max)
        self._tokens = self._max

    @property
    def tokens(self) -> float:
        """The tokens left."""
        return self._tokens / _MILLI

    def on_failure(self) -> bool:
        """An attempt failed with a status worth resending: takes a token, and says
        whether a retry may follow (more than half the budget left)."""
        self._tokens = max(0, self._tokens - _MILLI)
        return self._tokens * 2 > self._max

    def on_success(self) -> None:
        """A call succeeded: puts back the token ratio, up to a full budget."""
        self._tokens = min(self._max, self._tokens + self._ratio)


def made_key_retention_ms(timeout: float | None) -> int:
    """How long the daemon should keep the answer of a call whose key the SDK made
    (``key_retention_ms``, proto/troupe/v1/client.proto): such a key is resent only while the
    call's retries last (its timeout, or NO_DEADLINE_RETRY_WINDOW without one), and no one else
    knows it. A key the caller gave may be sent again at any time: its answer keeps the
    daemon's whole retention (0)."""
    resent = NO_DEADLINE_RETRY_WINDOW if timeout is None else max(0.0, timeout)
    if not math.isfinite(resent):
        # A timeout too large to count in milliseconds asks for the whole retention.
        return 0
    return math.ceil((resent + MADE_KEY_MARGIN) * 1000)


def key_retention_ms(
    key: str | None, retention: object, timeout: float | None, *, made_here: bool
) -> int:
    """A call's ``key_retention_ms``. With the caller's own ``key``: ``retention``
    (``idempotency_retention``, a duration) in whole milliseconds, or 0, the daemon's whole
    retention, when it is None. With a key the SDK makes: as long as the call's retries last
    (:func:`made_key_retention_ms`) when the key is ``made_here`` (the pure-Python core), else
    0 (the native core sets it with the key). Raises InvalidArgument, before anything is
    sent, for a retention without a key or one that is not a positive duration."""
    if key is None:
        if retention is not None:
            raise InvalidArgument(
                "idempotency_retention says how long you may send your idempotency_key"
                " again; pass it with idempotency_key (a key the SDK makes is kept only as"
                " long as the call's own retries last)"
            )
        return made_key_retention_ms(timeout) if made_here else 0
    return 0 if retention is None else to_millis(retention, "idempotency_retention")


def call_key(key: str | None) -> str:
    """The key a call sends: the caller's own (checked as the daemon would), else a fresh
    UUID. Raises InvalidArgument before anything is sent."""
    if key is None:
        return str(uuid.uuid4())
    check_key_type(key)
    size = len(key.encode())
    if size == 0:
        raise InvalidArgument(
            "idempotency_key is empty; pass 1 to 256 bytes of printable UTF-8, or None to"
            " let the SDK make a fresh key"
        )
    if size > MAX_KEY_BYTES:
        raise InvalidArgument(
            f"idempotency_key is {size} bytes; it must be at most {MAX_KEY_BYTES} bytes"
            " (a UUID or a hash of what names the call fits)"
        )
    if any(unicodedata.category(c) == "Cc" for c in key):
        raise InvalidArgument(
            f"idempotency_key {key!r} contains control characters; use printable UTF-8"
        )
    return key


def check_key_type(key: object) -> None:
    """Raises InvalidArgument unless ``key`` is a str or None (the native core checks the
    rest of a key: troupe._native.InvalidKey)."""
    if key is not None and not isinstance(key, str):
        raise InvalidArgument(
            f"idempotency_key must be a str (or None for a fresh one), not {type(key).__name__}"
        )


GaveUp = Literal["deadline", "window", "budget"]

# What a call's message says when its client's retry budget refused a retry.
BUDGET_EXHAUSTED = (
    "the client's retry budget was exhausted (its calls were refused too often lately:"
    " gRFC A6 retry throttling)"
)


def failure_note(
    retries: int,
    elapsed: float,
    *,
    last: str | None,
    gave_up: GaveUp | None,
    overloaded: bool = False,
) -> str:
    """What a failed call's message adds about its retries ("" for none): how often and
    over how long it was retried, and either the refusal before the status that ended it
    (``last``, as ``CODE: message``) or that the retries ran out of time or of the
    client's retry budget (``gave_up``) while the daemon still refused the call:
    UNAVAILABLE, or RESOURCE_EXHAUSTED (``overloaded``)."""
    if gave_up is None:
        return _retried(retries, elapsed, f" after {last}" if last else "")
    if gave_up == "budget":
        # An App's actors' calls have a budget of the App's: the advice names both.
        advice = (
            "; the daemon is refusing calls for lack of room: send less, or give the Client"
            " (or the App, for its actors' calls) a larger retry_budget"
            if overloaded
            else "; check that the daemon is running and reachable, or give the Client (or"
            " the App, for its actors' calls) a larger retry_budget (None turns the budget"
            " off)"
        )
        if retries == 0:
            # _retried says nothing of a call not retried: this one says why not.
            return f"; not retried: {BUDGET_EXHAUSTED}{advice}"
        return _retried(retries, elapsed, f" until {BUDGET_EXHAUSTED}{advice}")
    until = (
        "until the call's deadline left no time for another attempt"
        if gave_up == "deadline"
        else f"for {NO_DEADLINE_RETRY_WINDOW:.0f}s, the limit for a call without a timeout"
    )
    advice = (
        "; the daemon kept refusing it for lack of room (the message says why): give the"
        " call a longer timeout to wait the load out, or send less"
        if overloaded
        else "; check that the daemon is running and reachable, or give the call a longer"
        " timeout to ride out a longer restart"
    )
    return _retried(retries, elapsed, f" {until}{advice}")


def log_retry(what: str, details: str, retry: int, pause: float) -> None:
    """The debug line of a retry about to happen (``retry`` counts from 1; ``details``
    is the refusal as ``CODE: message``)."""
    log.debug(
        "%s: %s; retry %d in %.0f ms, same idempotency key",
        what,
        details,
        retry,
        pause * 1000,
    )


def min_pause(e: grpc.aio.AioRpcError) -> float | None:
    """For a refusal worth resending, the least pause (seconds) before the resend: none of
    its own for UNAVAILABLE, the daemon's pushback for RESOURCE_EXHAUSTED. None for every
    other status, and for a RESOURCE_EXHAUSTED without a pushback (or a negative one,
    which gRFC A6 makes a "do not retry")."""
    if e.code() == grpc.StatusCode.UNAVAILABLE:
        return 0.0
    if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    # grpcio's metadata stub types are loose (as in _errors.py).
    trailers: Any = e.trailing_metadata() or ()
    for key, value in trailers:
        text = (value.decode() if isinstance(value, bytes) else str(value)).strip()
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        if key == PUSHBACK_TRAILER and text.isascii() and text.isdigit():
            return int(text) / 1000
    return None


async def send_with_retries(
    attempt: Callable[[float | None], Awaitable[T]],
    timeout: float | None,
    *,
    retry: bool,
    what: str,
    throttle: RetryThrottle | None = None,
) -> T:
    """Run ``attempt(time_left)`` until it answers, fails with a status that is not a
    refusal to resend (:func:`min_pause`), the call's ``timeout`` (seconds, None: no
    deadline) leaves no time for another attempt, or the client's ``throttle`` (its retry
    budget; None: none) refuses one. Without ``retry`` the call is sent once and leaves
    the budget alone. Raises the SDK's error for the last status, saying how often it
    retried. ``attempt`` must resend the same request, idempotency key included.
    """
    # A call sent once is outside the retry policy, and so outside its throttling (as in
    # gRPC).
    if not retry:
        throttle = None
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = None if timeout is None else start + timeout
    attempt_timeout = timeout
    backoff = FIRST_BACKOFF
    retries = 0
    window_end: float | None = deadline
    last = ""
    while True:
        try:
            answer = await attempt(attempt_timeout)
        except grpc.aio.AioRpcError as e:
            least = min_pause(e) if retry else None
            if least is None:
                # Another status ends the retries: the restarted daemon's NOT_FOUND, or the
                # deadline passing while a retry waited (then the refusal explains more).
                note = failure_note(retries, loop.time() - start, last=last, gave_up=None)
                raise from_rpc_error(e, what, note=note) from None
            # Every refusal takes its token, the last one of a call too (gRFC A6), even
            # when time would end the retries anyway.
            throttled = throttle is not None and not throttle.on_failure()
            last = f"{e.code().name}: {e.details() or 'no details'}"
            now = loop.time()
            if window_end is None:
                window_end = now + NO_DEADLINE_RETRY_WINDOW
            # Jitter keeps many clients of a restarted daemon from retrying in lockstep; the
            # last pause is cut short so that the attempt after it still fits, but never
            # below what the daemon asked for.
            room = window_end - now - MIN_ATTEMPT
            pause = min(max(backoff * random.uniform(0.8, 1.2), least), room)
            # Time first: when both end the retries, the deadline is what the caller
            # can act on.
            gave_up: GaveUp | None = None
            if room <= 0 or room < least:
                gave_up = "deadline" if deadline is not None else "window"
            elif throttled:
                gave_up = "budget"
            if gave_up is not None:
                note = failure_note(
                    retries,
                    now - start,
                    last=last,
                    gave_up=gave_up,
                    overloaded=e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
                )
                raise from_rpc_error(e, what, note=note) from None
            log_retry(what, last, retries + 1, pause)
            await asyncio.sleep(pause)
            retries += 1
            backoff = min(backoff * 2, MAX_BACKOFF)
            if deadline is not None:
                attempt_timeout = deadline - loop.time()
        else:
            if throttle is not None:
                throttle.on_success()
            return answer


def _retried(retries: int, elapsed: float, rest: str) -> str:
    """What the error message adds about the retries made before it ("" for none)."""
    if retries == 0:
        return ""
    times = "once" if retries == 1 else f"{retries} times"
    return f"; retried {times} over {elapsed:.1f}s with the same idempotency key{rest}"
