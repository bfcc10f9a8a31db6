"""What SyncClient hands out: SyncActorProxy (calls on one actor) and SyncWatch (an actor's
or a type's events), the blocking twins of ActorProxy and Watch, each running its async
original on the client's event loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Generic, TypeVar, overload

from ._events import ActorEvent, Watch
from ._proxy import A, ActorProxy, P, R

if TYPE_CHECKING:
    from ._sync_client import SyncClient

T = TypeVar("T")


class SyncActorProxy(Generic[A]):
    """The blocking twin of ActorProxy: ``client.actor("counter", "c1").incr(by=5)``,
    or typed, ``client.actor(Cart, "c1").call(Cart.add_item, "apple")``."""

    def __init__(self, client: SyncClient, proxy: ActorProxy[A]) -> None:
        self._client = client
        self._proxy = proxy

    @overload
    def call(
        self,
        method: Callable[Concatenate[A, P], Awaitable[R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R: ...

    @overload
    def call(
        self, method: Callable[Concatenate[A, P], R], /, *args: P.args, **kwargs: P.kwargs
    ) -> R: ...

    @overload
    def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any: ...

    def call(self, method: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`ActorProxy.call`; blocks until the result is there."""
        return self._client._run(self._proxy.call(method, *args, **kwargs))

    @overload
    def tell(
        self,
        method: Callable[Concatenate[A, P], Any],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> None: ...

    @overload
    def tell(self, method: str, /, *args: Any, **kwargs: Any) -> None: ...

    def tell(self, method: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> None:
        """See :meth:`ActorProxy.tell`; blocks until the actor's mailbox took the call."""
        self._client._run(self._proxy.tell(method, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        caller = getattr(self._proxy, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._client._run(caller(*args, **kwargs))

        return call

    def __repr__(self) -> str:
        return repr(self._proxy).replace("<troupe", "<troupe sync", 1)


class SyncWatch(Iterator[ActorEvent]):
    """The blocking twin of :class:`Watch`: a context manager and an iterator of
    :class:`ActorEvent`, from :meth:`SyncClient.watch` or :meth:`SyncClient.watch_type`."""

    def __init__(self, client: SyncClient, watch: Watch) -> None:
        self._client = client
        self._watch = watch

    def __repr__(self) -> str:
        return repr(self._watch).replace("<troupe", "<troupe sync", 1)

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        future = self._client._submit(coro)
        try:
            return future.result()
        except BaseException:
            # Interrupted (Ctrl-C): stop the wait on the loop too, which ends the stream,
            # rather than leave a read under way that the next one would collide with. (A
            # no-op when the coroutine itself raised: its future is done.)
            future.cancel()
            raise

    def __enter__(self) -> SyncWatch:
        self._wait(self._watch.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> SyncWatch:
        return self

    def __next__(self) -> ActorEvent:
        try:
            return self._wait(self._watch.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """End the stream; iterating then stops. Closing twice, or after the client, is fine."""
        if not self._watch.closed and not self._client._loop.is_closed():
            self._wait(self._watch.aclose())
