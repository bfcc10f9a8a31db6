"""Call filters: code an app runs around every turn of its actors, for what cuts across
types (authorisation from call metadata, logging, metrics, a tenant's context), as
Orleans's incoming grain call filters do.

``App(filters=[...])`` takes async functions ``(call, next_) -> result``; the first
is the outermost. Each sees the :class:`IncomingCall` and runs the rest of the chain,
then the handler, by awaiting ``next_()`` (at most once), whose value it may return or
replace. A filter that returns without calling ``next_()`` answers the call itself (the
handler does not run, the state stays as it was); one that raises fails the turn as a
handler's exception does: its changes are undone and the caller gets
:class:`ActorError` with the exception's type and message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._actor import maybe_await

if TYPE_CHECKING:
    from ._actor import Actor

TurnKind = Literal["call", "reminder", "timer", "alarm"]


@dataclass(frozen=True, slots=True)
class IncomingCall:
    """One turn about to run, as a call filter sees it."""

    actor_type: str
    actor_id: str
    actor: Actor
    """The actor instance the turn runs on (its ``state``, its ``ctx``)."""
    method: str
    """The method called (its ``@method`` name), or the hook a scheduled turn runs:
    ``on_reminder``, ``on_timer`` or ``on_alarm``."""
    kind: TurnKind
    """``"call"`` for invokes and tells; else what fired."""
    args: tuple[Any, ...]
    """The positional arguments: a call's, or ``(name, data)`` of a reminder or timer and
    ``(data,)`` of the alarm."""
    kwargs: Mapping[str, Any]
    """A call's keyword arguments."""
    metadata: Mapping[str, str]
    """What the caller sent as ``metadata=`` with an invoke or tell (empty for scheduled
    turns); also ``self.ctx.metadata`` inside the turn."""
    readonly: bool
    """The method is read-only (it may run beside other read-only turns of the actor)."""


Next = Callable[[], Awaitable[Any]]
"""Runs the rest of the filters and then the handler; its value is the handler's result,
as the later filters left it."""

CallFilter = Callable[[IncomingCall, Next], Awaitable[Any]]
"""``async def my_filter(call: IncomingCall, next_: Next) -> Any``."""


def check_filters(filters: Sequence[CallFilter]) -> tuple[CallFilter, ...]:
    """The filters an App runs, checked when it is made rather than at the first turn."""
    for f in filters:
        if not callable(f):
            raise TypeError(
                f"App(filters=...) takes async functions (call, next_); got {f!r}, which is"
                " not callable"
            )
    return tuple(filters)


async def run_filtered(
    filters: tuple[CallFilter, ...], call: IncomingCall, handler: Callable[[], Any]
) -> Any:
    """Runs ``handler`` inside ``filters``, the first outermost."""

    async def step(index: int) -> Any:
        if index == len(filters):
            return await maybe_await(handler())
        current = filters[index]
        called = False

        async def next_() -> Any:
            nonlocal called
            if called:
                raise RuntimeError(
                    f"call filter {getattr(current, '__qualname__', current)!r} awaited next_()"
                    f" twice for {call.method} of {call.actor_type}/{call.actor_id}; a turn runs"
                    " its handler once: await next_() at most once"
                )
            called = True
            return await step(index + 1)

        return await current(call, next_)

    return await step(0)
