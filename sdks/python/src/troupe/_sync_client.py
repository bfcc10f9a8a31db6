"""Calling actors from blocking code: SyncClient runs a Client on a private event loop.

The actor proxies and watches it hands out are in _sync_handles.py, its reminders, alarms
and timers in _sync_schedule.py."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from opentelemetry.trace import TracerProvider

from ._auth import TokenPath
from ._caller import Params
from ._client import Client
from ._duration import DurationLike
from ._proxy import A
from ._retry import DEFAULT_RETRY_BUDGET, RetryBudget
from ._sync_handles import SyncActorProxy, SyncWatch
from ._sync_schedule import SyncClientScheduling
from ._tls import TlsPath

if TYPE_CHECKING:
    from ._actor import Actor

T = TypeVar("T")


class SyncClient(SyncClientScheduling):
    """A blocking client: the async Client driven by an event loop on a private thread.

    Use it in scripts and non-async code; inside asyncio code use :class:`Client`.
    Calls are children of the span current in the calling thread. ``token`` and
    ``token_file`` (default: ``$TROUPE_API_TOKEN``), ``tls_ca``, ``tls_cert`` and
    ``tls_key`` (default: ``$TROUPE_TLS_CA``...), ``retry`` and ``retry_budget`` as for
    :class:`Client`.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        timeout: DurationLike | None = None,
        tracer_provider: TracerProvider | None = None,
        token: str | None = None,
        token_file: TokenPath | None = None,
        tls_ca: TlsPath | None = None,
        tls_cert: TlsPath | None = None,
        tls_key: TlsPath | None = None,
        retry: bool = True,
        retry_budget: RetryBudget | None = DEFAULT_RETRY_BUDGET,
    ) -> None:
        # Built first: a bad token or TLS option raises before a thread is started.
        self._client = Client(
            address,
            timeout=timeout,
            tracer_provider=tracer_provider,
            token=token,
            token_file=token_file,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            retry=retry,
            retry_budget=retry_budget,
        )
        self.address = self._client.address
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="troupe-sync-client", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        return repr(self._client).replace("troupe.Client", "troupe.SyncClient", 1)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._submit(coro).result()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("this SyncClient is closed")
        # The task runs in a copy of this thread's contextvars (call_soon_threadsafe
        # captures them), so the caller's current span is the parent of the call's.
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and stop the private event loop."""
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @overload
    def actor(
        self,
        actor_type: type[A],
        actor_id: str,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> SyncActorProxy[A]: ...

    @overload
    def actor(
        self,
        actor_type: str,
        actor_id: str,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> SyncActorProxy[Any]: ...

    def actor(
        self,
        actor_type: str | type[Actor],
        actor_id: str,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> SyncActorProxy[Any]:
        """A blocking proxy on one actor; ``actor_type`` is a name or an actor class."""
        return SyncActorProxy(
            self, self._client.actor(actor_type, actor_id, timeout=timeout, metadata=metadata)
        )

    def invoke(
        self,
        actor_type: str,
        actor_id: str,
        method: str,
        params: Params = None,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        idempotency_retention: DurationLike | None = None,
    ) -> Any:
        """See :meth:`Client.invoke`."""
        return self._run(
            self._client.invoke(
                actor_type,
                actor_id,
                method,
                params,
                timeout=timeout,
                metadata=metadata,
                idempotency_key=idempotency_key,
                idempotency_retention=idempotency_retention,
            )
        )

    def tell(
        self,
        actor_type: str,
        actor_id: str,
        method: str,
        params: Params = None,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
        durable: bool | None = None,
        idempotency_key: str | None = None,
        idempotency_retention: DurationLike | None = None,
        delay: DurationLike | None = None,
        at: datetime | str | None = None,
    ) -> str | None:
        """See :meth:`Client.tell`."""
        return self._run(
            self._client.tell(
                actor_type,
                actor_id,
                method,
                params,
                timeout=timeout,
                metadata=metadata,
                durable=durable,
                idempotency_key=idempotency_key,
                idempotency_retention=idempotency_retention,
                delay=delay,
                at=at,
            )
        )

    def get_state(
        self,
        actor_type: str,
        actor_id: str,
        keys: Sequence[str] = (),
        *,
        raw: bool = False,
        timeout: DurationLike | None = None,
    ) -> dict[str, Any]:
        """See :meth:`Client.get_state`."""
        return self._run(
            self._client.get_state(actor_type, actor_id, keys, raw=raw, timeout=timeout)
        )

    def get_state_expiry(
        self,
        actor_type: str,
        actor_id: str,
        keys: Sequence[str] = (),
        *,
        timeout: DurationLike | None = None,
    ) -> dict[str, datetime]:
        """See :meth:`Client.get_state_expiry`."""
        return self._run(self._client.get_state_expiry(actor_type, actor_id, keys, timeout=timeout))

    def watch(
        self,
        actor_type: str | type[Actor],
        actor_id: str,
        *,
        after: str | None = None,
        reconnect: bool = False,
    ) -> SyncWatch:
        """See :meth:`Client.watch`: ``with client.watch("bus", "7") as events:`` returns
        once the daemon watches the actor, and ``for event in events:`` blocks for each
        event. Leaving the block, ``events.close()`` or :meth:`close` ends it.
        ``reconnect=True``: a broken stream is re-opened by itself after the last event
        (the wait for the next event goes on meanwhile)."""
        return SyncWatch(
            self, self._client.watch(actor_type, actor_id, after=after, reconnect=reconnect)
        )

    def watch_type(
        self,
        actor_type: str | type[Actor],
        *,
        after: str | None = None,
        id_prefix: str | None = None,
        reconnect: bool = False,
    ) -> SyncWatch:
        """See :meth:`Client.watch_type`: the events of every actor of a type (or of those
        whose id starts with ``id_prefix``), a map of every bus::

            with client.watch_type("bus") as events:
                for event in events:
                    show(event.actor_id, event.value)

        Entering returns once the daemon watches the type; leaving the block,
        ``events.close()`` or :meth:`close` ends it. ``reconnect=True``: a broken stream is
        re-opened by itself, as :meth:`Client.watch_type` says."""
        return SyncWatch(
            self,
            self._client.watch_type(
                actor_type, after=after, id_prefix=id_prefix, reconnect=reconnect
            ),
        )
