"""One Attach stream on the native core: _Session's turns, activations and answers, with
troupe._native.Session owning the stream (registration, reads, batched writes).

What the daemon pushes arrives serialized, in batches, through the session's socket
(loop.add_reader); each message starts its task in arrival order, as in _Session.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import grpc

from ._caller import Caller
from ._errors import TroupeError
from ._native_calls import NativeCalls, rpc_error
from ._proto.troupe.v1 import app_pb2
from ._session import _check_api_version, _raise_refusal, _Session, _StreamEnded
from ._tracing import Metadata

if TYPE_CHECKING:
    from . import _native
    from ._app import App

log = logging.getLogger("troupe")

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class _Outbox:
    """Where _Session's handlers put answers. The answers of one pass of the event loop go
    to the native writer together at its end (one wake of the writer for all of them),
    which batches them on the stream."""

    def __init__(self, native: _native.Session) -> None:
        self._native = native
        self._pending: list[bytes] = []

    def put_nowait(self, msg: app_pb2.AppMessage) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(msg.SerializeToString())

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        # False once the stream is gone: the daemon fails that work with the stream.
        self._native.send(pending)


class _NativeSession(_Session):
    def __init__(
        self,
        app: App,
        channel: grpc.aio.Channel,
        native: _native.Session,
        auth: Metadata = (),
    ) -> None:
        super().__init__(app, channel, auth)
        self.native = native
        self.calls = NativeCalls(native.client())
        self.caller = Caller(channel, app._tracing, auth, native=self.calls)
        self.out = _Outbox(native)  # type: ignore[assignment]
        self._registered: asyncio.Future[app_pb2.Registered] | None = None
        self._ended: asyncio.Future[None] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._registered = loop.create_future()
        self._ended = loop.create_future()
        fd = self.native.fileno()
        loop.add_reader(fd, self._on_events)
        try:
            self.native.attach(self.app._register_message().SerializeToString(), self.auth)
            registered = await self._registered
            _check_api_version(self.app.address, registered)
            self.batch_answers = registered.accepts_batches
            await self.app._set_registered(True, registered.daemon_version)
            await self._ended
        finally:
            loop.remove_reader(fd)
            self.native.close()
            self.calls.close()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            # The daemon re-activates these actors from stored state on the next session.
            self.instances.clear()

    def _on_events(self) -> None:
        for event in self.native.take():
            kind = event[0]
            if kind == "turn":
                self.spawn(self._turn(app_pb2.Turn.FromString(event[1])))  # type: ignore[arg-type]
            elif kind == "activate":
                self.spawn(self._activate(app_pb2.Activate.FromString(event[1])))  # type: ignore[arg-type]
            elif kind == "deactivate":
                self.spawn(self._deactivate(app_pb2.Deactivate.FromString(event[1])))  # type: ignore[arg-type]
            elif kind == "registered":
                _settle(self._registered, app_pb2.Registered.FromString(event[1]))  # type: ignore[arg-type]
            elif kind == "refused":
                _settle(self._registered, error=_refusal(*event[1:]))
            elif kind == "failed":
                _settle(self._registered, error=ConnectionError(str(event[2])))
            elif kind == "ended":
                code = _CODES.get(event[1], grpc.StatusCode.UNKNOWN)
                error: BaseException = (
                    _StreamEnded()
                    if code == grpc.StatusCode.OK
                    else ConnectionError(f"the daemon ended the app's stream with {code.name}")
                )
                _settle(self._ended, error=error)
            else:
                log.warning("ignoring unexpected daemon message %r", kind)


def _refusal(code: Any, details: Any, trailers: Any) -> BaseException:
    """What a status ending the stream before Registered raises: a TroupeError when retrying
    cannot help, else the status itself, which App re-connects after."""
    status = _CODES.get(code, grpc.StatusCode.UNKNOWN)
    try:
        _raise_refusal(status, details, trailers)
    except TroupeError as e:
        return e
    return rpc_error(code, str(details), trailers)


def _settle(
    future: asyncio.Future[Any] | None, value: Any = None, *, error: BaseException | None = None
) -> None:
    if future is None or future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
