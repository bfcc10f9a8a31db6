"""Hosting actors: App attaches to the daemon, re-connects, and hosts its classes through
one _Session (_session.py) per stream. On the native core, troupe._native re-connects
(_native_app.py); on grpcio, the loop in App._run_on_grpcio does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
from collections.abc import Sequence

from opentelemetry.trace import TracerProvider

from . import _core
from ._actor import Actor, ActorSpec, spec_of
from ._address import (
    API_VERSION,
    SDK_NAME,
    check_receive_limit,
    open_channel,
    resolve_address,
)
from ._attach_errors import (
    CONNECTION_ERRORS,
    StreamEnded,
    describe,
    log_no_connection,
    log_stream_closed,
)
from ._auth import APP_TOKEN_ENV, TokenPath, TokenSource
from ._duration import DurationLike, timeout_seconds, to_seconds
from ._filters import CallFilter, check_filters
from ._proto.troupe.v1 import app_pb2, common_pb2
from ._retry import DEFAULT_RETRY_BUDGET, RetryBudget, check_retry_budget
from ._session import _Session
from ._tls import TlsPath, TlsSource
from ._tracing import Tracing

# Records carry the logger's name ("troupe"), so messages do not repeat it.
log = logging.getLogger("troupe")

_INITIAL_DELAY = 0.05


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

    ``filters`` run around every turn of the hosted actors, the first outermost:
    async functions ``(call: IncomingCall, next_) -> result`` for what cuts across
    types (authorisation from the call's metadata, logging, metrics). A filter runs
    the turn by awaiting ``next_()`` at most once, may replace its result, answers
    the call itself by returning without it, and fails the turn by raising (the
    caller gets :class:`ActorError`, the turn's state changes are undone).

    ``retry_budget`` bounds the retries of the calls the hosted actors make through
    ``self.ctx`` (and of no other), as :class:`Client`'s ``retry_budget`` bounds a
    client's: one budget for all the calls made on one connection to the daemon, fresh
    at each (re-)connect. The default is the Client's,
    ``RetryBudget(max_tokens=100, token_ratio=0.1)``; ``None`` is no budget: each call
    retries until the turn's caller's deadline.
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
        filters: Sequence[CallFilter] = (),
        retry_budget: RetryBudget | None = DEFAULT_RETRY_BUDGET,
    ) -> None:
        self.retry_budget = check_retry_budget(retry_budget)
        self._auth = TokenSource(token, token_file, APP_TOKEN_ENV)
        self._filters = check_filters(filters)
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
            # A turn whose caller stopped waiting is cancelled (Session.cancel_turn).
            accepts_cancel=True,
            # accepts_parts stays off here: the native core turns it on for itself. On
            # grpcio each of an 8 MiB message's 64 pieces costs a read of its own, and
            # pieces halved 8 MiB calls/s (small calls beside them ran twice as fast).
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
        try:
            if _core.native is None:
                await self._run_on_grpcio()
            else:
                # The native core keeps the stream attached itself (its backoff is this one).
                from ._native_app import NativeApp

                await NativeApp(self, _core.native, _INITIAL_DELAY).run(self._stop)
        finally:
            self._running = False

    async def _run_on_grpcio(self) -> None:
        """run() on the pure-Python core: one _Session per stream, re-connected here."""
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
                if isinstance(error, StreamEnded):
                    log_stream_closed(self.address)
                    quiet = True
                elif isinstance(error, CONNECTION_ERRORS):
                    if self._sessions > sessions_before:
                        quiet = False
                    log_no_connection(self.address, describe(error), first=not quiet)
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
