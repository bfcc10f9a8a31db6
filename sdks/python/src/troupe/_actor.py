"""Declaring actor types: the Actor base class and the @actor / @method decorators."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from ._duration import DurationLike, to_millis
from ._proto.troupe.v1 import app_pb2, common_pb2
from ._state import State
from ._turn_failure import declared_signature

if TYPE_CHECKING:
    from ._context import Context

StateModeName = Literal["write_behind", "durable"]
_STATE_MODES: dict[str | None, common_pb2.StateMode] = {
    None: common_pb2.STATE_MODE_UNSPECIFIED,
    "write_behind": common_pb2.STATE_MODE_WRITE_BEHIND,
    "durable": common_pb2.STATE_MODE_DURABLE,
}
_METHOD_ATTR = "__troupe_method__"
_SPEC_ATTR = "__troupe_actor__"

F = TypeVar("F", bound=Callable[..., Any])
A = TypeVar("A", bound="type[Actor]")


@dataclass(frozen=True)
class _MethodInfo:
    name: str
    readonly: bool


@dataclass(frozen=True)
class ActorSpec:
    """What @actor recorded about a class: its type name, options and callable methods."""

    name: str
    cls: type[Actor]
    methods: dict[str, str]  # wire name -> attribute name
    readonly: frozenset[str]
    idle_timeout_ms: int = 0
    max_mailbox: int = 0
    reentrant: bool = False
    state_mode: common_pb2.StateMode = common_pb2.STATE_MODE_UNSPECIFIED
    turn_timeout_ms: int = 0
    durable_tells: bool = False
    retention_ms: int = 0
    # wire name -> what a method behind a decorator declares (`bound` checks calls by it)
    declared: dict[str, inspect.Signature] = field(default_factory=dict)

    def to_proto(self) -> app_pb2.ActorTypeSpec:
        return app_pb2.ActorTypeSpec(
            name=self.name,
            idle_timeout_ms=self.idle_timeout_ms,
            max_mailbox=self.max_mailbox,
            reentrant=self.reentrant,
            state_mode=self.state_mode,
            readonly_methods=sorted(self.readonly),
            turn_timeout_ms=self.turn_timeout_ms,
            durable_tells=self.durable_tells,
            retention_ms=self.retention_ms,
        )


class Actor:
    """Base class of actor types; decorate subclasses with :func:`actor`.

    The SDK creates one instance per active actor id. Set up per-actor data in
    :meth:`on_activate`, where ``self.id``, ``self.state`` and ``self.ctx`` are
    available (they are not yet in ``__init__``).
    """

    _troupe_id: str
    _troupe_state: State
    _troupe_ctx: Context

    @property
    def id(self) -> str:
        """The id of this actor (the part of the address after the type)."""
        return self._troupe_id

    @property
    def state(self) -> State:
        """This actor's persistent state, a dict of JSON-serialisable values."""
        return self._troupe_state

    @property
    def ctx(self) -> Context:
        """Calls to other actors from inside a turn."""
        return self._troupe_ctx

    def on_activate(self) -> Any:
        """Called (sync or async) after the state is loaded, before the first turn."""
        return None

    def on_deactivate(self) -> Any:
        """Called (sync or async) before the instance is dropped; state changes are kept."""
        return None

    # Scheduled work (docs/scheduling.md). Override these as ``async def`` (or plain
    # ``def``); each firing is a turn like a method call: state changes are saved
    # when it returns, and if it raises they are discarded and the daemon retries
    # the firing of a reminder or alarm per its RetryPolicy.

    def on_reminder(self, name: str, data: Any) -> Awaitable[None] | None:
        """Called when the reminder ``name`` fires, with the data it was set with.

        Override as ``async def on_reminder(self, name: str, data: Any) -> None``.
        Set reminders with ``self.ctx.set_reminder`` or ``Client.set_reminder``.
        """
        raise NotImplementedError(
            _unhandled(self, "reminder", name, "on_reminder(self, name, data)")
        )

    def on_alarm(self, data: Any) -> Awaitable[None] | None:
        """Called when the actor's alarm fires, with the data it was set with.

        Override as ``async def on_alarm(self, data: Any) -> None``.
        Set the alarm with ``self.ctx.set_alarm`` or ``Client.set_alarm``.
        """
        raise NotImplementedError(_unhandled(self, "alarm", None, "on_alarm(self, data)"))

    def on_timer(self, name: str, data: Any) -> Awaitable[None] | None:
        """Called when the timer ``name`` (set with ``self.ctx.set_timer``) fires.

        Override as ``async def on_timer(self, name: str, data: Any) -> None``.
        """
        raise NotImplementedError(_unhandled(self, "timer", name, "on_timer(self, name, data)"))


def _unhandled(obj: Actor, what: str, name: str | None, hook: str) -> str:
    spec = type(obj).__dict__.get(_SPEC_ATTR)
    kind = (
        f"actor type {spec.name!r} ({type(obj).__qualname__})" if spec else type(obj).__qualname__
    )
    which = f"{what} {name!r}" if name is not None else f"the {what}"
    return f"{kind} got {which} but does not override {hook}; override it to handle {what}s"


_NAME_RE = re.compile(r"^[^\s/]{1,256}$")
# The daemon's lower bound on a type's retention.
_MIN_RETENTION_MS = 60_000


