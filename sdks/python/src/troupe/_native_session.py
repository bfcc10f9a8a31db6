"""One Attach stream's work on the native core: the actors it hosts (ActorHost's turns,
activations and answers), for one generation of the session troupe._native.Session keeps
attached (_native_app.py).

What the daemon pushes arrives serialized, in batches, through the session's socket;
_native_app.py hands each message of this generation here, and each starts its task in
arrival order, as on grpcio (_session.py). Answers carry the generation, so one finished
after its stream was lost is dropped by the core instead of reaching the next stream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import grpc

from ._actor_host import ActorHost
from ._attach_errors import raise_refusal
from ._errors import TroupeError
from ._native_calls import NativeCalls, rpc_error
from ._proto.troupe.v1 import app_pb2
from ._tracing import Metadata

if TYPE_CHECKING:
    from . import _native
    from ._app import App

log = logging.getLogger("troupe")

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class _Outbox:
    """Where ActorHost's handlers put answers. The answers of one pass of the event loop go
    to the native writer together at its end (one wake of the writer for all of them),
    which batches them on the stream."""

    def __init__(self, native: _native.Session, generation: int) -> None:
        self._native = native
        self._generation = generation
        self._pending: list[bytes] = []

    def put_nowait(self, msg: app_pb2.AppMessage) -> None:
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(msg.SerializeToString())

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        # False once this generation's stream is gone: the daemon failed that work with it.
        self._native.send(self._generation, pending)


class _NativeSession(ActorHost):
    """The instances and tasks of one registered stream (one generation)."""

    def __init__(
        self,
        app: App,
        native: _native.Session,
        generation: int,
        auth: Metadata = (),
    ) -> None:
        # Every call a turn makes goes through the core, on the stream's own connection.
        self.calls = NativeCalls(native.client())
        super().__init__(app, None, auth, _Outbox(native, generation), native=self.calls)
        self.generation = generation

    def dispatch(self, kind: object, data: bytes) -> None:
        if kind == "turn":
            self.spawn_turn(app_pb2.Turn.FromString(data))
        elif kind == "cancel":
            self.cancel_turn(app_pb2.CancelTurn.FromString(data).call_id)
        elif kind == "activate":
            self.spawn(self._activate(app_pb2.Activate.FromString(data)))
        elif kind == "deactivate":
            self.spawn(self._deactivate(app_pb2.Deactivate.FromString(data)))
        else:
            log.warning("ignoring unexpected daemon message %r", kind)

    async def close(self) -> None:
        """Cancel the stream's in-flight work (the daemon failed it with the stream) and
        drop its actors: the daemon re-activates them from stored state on the next one."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.instances.clear()
        self.calls.close()


def refusal(code: Any, details: Any, trailers: Any) -> BaseException:
    """What a registration refused for good raises: the TroupeError of its code (an
    ApiVersionMismatch for the API-version trailer), as on the pure-Python core."""
    status = _CODES.get(code, grpc.StatusCode.UNKNOWN)
    try:
        raise_refusal(status, details, trailers)
    except TroupeError as e:
        return e
    return rpc_error(code, str(details), trailers)


def describe_outage(outage: object, code: int, message: str) -> str:
    """An outage's cause as the pure-Python core's log lines word it."""
    status = _CODES.get(code, grpc.StatusCode.UNKNOWN)
    if outage == "refused":
        return f"{status.name}: {message}"
    if outage == "ended":
        return f"the daemon ended the app's stream with {status.name}"
    return message
