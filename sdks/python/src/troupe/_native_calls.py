"""Invoke and tell on the native core: futures on the running event loop, completed in
batches when troupe._native signals that answers arrived."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from . import _native

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def rpc_error(
    code: int | None, message: str, trailers: Sequence[tuple[str, str]] = ()
) -> Exception:
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


class NativeCalls:
    """One native client's calls. Binds to the event loop of its first call, as a grpc.aio
    channel does; its answers wake that loop once per batch."""

    def __init__(self, client: _native.Client) -> None:
        self._client = client
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
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
        for call_id, answer in self._client.take():
            future = self._waiting.pop(call_id, None)
            if future is None or future.done():
                continue
            if isinstance(answer, bytes):
                future.set_result(answer)
            else:
                future.set_exception(rpc_error(*answer))

    async def _call(
        self,
        invoke: bool,
        request: bytes,
        timeout: float | None,
        metadata: Sequence[tuple[str, str]],
    ) -> bytes:
        loop = self._bind()
        call_id = next(self._ids)
        future: asyncio.Future[bytes] = loop.create_future()
        self._waiting[call_id] = future
        if invoke:
            self._client.invoke(call_id, request, timeout, metadata)
        else:
            self._client.tell(call_id, request, timeout, metadata)
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        try:
            return await future
        except asyncio.CancelledError:
            # The caller stopped waiting: end the RPC too, as grpc.aio does.
            self._waiting.pop(call_id, None)
            self._client.cancel(call_id)
            raise

    def _flush(self) -> None:
        self._flush_due = False
        self._client.flush()

    async def invoke(
        self, request: bytes, timeout: float | None, metadata: Sequence[tuple[str, str]]
    ) -> bytes:
        """The serialized InvokeResponse to a serialized InvokeRequest; raises AioRpcError."""
        return await self._call(True, request, timeout, metadata)

    async def tell(
        self, request: bytes, timeout: float | None, metadata: Sequence[tuple[str, str]]
    ) -> None:
        await self._call(False, request, timeout, metadata)

    def close(self) -> None:
        """End every call under way; their callers see CancelledError, as with grpc.aio."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._client.fileno())
        self._loop = None
        self._flush_due = False
        self._client.close()
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            future.cancel()