def actor(
    name: str,
    *,
    idle_timeout: DurationLike | None = None,
    state: StateModeName | None = None,
    max_mailbox: int | None = None,
    reentrant: bool = False,
    turn_timeout: DurationLike | None = None,
    durable_tells: bool = False,
    retention: DurationLike | None = None,
) -> Callable[[A], A]:
    """Declare an :class:`Actor` subclass as the actor type ``name``.

    Args:
        name: the type name clients use, e.g. ``"counter"``.
        idle_timeout: how long without a turn before the actor is deactivated: seconds, a
            timedelta or a string such as ``"5m"`` or ``"PT5M"``.
        state: ``"write_behind"`` (reply at once, flush in batches) or ``"durable"``
            (reply only once the turn's writes are stored). None: the daemon's default.
        max_mailbox: calls queued per actor before callers get :class:`Overloaded`.
        reentrant: let a call chain re-enter this actor (A -> B -> A).
        turn_timeout: upper bound for one turn, a duration as ``idle_timeout``.
        durable_tells: tells to this type sent without ``durable=`` are durable: stored in
            the actor's inbox before the sender hears back, delivered at least once
            (docs/delivery.md). A sender's ``durable=False`` still opts out.
        retention: erase an actor nothing has reached for this long (``"90d"``): its
            state, reminders and everything else ``troupe actors purge`` erases, counted
            from the end of its last activation (docs/retention.md). At least a minute.
            None keeps actors until purged.

    Options left as None use the daemon's defaults. A bad option raises
    :class:`InvalidArgument` (durations) or ValueError here, not when the app registers.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"actor type name must be 1-256 characters without spaces or '/', got {name!r}"
        )
    if state not in _STATE_MODES:
        raise ValueError(f"state must be 'write_behind' or 'durable', got {state!r}")
    # Read now, so that a bad duration fails at the decorator, not when the app registers.
    idle_timeout_ms = 0 if idle_timeout is None else to_millis(idle_timeout, "idle_timeout")
    turn_timeout_ms = 0 if turn_timeout is None else to_millis(turn_timeout, "turn_timeout")
    retention_ms = 0 if retention is None else to_millis(retention, "retention")
    if retention is not None and retention_ms < _MIN_RETENTION_MS:
        # Most likely days or hours given as a bare number, which reads as seconds.
        raise ValueError(
            f"retention must be at least a minute, got {retention!r} ({retention_ms} ms); "
            f"a bare number is seconds: write e.g. '30d' for thirty days"
        )
    if max_mailbox is not None and max_mailbox <= 0:
        raise ValueError(f"max_mailbox must be a positive int, got {max_mailbox!r}")

    def wrap(cls: A) -> A:
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"@troupe.actor({name!r}) must decorate a subclass of troupe.Actor")
        methods: dict[str, str] = {}
        readonly: set[str] = set()
        declared: dict[str, inspect.Signature] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                info = getattr(value, _METHOD_ATTR, None)
                if isinstance(info, _MethodInfo):
                    methods[info.name] = attr
                    if info.readonly:
                        readonly.add(info.name)
                    else:
                        readonly.discard(info.name)
                    signature = declared_signature(value)
                    if signature is None:
                        declared.pop(info.name, None)
                    else:
                        declared[info.name] = signature
        if not methods:
            raise TypeError(
                f"actor type {name!r} ({cls.__qualname__}) has no @troupe.method methods"
            )
        spec = ActorSpec(
            name=name,
            cls=cls,
            methods=methods,
            readonly=frozenset(readonly),
            declared=declared,
            idle_timeout_ms=idle_timeout_ms,
            max_mailbox=max_mailbox or 0,
            reentrant=reentrant,
            state_mode=_STATE_MODES[state],
            turn_timeout_ms=turn_timeout_ms,
            durable_tells=durable_tells,
            retention_ms=retention_ms,
        )
        setattr(cls, _SPEC_ATTR, spec)
        return cls

    return wrap


@overload
def method(fn: F, /) -> F: ...
@overload
def method(*, name: str | None = None, readonly: bool = False) -> Callable[[F], F]: ...


def method(
    fn: F | None = None, /, *, name: str | None = None, readonly: bool = False
) -> F | Callable[[F], F]:
    """Expose an actor method to callers (``async def`` or plain ``def``).

    Use bare (``@troupe.method``) or with options:

    Args:
        name: the name callers use; defaults to the function's name.
        readonly: the method never changes ``self.state``, so the daemon may run it
            concurrently with other read-only calls of the same actor. Its turn
            sends no state changes; don't modify state in it.
    """

    def wrap(f: F) -> F:
        if not callable(f):
            raise TypeError("@troupe.method must decorate a function")
        wire = name or f.__name__
        if wire.startswith("_"):
            raise ValueError(f"method names must not start with '_': {wire!r}")
        setattr(f, _METHOD_ATTR, _MethodInfo(wire, readonly))
        return f

    if fn is not None:
        return wrap(fn)
    return wrap


def spec_of(cls: type[Actor]) -> ActorSpec:
    """Return the ActorSpec recorded by @actor, or explain how to add it."""
    spec = cls.__dict__.get(_SPEC_ATTR)
    if not isinstance(spec, ActorSpec):
        raise TypeError(
            f"{cls.__qualname__} is not an actor type: decorate it with @troupe.actor('name')"
        )
    return spec


def type_name(actor_type: str | type[Actor]) -> str:
    """The wire name of an actor type given as its name or as its @troupe.actor class."""
    return actor_type if isinstance(actor_type, str) else spec_of(actor_type).name


def method_name(method: Callable[..., Any]) -> str:
    """The wire name of a @troupe.method function, e.g. ``Cart.add_item``."""
    info = getattr(method, _METHOD_ATTR, None)
    if not isinstance(info, _MethodInfo):
        raise TypeError(
            f"{getattr(method, '__qualname__', method)!r} is not a @troupe.method;"
            " pass an actor method such as Cart.add_item, or its name as a string"
        )
    return info.name


async def maybe_await(value: Any) -> Any:
    """Await the value if a sync-or-async hook returned an awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value
