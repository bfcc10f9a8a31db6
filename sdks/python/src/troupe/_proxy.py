"""ActorProxy: a handle on one actor whose attributes call its methods, made by Client.actor
and Context.actor over the invoke of either."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ._actor import method_name

InvokeFn = Callable[[str, str, str, Sequence[Any], Mapping[str, Any]], Awaitable[Any]]
TellFn = Callable[[str, str, str, Sequence[Any], Mapping[str, Any]], Awaitable[object]]

if TYPE_CHECKING:
    from ._actor import Actor

A = TypeVar("A", bound="Actor")
P = ParamSpec("P")
R = TypeVar("R")


class MethodCaller:
    """``proxy.name`` — call it with the method's arguments."""

    __slots__ = ("_method", "_proxy")

    def __init__(self, proxy: ActorProxy[Any], method: str) -> None:
        self._proxy = proxy
        self._method = method

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        p = self._proxy
        return await p._invoke(self._method, args, kwargs)

    def __repr__(self) -> str:
        return f"<troupe method {self._proxy._actor_type}/{self._proxy._actor_id}.{self._method}>"


class ActorProxy(Generic[A]):
    """A handle on one actor: ``await proxy.incr(by=5)`` invokes method ``incr``.

    Attribute access builds a method caller; names starting with ``_`` are not
    forwarded. Use ``Client.invoke`` for a method whose name clashes with Python.

    ``A`` is the actor class when the proxy was made from it
    (``client.actor(Cart, "c1")``): then :meth:`call` with a method of the class,
    ``await proxy.call(Cart.add_item, "apple", qty=2)``, is checked by mypy against
    the method's parameters and returns its (awaited) return type. Attribute calls
    are not typed: Python's type system cannot map a class's methods to a proxy's.

    :meth:`tell` sends a call without waiting for its result. ``call`` and ``tell`` are
    the proxy's own: an actor method of either name is reached as
    ``proxy.call("tell", ...)``.
    """

    def __init__(
        self,
        invoke: InvokeFn,
        actor_type: str,
        actor_id: str,
        tell: TellFn,
    ) -> None:
        self._invoke_fn = invoke
        self._tell_fn = tell
        self._actor_type = actor_type
        self._actor_id = actor_id

    async def _invoke(self, method: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return await self._invoke_fn(self._actor_type, self._actor_id, method, args, kwargs)

    # Async methods first: for them R is the awaited type, not the coroutine.
    @overload
    async def call(
        self,
        method: Callable[Concatenate[A, P], Awaitable[R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R: ...

    @overload
    async def call(
        self, method: Callable[Concatenate[A, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> R: ...

    @overload
    async def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any: ...

    async def call(self, method: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` (a ``@troupe.method`` of the actor class, or its name) with these
        arguments and return its result."""
        name = method if isinstance(method, str) else method_name(method)
        return await self._invoke(name, args, kwargs)

    @overload
    async def tell(
        self,
        method: Callable[Concatenate[A, P], Any],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> None: ...

    @overload
    async def tell(self, method: str, /, *args: Any, **kwargs: Any) -> None: ...

    async def tell(self, method: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> None:
        """Send ``method`` (a ``@troupe.method`` of the actor class, or its name) with these
        arguments without waiting for its result: returns once the actor's mailbox took it,
        delivered as its type delivers tells (durable when its app registered it with
        durable tells). For ``durable``, ``delay``, ``at`` or an idempotency key, use
        ``tell`` of the client or the context, whose options no method argument can
        shadow."""
        name = method if isinstance(method, str) else method_name(method)
        await self._tell_fn(self._actor_type, self._actor_id, name, args, kwargs)

    def __getattr__(self, name: str) -> MethodCaller:
        if name.startswith("_"):
            raise AttributeError(name)
        return MethodCaller(self, name)

    def __repr__(self) -> str:
        return f"<troupe actor {self._actor_type}/{self._actor_id}>"
