"""The turn running in the current asyncio task: its call chain, its caller's deadline and the
state it touched.

Each turn runs in its own task, so concurrent turns (of different actors, and the
read-only or re-entrant turns the daemon runs side by side on one actor) never see
each other's scope, while tasks a handler starts inherit it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING

from ._duration import DurationLike, timeout_seconds
from ._errors import DeadlineExceeded
from ._proto.troupe.v1 import common_pb2

if TYPE_CHECKING:
    from ._state import State


class TurnScope:
    """One turn (or activation/deactivation hook) of one actor instance in this app.

    ``snapshots`` holds, per state key the turn touched, the encoded value it had when
    the turn first touched it (None: absent); ``written`` the keys it assigned or
    deleted; ``ttls`` the expiry it gives a key (``State.set``'s ttl in ms, 0: none; a
    delete records 0, so that a key deleted and set again in one turn loses its old
    expiry), sent with the key's value by this turn alone. ``events`` holds what the turn
    published (``Context.publish``), sent with its result only if it succeeds; None for an
    activation or deactivation hook (``turn=False``), whose answer carries no events.
    ``live`` turns False when the turn ends, so that tasks which outlive it neither record
    state into it, nor publish into it, nor claim its chain.
    """

    __slots__ = (
        "actor",
        "chain",
        "deadline",
        "events",
        "live",
        "metadata",
        "method",
        "readonly",
        "snapshots",
        "state",
        "ttls",
        "written",
    )

    def __init__(
        self,
        state: State,
        actor: str,
        method: str,
        *,
        readonly: bool = False,
        turn: bool = False,
        chain: common_pb2.CallChain | None = None,
        deadline_unix_ms: int = 0,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        self.state = state
        self.actor = actor
        self.method = method
        self.readonly = readonly
        self.chain = chain
        self.metadata = metadata
        self.deadline: float | None = deadline_unix_ms / 1000 if deadline_unix_ms else None
        self.live = True
        self.snapshots: dict[str, bytes | None] = {}
        self.written: set[str] = set()
        self.ttls: dict[str, int] = {}
        self.events: list[common_pb2.Payload] | None = [] if turn else None


current_turn: ContextVar[TurnScope | None] = ContextVar("troupe_current_turn", default=None)


def live_turn() -> TurnScope | None:
    """The turn this code runs on behalf of, if it is still running."""
    scope = current_turn.get()
    return scope if scope is not None and scope.live else None


def chain_for_call() -> common_pb2.CallChain | None:
    """The chain a call made now must carry: the running turn's, exactly as the daemon sent it
    (it already ends with this actor)."""
    scope = live_turn()
    return scope.chain if scope is not None else None


def timeout_for_call(timeout: DurationLike | None, what: str) -> float | None:
    """The call's own timeout in seconds (read here, where a call takes it, so a bad one fails
    the call with InvalidArgument before anything is sent), cut to what is left of the running
    turn's caller's deadline.

    Nobody waits for the result after that deadline, and shrinking deadlines along a
    chain is what ends a wait across two chains (A waits on B while B waits on A).
    """
    timeout = timeout_seconds(timeout)
    scope = live_turn()
    if scope is None or scope.deadline is None:
        return timeout
    left = scope.deadline - time.time()
    if left <= 0:
        raise DeadlineExceeded(
            f"{what}: not sent, because the caller of turn {scope.actor}.{scope.method} stopped"
            f" waiting {-left:.3f}s ago (its deadline passed); give the outermost call a longer"
            " timeout, or do less in this turn"
        )
    return left if timeout is None else min(timeout, left)
