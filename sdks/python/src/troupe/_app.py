"""Hosting actors: App attaches to the daemon and runs the turns it pushes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import socket
import time
import traceback
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import grpc
from opentelemetry.trace import TracerProvider

from ._actor import Actor, ActorSpec, maybe_await, spec_of
from ._address import (
    API_VERSION,
    SDK_NAME,
    check_receive_limit,
    open_channel,
    resolve_address,
)
from ._auth import APP_TOKEN_ENV, TokenPath, TokenSource
from ._caller import Caller
from ._context import Context
from ._duration import DurationLike, timeout_seconds, to_seconds
from ._errors import (
    API_VERSION_TRAILER,
    INSTALL_MATCHING,
    ActorError,
    ApiVersionMismatch,
    error_for_code,
)
from ._payload import decode_call, decode_data, encode_result
from ._proto.troupe.v1 import app_pb2, app_pb2_grpc, common_pb2
from ._state import State
from ._tls import TlsPath, TlsSource
from ._tracing import Metadata, Tracing
from ._turn import TurnScope, current_turn

# Records carry the logger's name ("troupe"), so messages do not repeat it.
log = logging.getLogger("troupe")

_MAX_DETAILS = 8 * 1024
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
_INITIAL_DELAY = 0.05
# Registration failures that a retry cannot fix: report them instead of looping.
# UNAUTHENTICATED among them: a missing or wrong token stays wrong until someone fixes it.
_FATAL_CODES = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNIMPLEMENTED,
}

_Key = tuple[str, str]
# What a daemon restart or a dropped stream looks like; anything else is a bug or
# a refused registration and ends App.run().
_CONNECTION_ERRORS = (grpc.aio.AioRpcError, ConnectionError, OSError, asyncio.InvalidStateError)
# grpc.aio's end-of-stream marker (missing from the type stubs).
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]


class _StreamEnded(ConnectionError):
    """The daemon ended the app's stream without an error: it is stopping or restarting,
    which an app rides out by re-connecting."""


def _describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__


def _raise_refusal(code: grpc.StatusCode, details: str | None, trailers: Any = None) -> None:
    """Raise the TroupeError of a registration refused for good (see _FATAL_CODES).

    ``trailers``: the status's trailing metadata, as grpc.aio gives it ((key, value) pairs).
    """
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        for key, value in trailers or ():
            if key == API_VERSION_TRAILER:
                text = value.decode() if isinstance(value, bytes) else str(value)
                daemon_api_version = int(text) if text.isdigit() else 0
                raise ApiVersionMismatch(
                    f"daemon refused the registration: {details}",
                    sdk_api_version=API_VERSION,
                    daemon_api_version=daemon_api_version,
                ) from None
    if code in _FATAL_CODES:
        raise error_for_code(code, f"daemon refused the registration: {details}") from None


def _check_api_version(address: str, registered: app_pb2.Registered) -> None:
    """Raise ApiVersionMismatch unless the daemon speaks this SDK's app API version.

    A daemon of another version would have refused our Register; one that answers
    anyway either accepts several versions, or is from before API versions (0), and
    then what it lacks is unknown: stopping with a clear message beats failing later
    on a message one side misreads.
    """
    if registered.api_version == API_VERSION:
        return
    daemon = f"the daemon at {address} (troupe {registered.daemon_version or '?'})"
    if registered.api_version == 0:
        speaks = f"{daemon} is from before app API versions (it names none)"
    else:
        speaks = f"{daemon} speaks app API version {registered.api_version}"
    raise ApiVersionMismatch(
        f"{speaks}, this SDK ({SDK_NAME}) speaks version {API_VERSION}: {INSTALL_MATCHING}",
        sdk_api_version=API_VERSION,
        daemon_api_version=registered.api_version,
    )


def _failure(exc: BaseException) -> common_pb2.ActorFailure:
    # An ActorError from a nested call propagates like any exception up a stack:
    # the caller sees the type that was originally raised.
    if isinstance(exc, ActorError):
        kind, message = exc.remote_type, exc.message
    else:
        kind, message = type(exc).__name__, str(exc)
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return common_pb2.ActorFailure(type=kind, message=message, details=details[-_MAX_DETAILS:])


def _lease_late_ms(lease_deadline_unix_ms: int) -> float | None:
    """How long ago (ms) the placement lease a Turn or Activate was sent under ended, or None
    while it lasts (or when there is none: 0, a single daemon).

    Past the lease another daemon may own the actor, so the work must not start. The
    daemon and the app share the host's clock, hence wall-clock time.
    """
    if not lease_deadline_unix_ms:
        return None
    late = time.time() * 1000 - lease_deadline_unix_ms
    return late if late >= 0 else None


def _turn_label(msg: app_pb2.Turn) -> str:
    """What a turn runs, for messages: "call incr", "reminder expire", "alarm"."""
    kind = msg.kind
    if kind in (common_pb2.TURN_KIND_UNSPECIFIED, common_pb2.TURN_KIND_CALL):
        return f"call {msg.name}"
    if kind == common_pb2.TURN_KIND_REMINDER:
        return f"reminder {msg.name}"
    if kind == common_pb2.TURN_KIND_TIMER:
        return f"timer {msg.name}"
    if kind == common_pb2.TURN_KIND_ALARM:
        return "alarm"
    return f"turn of kind {kind}"


class _Session:
    """One Attach stream: the instances it hosts and the tasks running their work."""

    def __init__(self, app: App, channel: grpc.aio.Channel, auth: Metadata = ()) -> None:
        self.app = app
        # Calls from turns go on the app's connection with the app's token, which the
        # daemon's ActorClient accepts as well as the client API token.
        self.caller = Caller(channel, app._tracing, auth)
        self.stub = app_pb2_grpc.AppHostStub(channel)  # type: ignore[no-untyped-call]
        self.auth = auth
        self.instances: dict[_Key, Actor] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        # gRPC streams allow one write at a time; every reply goes through this queue.
        self.out: asyncio.Queue[app_pb2.AppMessage] = asyncio.Queue()
        # An answer taken from `out` that did not fit in the previous batch: written next.
        self._held: app_pb2.AppMessage | None = None
        # Whether answers may go out in an AppBatch: the daemon says so in Registered.
        # An older one would end the stream on an AppBatch (to it an empty AppMessage).
        self.batch_answers = False

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

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
            _raise_refusal(code, await call.details(), await call.trailing_metadata())
            raise ConnectionError(
                f"daemon ended the stream before registering ({code.name})"
            ) from None
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as e:
            _raise_refusal(e.code(), e.details(), e.trailing_metadata())
            raise
        if first is _EOF:
            code = await call.code()
            _raise_refusal(code, await call.details(), await call.trailing_metadata())
            raise ConnectionError(f"daemon ended the stream before registering ({code.name})")
        assert isinstance(first, app_pb2.DaemonMessage)
        if first.WhichOneof("kind") != "registered":
            raise ConnectionError(f"expected Registered first, got {first.WhichOneof('kind')}")
        _check_api_version(self.app.address, first.registered)
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
                    raise _StreamEnded()
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
            self.spawn(self._turn(msg.turn))
        elif kind == "activate":
            self.spawn(self._activate(msg.activate))
        elif kind == "deactivate":
            self.spawn(self._deactivate(msg.deactivate))
        else:
            where = " in a batch" if in_batch else ""
            log.warning("ignoring unexpected daemon message %r%s", kind, where)

    async def _activate(self, msg: app_pb2.Activate) -> None:
        ref = msg.actor
        result = app_pb2.ActivateResult(call_id=msg.call_id)
        # Checked here, where the activation starts (nothing is awaited before the
        # constructor and on_activate run), not when the message was read.
        late = _lease_late_ms(msg.lease_deadline_unix_ms)
        if late is not None:
            log.warning(
                "not activating %s/%s: its daemon's placement lease ended %.0f ms"
                " before the activation could start; answered lease_expired",
                ref.type,
                ref.id,
                late,
            )
            result.lease_expired = True
            self.out.put_nowait(app_pb2.AppMessage(activated=result))
            return
        spec = self.app._specs.get(ref.type)
        if spec is None:
            result.error.CopyFrom(self.app._unknown_type(ref.type))
        else:
            try:
                obj = spec.cls()
                obj._troupe_id = ref.id
                obj._troupe_state = State(msg.state)
                obj._troupe_ctx = Context(self.caller, ref.type, ref.id)
                scope = TurnScope(obj.state, f"{ref.type}/{ref.id}", "on_activate")
                current_turn.set(scope)
                try:
                    await maybe_await(obj.on_activate())
                    result.changes.extend(obj.state._commit(scope))
                finally:
                    obj.state._end(scope)
            except Exception as e:
                result.error.CopyFrom(_failure(e))
            else:
                self.instances[(ref.type, ref.id)] = obj
        self.out.put_nowait(app_pb2.AppMessage(activated=result))

    async def _turn(self, msg: app_pb2.Turn) -> None:
        result = app_pb2.TurnResult(call_id=msg.call_id)
        # Checked here, where the turn starts (nothing is awaited between this and the
        # handler), not when the message was read: no outcome, no changes, no span.
        late = _lease_late_ms(msg.lease_deadline_unix_ms)
        if late is not None:
            ref = msg.actor
            log.warning(
                "not running %s of %s/%s: its daemon's placement lease ended"
                " %.0f ms before the turn could start; answered lease_expired",
                _turn_label(msg),
                ref.type,
                ref.id,
                late,
            )
            result.lease_expired = True
            self.out.put_nowait(app_pb2.AppMessage(turn_result=result))
            return
        try:
            with self.app._tracing.turn(msg):
                reply = await self._run_turn(msg, result)
            result.reply.CopyFrom(reply)
        except Exception as e:
            result.ClearField("changes")
            result.error.CopyFrom(_failure(e))
        self.out.put_nowait(app_pb2.AppMessage(turn_result=result))

    async def _run_turn(self, msg: app_pb2.Turn, result: app_pb2.TurnResult) -> common_pb2.Payload:
        ref = msg.actor
        obj = self.instances.get((ref.type, ref.id))
        if obj is None:
            raise LookupError(f"actor {ref.type}/{ref.id} is not active in this app")
        kind = msg.kind
        readonly = False
        scheduled = kind != common_pb2.TURN_KIND_UNSPECIFIED and kind != common_pb2.TURN_KIND_CALL
        handler: Callable[[], Any]
        name = msg.name  # the method, or the hook a scheduled turn runs (for messages)
        if not scheduled:
            spec = self.app._specs[ref.type]
            attr = spec.methods.get(msg.name)
            if attr is None:
                # TypeError, as the TypeScript SDK raises: the caller named a
                # method the type lacks, a caller error (the CLI exits 2).
                raise TypeError(
                    f"actor type {ref.type!r} has no method {msg.name!r};"
                    f" its methods are: {', '.join(sorted(spec.methods))}"
                )
            readonly = msg.name in spec.readonly
            args, kwargs = decode_call(msg.payload)
            handler = functools.partial(getattr(obj, attr), *args, **kwargs)
        elif kind == common_pb2.TURN_KIND_REMINDER:
            name = "on_reminder"
            handler = functools.partial(obj.on_reminder, msg.name, decode_data(msg.payload))
        elif kind == common_pb2.TURN_KIND_TIMER:
            name = "on_timer"
            handler = functools.partial(obj.on_timer, msg.name, decode_data(msg.payload))
        elif kind == common_pb2.TURN_KIND_ALARM:
            name = "on_alarm"
            handler = functools.partial(obj.on_alarm, decode_data(msg.payload))
        else:
            raise NotImplementedError(
                f"{SDK_NAME} does not handle turns of kind {kind}; upgrade the SDK"
            )
        state = obj.state
        # The daemon may run this turn beside others of the same actor (read-only ones,
        # or one nested in a turn waiting on a chain that called back into this
        # reentrant actor): the scope keeps this turn's chain, deadline and changes apart.
        scope = TurnScope(
            state,
            f"{ref.type}/{ref.id}",
            name,
            readonly=readonly,
            chain=msg.chain if msg.HasField("chain") else None,
            deadline_unix_ms=msg.deadline_unix_ms,
        )
        current_turn.set(scope)
        try:
            value = await maybe_await(handler())
            # A scheduled turn has no caller: its reply is JSON null.
            reply = encode_result(None if scheduled else value)
            if readonly:
                # Normally empty. Changes made in place to values read are undone here
                # and sent, so that the daemon refuses the turn with an error naming them.
                result.changes.extend(state._refuse(scope))
            else:
                result.changes.extend(state._commit(scope))
        except BaseException:
            state._rollback(scope)
            raise
        finally:
            state._end(scope)
        return reply

    async def _deactivate(self, msg: app_pb2.Deactivate) -> None:
        ref = msg.actor
        result = app_pb2.DeactivateResult(call_id=msg.call_id)
        obj = self.instances.get((ref.type, ref.id))
        if obj is not None:
            scope = TurnScope(obj.state, f"{ref.type}/{ref.id}", "on_deactivate")
            current_turn.set(scope)
            try:
                await maybe_await(obj.on_deactivate())
                result.changes.extend(obj.state._commit(scope))
            except Exception:
                log.exception("on_deactivate of %s/%s raised", ref.type, ref.id)
                obj.state._rollback(scope)
            finally:
                obj.state._end(scope)
            self.instances.pop((ref.type, ref.id), None)
        self.out.put_nowait(app_pb2.AppMessage(deactivated=result))


class App:
    """Hosts actor types behind the daemon.

    ``address`` defaults to ``$TROUPE_ADDR``, then ``127.0.0.1:7420``.
    ``app_name`` is shown in admin output (default: ``hostname-pid``).
    ``tracer_provider`` records the turns' spans (default: OpenTelemetry's global
    provider); the W3C trace context of each turn is continued either way.
    The app re-connects by itself, with exponential backoff up to
    ``max_reconnect_delay`` seconds, when the daemon restarts or the stream drops;
    actors active at that moment are dropped here and re-activated by the daemon
    from stored state on their next call.

    ``max_receive_bytes`` bounds one message from the daemon (a turn with its
    payload, an activation with the actor's stored state, or several together);
    None (the default) receives any size the daemon sends. The app declares it
    when it registers, and the daemon fails work that would not fit with
    RESOURCE_EXHAUSTED for its caller instead of sending it, so the app stays
    attached. At least 65536. It also bounds replies to calls made from turns,
    which share the app's connection.

    A daemon started with app tokens wants one on the app's stream, as
    ``authorization: Bearer <token>`` metadata. The token is ``token``, else the
    first one in the file ``token_file`` (one per line; blank lines and lines
    starting with ``#`` are skipped), else the first of ``$TROUPE_APP_TOKEN``
    (comma- or newline-separated), else none is sent. The file and the
    environment are read again at each (re-)connect, so a rotated file is picked
    up. Calls the actors make through ``self.ctx`` send the same token. The
    client API token is not an app token: a missing or refused token ends
    :meth:`run` with :class:`Unauthenticated` instead of re-connecting. The token
    never appears in ``repr()`` or in log messages.

    ``tls_ca``, ``tls_cert`` and ``tls_key`` (default: ``$TROUPE_TLS_CA``,
    ``$TROUPE_TLS_CERT``, ``$TROUPE_TLS_KEY``) connect to a daemon with TLS on, as
    for :class:`Client`; the files are read again at each (re-)connect, and one
    that cannot be read ends :meth:`run` with :class:`TlsConfigError`.
    """

    def __init__(
        self,
        actors: Sequence[type[Actor]],
        *,
        address: str | None = None,
        app_name: str | None = None,
        max_reconnect_delay: DurationLike = 2.0,
        tracer_provider: TracerProvider | None = None,
        max_receive_bytes: int | None = None,
        token: str | None = None,
        token_file: TokenPath | None = None,
        tls_ca: TlsPath | None = None,
        tls_cert: TlsPath | None = None,
        tls_key: TlsPath | None = None,
    ) -> None:
        self._auth = TokenSource(token, token_file, APP_TOKEN_ENV)
        self._tls = TlsSource(tls_ca, tls_cert, tls_key)
        self._specs: dict[str, ActorSpec] = {}
        for cls in actors:
            spec = spec_of(cls)
            if spec.name in self._specs:
                raise ValueError(f"two classes declare actor type {spec.name!r}")
            self._specs[spec.name] = spec
        if not self._specs:
            raise ValueError("App needs at least one actor class")
        check_receive_limit(max_receive_bytes)
        self.max_receive_bytes = max_receive_bytes
        self.address = resolve_address(address)
        self.app_name = app_name or f"{socket.gethostname()}-{os.getpid()}"
        self.max_reconnect_delay = to_seconds(max_reconnect_delay, "max_reconnect_delay")
        self._tracing = Tracing(tracer_provider)
        self.daemon_version = ""
        self._registered = False
        self._sessions = 0
        self._cond = asyncio.Condition()
        self._stop = asyncio.Event()
        self._running = False

    def __repr__(self) -> str:
        tls = self._tls.describe()
        return (
            f"<troupe.App {self.app_name} ({', '.join(self._specs)}) at {self.address},"
            f" {self._auth.describe()}{', ' + tls if tls else ''}>"
        )

    @property
    def registered(self) -> bool:
        """Whether the app is attached to the daemon and its types are registered right now."""
        return self._registered

    @property
    def sessions(self) -> int:
        """How many times the app has registered with a daemon (re-connects included)."""
        return self._sessions

    async def wait_registered(
        self, *, sessions: int = 1, timeout: DurationLike | None = None
    ) -> None:
        """Wait until the app is registered and has registered at least ``sessions`` times.

        ``sessions=app.sessions + 1`` waits for the next re-connect. Raises
        TimeoutError after ``timeout`` (seconds, a timedelta or ``"15s"``).
        """
        await asyncio.wait_for(self._wait_registered(sessions), timeout_seconds(timeout))

    async def _wait_registered(self, sessions: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._registered and self._sessions >= sessions)

    async def _set_registered(self, registered: bool, daemon_version: str = "") -> None:
        async with self._cond:
            self._registered = registered
            if registered:
                self._sessions += 1
                self.daemon_version = daemon_version
                log.info(
                    "registered %s with daemon %s at %s",
                    ", ".join(self._specs),
                    daemon_version or "?",
                    self.address,
                )
            self._cond.notify_all()

    def _register_message(self) -> app_pb2.Register:
        return app_pb2.Register(
            app_name=self.app_name,
            types=[s.to_proto() for s in self._specs.values()],
            sdk=SDK_NAME,
            api_version=API_VERSION,
            accepts_batches=True,
            # 0: no limit of the app's own (the channel takes any size).
            max_receive_bytes=self.max_receive_bytes or 0,
        )

    def _unknown_type(self, name: str) -> common_pb2.ActorFailure:
        return common_pb2.ActorFailure(
            type="LookupError",
            message=f"this app does not host actor type {name!r};"
            f" it hosts {', '.join(self._specs)}",
        )

    def stop(self) -> None:
        """Ask :meth:`run` to return: the stream is closed and in-flight turns are cancelled.

        Call it from the event loop's thread (e.g. ``loop.call_soon_threadsafe(app.stop)``
        from elsewhere).
        """
        self._stop.set()

    async def run(self) -> None:
        """Attach to the daemon and host actors until :meth:`stop` is called or the task is
        cancelled. Raises :class:`Unauthenticated` if the daemon refuses the app's token
        (or wants one), :class:`ApiVersionMismatch` if it speaks another app API version
        (install matching versions), :class:`InvalidArgument` (or another TroupeError) if
        it refuses the registration, which retrying would not fix; OSError or ValueError if
        ``token_file`` cannot be read or holds no token, :class:`TlsConfigError` if a TLS
        file cannot.
        """
        if self._running:
            raise RuntimeError("App.run() is already running")
        self._running = True
        self._stop.clear()
        delay = _INITIAL_DELAY
        quiet = False
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            while not self._stop.is_set():
                auth = self._auth.metadata()
                credentials = self._tls.credentials()
                channel = open_channel(self.address, self.max_receive_bytes, credentials)
                session = _Session(self, channel, auth)
                sessions_before = self._sessions
                task = asyncio.create_task(session.run())
                try:
                    await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    # Also reached when run() itself is cancelled: never leave the session behind.
                    task.cancel()
                    await asyncio.wait({task})
                    was_registered = self._registered
                    if was_registered:
                        await self._set_registered(False)
                    await channel.close(None)
                error = None if task.cancelled() else task.exception()
                if isinstance(error, _StreamEnded):
                    # An expected end (the daemon stopping, e.g. for a restart): said once;
                    # the failed attempts while it is down are only debug records.
                    log.warning(
                        "the daemon at %s closed the app's stream (stopping or restarting);"
                        " re-connecting until it is back",
                        self.address,
                    )
                    quiet = True
                elif isinstance(error, _CONNECTION_ERRORS):
                    # Log the first failure of an outage loudly, the retries quietly.
                    if self._sessions > sessions_before:
                        quiet = False
                    log.log(
                        logging.DEBUG if quiet else logging.WARNING,
                        "no connection to the daemon at %s (%s); retrying",
                        self.address,
                        _describe(error),
                    )
                    quiet = True
                elif error is not None:
                    raise error
                if self._stop.is_set():
                    break
                if was_registered:
                    delay = _INITIAL_DELAY
                # Jitter keeps many apps from reconnecting to a restarted daemon in lockstep.
                pause = delay * random.uniform(0.8, 1.2)
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stop_wait), pause)
                delay = min(delay * 2, self.max_reconnect_delay)
        finally:
            stop_wait.cancel()
            self._running = False

    def run_forever(self) -> None:
        """Run the app in a new event loop until SIGINT or SIGTERM, then return normally."""
        asyncio.run(self._run_until_signal())

    async def _run_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread, or a platform without signal handlers
        try:
            await self.run()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
