"""One Attach stream to the daemon on grpcio (_Session): registration, reading what the
daemon pushes and handing it to the actors the stream hosts (ActorHost, _actor_host.py),
and writing their answers, batched. Re-connects are App's on grpcio (_app.py); the native
core runs its own stream (_native_app.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from ._actor_host import ActorHost
from ._attach_errors import StreamEnded, check_api_version, raise_refusal
from ._proto.troupe.v1 import app_pb2, app_pb2_grpc
from ._tracing import Metadata

if TYPE_CHECKING:
    from ._app import App

# Records carry the logger's name ("troupe"), so messages do not repeat it.
log = logging.getLogger("troupe")

# Answers that are ready together go out in one AppBatch (many tiny HTTP/2 DATA
# frames cost the daemon far more than a few larger ones, and HTTP/2 peers limit
# how many they buffer). A batch stays well under the daemon's 64 MiB message
# limit: at most this many answers and bytes; an answer above _ALONE_BYTES goes alone.
_BATCH_MESSAGES = 256
_BATCH_BYTES = 1024 * 1024
_ALONE_BYTES = 64 * 1024
# What each answer adds inside AppBatch beyond its own size: the field tag (1 byte)
# and its length (at most 3 bytes for an answer of _ALONE_BYTES or less).
_BATCH_ENTRY_OVERHEAD = 4

# grpc.aio's end-of-stream marker (missing from the type stubs).
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]


class _Session(ActorHost):
    """One Attach stream on grpcio and the actors it hosts."""

    out: asyncio.Queue[app_pb2.AppMessage]

    def __init__(self, app: App, channel: grpc.aio.Channel, auth: Metadata = ()) -> None:
        # gRPC streams allow one write at a time; every reply goes through this queue.
        super().__init__(app, channel, auth, asyncio.Queue())
        self.stub = app_pb2_grpc.AppHostStub(channel)  # type: ignore[no-untyped-call]
        self.auth = auth
        # An answer taken from `out` that did not fit in the previous batch: written next.
        self._held: app_pb2.AppMessage | None = None
        # Whether answers may go out in an AppBatch: the daemon says so in Registered.
        # An older one would end the stream on an AppBatch (to it an empty AppMessage).
        self.batch_answers = False

    async def run(self) -> None:
        call = self.stub.Attach(metadata=self.auth or None)
        try:
            registered = await self._register(call)
            self.batch_answers = registered.accepts_batches
            await self.app._set_registered(True, registered.daemon_version)
            writer = asyncio.create_task(self._write_loop(call))
            reader = asyncio.create_task(self._read_loop(call))
            try:
                done, _ = await asyncio.wait({writer, reader}, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    t.result()
            finally:
                writer.cancel()
                reader.cancel()
                await asyncio.gather(writer, reader, return_exceptions=True)
        finally:
            call.cancel()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            # The daemon re-activates these actors from stored state on the next session.
            self.instances.clear()

    async def _register(self, call: grpc.aio.StreamStreamCall) -> app_pb2.Registered:  # type: ignore[type-arg]
        """Send Register and wait for Registered; a refusal raises the matching TroupeError."""
        try:
            await call.write(app_pb2.AppMessage(register=self.app._register_message()))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            # The daemon checks the token before reading anything, so it may end the stream
            # before Register is written. Its status is then on the call, unless grpc.aio lost
            # it to the write racing it (it reports INTERNAL then): retried as a dropped
            # connection, the next attempt learns it.
            code = await call.code()
            raise_refusal(code, await call.details(), await call.trailing_metadata())
            raise ConnectionError(
                f"daemon ended the stream before registering ({code.name})"
            ) from None
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as e:
            raise_refusal(e.code(), e.details(), e.trailing_metadata())
            raise
        if first is _EOF:
            code = await call.code()
            raise_refusal(code, await call.details(), await call.trailing_metadata())
            raise ConnectionError(f"daemon ended the stream before registering ({code.name})")
        assert isinstance(first, app_pb2.DaemonMessage)
        if first.WhichOneof("kind") != "registered":
            raise ConnectionError(f"expected Registered first, got {first.WhichOneof('kind')}")
        check_api_version(self.app.address, first.registered)
        return first.registered

    async def _write_loop(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        while True:
            await call.write(await self._next_write())

    async def _next_write(self) -> app_pb2.AppMessage:
        """The next message to write: the answers queued by now, in one AppBatch when there
        are several (a single answer goes alone). Never waits for more than the first."""
        first = self._held
        self._held = None
        if first is None:
            first = await self.out.get()
        if not self.batch_answers or self.out.empty():
            return first
        size = first.ByteSize()
        if size > _ALONE_BYTES:
            return first
        batch = [first]
        total = size + _BATCH_ENTRY_OVERHEAD
        while len(batch) < _BATCH_MESSAGES and not self.out.empty():
            msg = self.out.get_nowait()
            size = msg.ByteSize()
            if size > _ALONE_BYTES or total + size + _BATCH_ENTRY_OVERHEAD > _BATCH_BYTES:
                self._held = msg  # goes first in the next write, alone or starting a batch
                break
            batch.append(msg)
            total += size + _BATCH_ENTRY_OVERHEAD
        if len(batch) == 1:
            return first
        return app_pb2.AppMessage(batch=app_pb2.AppBatch(messages=batch))

    async def _read_loop(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        while True:
            msg = await call.read()
            if msg is _EOF:
                code = await call.code()
                if code == grpc.StatusCode.OK:
                    raise StreamEnded()
                raise ConnectionError(f"the daemon ended the app's stream with {code.name}")
            assert isinstance(msg, app_pb2.DaemonMessage)
            if msg.WhichOneof("kind") == "batch":
                # Work that was ready together: each message runs as if it came alone, in
                # order (its task starts before the next one's).
                for inner in msg.batch.messages:
                    self._dispatch(inner, in_batch=True)
            else:
                self._dispatch(msg)

    def _dispatch(self, msg: app_pb2.DaemonMessage, *, in_batch: bool = False) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "turn":
            self.spawn_turn(msg.turn)
        elif kind == "cancel":
            self.cancel_turn(msg.cancel.call_id)
        elif kind == "activate":
            self.spawn(self._activate(msg.activate))
        elif kind == "deactivate":
            self.spawn(self._deactivate(msg.deactivate))
        else:
            where = " in a batch" if in_batch else ""
            log.warning("ignoring unexpected daemon message %r%s", kind, where)
