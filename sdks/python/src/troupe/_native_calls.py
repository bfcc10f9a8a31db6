"""The client API's calls on the native core: futures on the running event loop, completed
in batches when troupe._native signals that answers arrived.

Invoke and tell are keyed and retried by the core (crates/sdk-core); their failures come
back with what the retries did, worded here as on the pure-Python core (_retry.py). The
rarer RPCs (state reads, reminders, alarms, timers) go as serialized messages and fail with
grpcio's error type, so the Caller reads both cores' failures alike."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import cast

import grpc

# Imported only where troupe._native loaded (_core.py): this module drives it.
from . import _native
from ._errors import InvalidArgument, from_rpc_error
from ._retry import GaveUp, failure_note, log_retry

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def rpc_error(
    code: int | None, message: str, trailers: Sequence[tuple[str, str]] = ()
) -> grpc.aio.AioRpcError:
    """The native core's failure as grpcio's, so retries and error mapping (_retry.py,
    _errors.py) treat both cores' failures alike."""
    status = _CODES.get(code if code is not None else 2, grpc.StatusCode.UNKNOWN)
    return grpc.aio.AioRpcError(
        status,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(*trailers),
        details=message,
        debug_error_string=f"troupe native core: {status.name}: {message}",
    )


def _failure(answer: _native.Failure, what: str | None) -> Exception:
    """A failed call's exception: grpcio's for a rarer RPC (``what`` None), else the SDK's
    for an invoke or tell, saying how often it was retried."""
    code, message, trailers, retries, elapsed, gave_up, last = answer
    err = rpc_error(code, message, trailers)
    if what is None:
        return err
    note = failure_note(
        retries,
        elapsed,
        last=last,
        gave_up=cast("GaveUp | None", gave_up),
        overloaded=err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    return from_rpc_error(err, what, note=note)


class NativeCalls:
    """One native client's calls. Binds to the event loop of its first call, as a grpc.aio
    channel does; its answers wake that loop once per batch."""

    def __init__(self, client: _native.Client) -> None:
        self._client = client
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
        # What names each invoke and tell under way, for its error and its retries' logs.
        self._what: dict[int, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # The calls made in one pass of the event loop start together, at its end: one
        # wake of the native runtime for all of them.
        self._flush_due = False

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._client.fileno())
            loop.add_reader(self._client.fileno(), self._on_answers)
            self._loop = loop
        return loop

    def _on_answers(self) -> None:
        answers, retries = self._client.take()
        for call_id, retry, pause, details in retries:
            log_retry(self._what.get(call_id, "call"), details, retry, pause)
        for call_id, answer in answers:
            what = self._what.pop(call_id, None)
            future = self._waiting.pop(call_id, None)
            if future is None or future.done():
                continue
            if isinstance(answer, bytes):
                future.set_result(answer)
            else:
                future.set_exception(_failure(answer, what))

    async def _call(self, start: Callable[[int], None], what: str | None) -> bytes:
        """Starts a call through ``start(call_id)`` and waits for its answer."""
        loop = self._bind()
        call_id = next(self._ids)
        try:
            start(call_id)
        except _native.InvalidKey as e:
            raise InvalidArgument(str(e)) from None
        future: asyncio.Future[bytes] = loop.create_future()
        self._waiting[call_id] = future
        if what is not None:
            self._what[call_id] = what
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        try:
            return await future
        except asyncio.CancelledError:
            # The caller stopped waiting: end the RPC too, as grpc.aio does.
            self._waiting.pop(call_id, None)
            self._what.pop(call_id, None)
            self._client.cancel(call_id)
            raise

    def _flush(self) -> None:
        self._flush_due = False
        self._client.flush()

    async def invoke(
        self,
        request: bytes,
        key: str | None,
        timeout: float | None,
        metadata: Sequence[tuple[str, str]],
        *,
        retry: bool,
        what: str,
    ) -> bytes:
        """The serialized InvokeResponse to a serialized InvokeRequest sent with ``key``
        (None: a fresh one) and, with ``retry``, resent on UNAVAILABLE or a RESOURCE_EXHAUSTED
        with a retry pushback; raises the SDK's error, named by ``what`` (InvalidArgument for
        a bad key, before anything is sent)."""

        def start(call_id: int) -> None:
            self._client.invoke(call_id, request, key, timeout, metadata, retry)

        return await self._call(start, what)

    async def tell(
        self,
        request: bytes,
        key: str | None,
        timeout: float | None,
        metadata: Sequence[tuple[str, str]],
        *,
        retry: bool,
        what: str,
    ) -> bytes:
        """A serialized TellRequest, keyed and retried as :meth:`invoke`; the serialized
        TellResponse."""

        def start(call_id: int) -> None:
            self._client.tell(call_id, request, key, timeout, metadata, retry)

        return await self._call(start, what)

    async def unary(
        self,
        method: str,
        request: bytes,
        timeout: float | None,
        metadata: Sequence[tuple[str, str]],
    ) -> bytes:
        """One of the rarer ActorClient RPCs (``method``: its name, e.g. "GetState"), sent
        once; the serialized response, or raises AioRpcError."""
        path = f"/troupe.v1.ActorClient/{method}"

        def start(call_id: int) -> None:
            self._client.unary(call_id, path, request, timeout, metadata)

        return await self._call(start, None)

    def close(self) -> None:
        """End every call under way; their callers see CancelledError, as with grpc.aio."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._client.fileno())
        self._loop = None
        self._flush_due = False
        self._client.close()
        self._what.clear()
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            future.cancel()
