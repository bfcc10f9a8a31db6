"""Calling actors from any program with asyncio: Client. (SyncClient wraps it.)

Its watches are in _client_watch.py, its reminders, alarms and timers in
_client_schedule.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

import grpc
from opentelemetry.trace import TracerProvider

from . import _core
from ._actor import type_name
from ._address import open_channel, resolve_address
from ._auth import API_TOKEN_ENV, TokenPath, TokenSource
from ._caller import Caller, Params, split_params
from ._client_schedule import ClientScheduling
from ._client_watch import ClientWatches
from ._duration import DurationLike, timeout_seconds
from ._proxy import A, ActorProxy
from ._retry import DEFAULT_RETRY_BUDGET, RetryBudget, check_retry_budget, native_budget
from ._tls import TlsPath, TlsSource
from ._tracing import Metadata, Tracing

if TYPE_CHECKING:
    from ._actor import Actor
    from ._native_calls import NativeCalls
    from ._sync_client import SyncClient


class Client(ClientWatches, ClientScheduling):
    """An asyncio client for the daemon's ActorClient API.

    ``address`` defaults to ``$TROUPE_ADDR``, then ``127.0.0.1:7420``. ``timeout``
    (seconds, a timedelta or ``"5s"``) is the default deadline of every call; None
    waits as long as the daemon lets the call run. Use as ``async with troupe.Client() as client:``
    or call :meth:`close` when done.

    Every call is a CLIENT span of ``tracer_provider`` (default: OpenTelemetry's
    global provider), child of the current span, and carries the W3C trace
    context to the daemon.

    Used inside an actor's turn, its calls are made for the turn: they carry the
    turn's call chain and end no later than the turn's caller's deadline
    (docs/calls.md).

    A daemon started with client API tokens wants one with every call, as
    ``authorization: Bearer <token>`` metadata. The token is ``token``, else the
    first one in the file ``token_file`` (one per line; blank lines and lines
    starting with ``#`` are skipped), else the first of ``$TROUPE_API_TOKEN``
    (comma- or newline-separated), else none is sent. The file and the
    environment are read when the connection opens, at the first call (which
    raises OSError or ValueError if the file cannot be read or holds no token).
    The daemon takes an app token here too. A missing or refused token raises
    :class:`Unauthenticated`. The token never appears in ``repr()``.

    A daemon with TLS on wants ``tls_ca``, the CA file (PEM) its certificate
    chains to, which turns TLS on; the certificate is checked against the name
    dialled. ``tls_cert`` and ``tls_key`` (both or neither) are a client
    certificate, for a daemon started with ``--tls-client-certs required``.
    Each defaults to ``$TROUPE_TLS_CA``, ``$TROUPE_TLS_CERT``, ``$TROUPE_TLS_KEY``.
    The files are read when the connection opens, at the first call, which raises
    :class:`TlsConfigError` naming the option or variable and the path if one
    cannot be read. Without a CA the connection is plaintext.

    Every invoke and tell carries an idempotency key naming the logical call: the
    ``idempotency_key`` passed to :meth:`invoke` or :meth:`tell`, else a fresh UUID. When
    the daemon answers UNAVAILABLE (restarting, a forward to another daemon broke, the
    connection was refused or reset) the call is sent again with the same key, after
    50 ms, then twice as long each time up to 1 s (jittered), while its timeout leaves
    time (without a timeout, for up to 10 s); then the last error is raised, saying how
    often it was retried. A daemon that honours keys runs the call once and answers every
    attempt with its first answer (docs/delivery.md). A RESOURCE_EXHAUSTED the daemon
    marks as having run nothing (a full mailbox, memory near its limit: it sends gRPC's
    retry pushback) is retried the same way, never sooner than the pushback asks; so a
    call waits out a short overload instead of failing with :class:`Overloaded`. Other
    errors, a message over a size limit among them, are never retried. ``retry=False``
    sends each call once.

    ``retry_budget`` bounds the retries of all the client's calls together, as gRPC's
    retry throttling does (gRFC A6; :class:`RetryBudget`): each refusal worth resending
    takes a token from a budget of ``max_tokens``, each call that succeeds puts back
    ``token_ratio``, and no call is resent while half the budget or less is left; it
    fails with its last error, which says the retry budget was exhausted. So when the
    daemon is down or overloaded the client's calls make a few retries between them and
    then fail at once, instead of each resending until its timeout and adding to the
    load of a daemon that is trying to recover. The default,
    ``RetryBudget(max_tokens=100, token_ratio=0.1)``, allows some 49 retries from a full
    budget: a lone call retries through a 10 s restart of the daemon (about 13), a burst
    of 50 failing calls or more is sent once each, and each retry spent comes back with
    10 successful calls. ``None`` is no budget: each call retries until its timeout.
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
        if not isinstance(retry, bool):
            raise TypeError(f"retry must be True or False, not {retry!r}")
        self.retry_budget = check_retry_budget(retry_budget)
        self.address = resolve_address(address)
        # Read now: a bad timeout fails the constructor, not the first call.
        self.timeout = timeout_seconds(timeout)
        self._tracing = Tracing(tracer_provider)
        self._auth = TokenSource(token, token_file, API_TOKEN_ENV)
        self._tls = TlsSource(tls_ca, tls_cert, tls_key)
        self.retry = retry
        self._channel: grpc.aio.Channel | None = None
        self._caller: Caller | None = None
        self._native: NativeCalls | None = None
        # The token metadata of the connection open now (read with it).
        self._call_auth: Metadata = ()
        self._init_watches()

    def __repr__(self) -> str:
        tls = self._tls.describe()
        return f"<troupe.Client {self.address}, {self._auth.describe()}{', ' + tls if tls else ''}>"

    def _deadline(self, timeout: DurationLike | None) -> DurationLike | None:
        """A call's deadline: its own ``timeout``, else the client's default."""
        return self.timeout if timeout is None else timeout

    def _get_caller(self) -> Caller:
        # The channel is created on first use so that it binds to the event loop
        # the calls run on, not whichever loop existed when the Client was built.
        if self._caller is None:
            auth = self._auth.metadata()
            self._call_auth = auth
            if _core.native is not None:
                # Every call goes through the native core: no grpcio channel at all.
                from ._native_calls import NativeCalls

                pem = self._tls.pem()
                ca, client = pem if pem is not None else (None, None)
                cert, key = client if client is not None else (None, None)
                # The core holds the budget.
                size = native_budget(self.retry_budget)
                self._native = NativeCalls(
                    _core.native.Client(self.address, ca, cert, key, retry_budget=size)
                )
            else:
                self._channel = open_channel(self.address, credentials=self._tls.credentials())
            # A budget per connection: a closed client's next calls start with a full one.
            self._caller = Caller(
                self._channel,
                self._tracing,
                auth,
                retry=self.retry,
                native=self._native,
                retry_budget=self.retry_budget,
            )
        return self._caller

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; in-flight calls are cancelled and open watches end."""
        self._caller = None
        await self._close_watches()
        if self._native is not None:
            native, self._native = self._native, None
            native.close()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close(None)

    @overload
    def actor(
        self,
        actor_type: type[A],
        actor_id: str,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ActorProxy[A]: ...

    @overload
    def actor(
        self,
        actor_type: str,
        actor_id: str,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ActorProxy[Any]: ...

    def actor(
        self,
        actor_type: str | type[Actor],
        actor_id: str,
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ActorProxy[Any]:
        """A proxy on one actor: ``await client.actor("counter", "c1").incr(by=5)``.

        ``actor_type`` is the type's name or its ``@troupe.actor`` class; with the class,
        ``await proxy.call(Cart.add_item, ...)`` is type-checked (see :class:`ActorProxy`).
        """
        actor_type = type_name(actor_type)
        # Read here, where the option is given: a bad timeout fails now, not at a call.
        deadline = self._deadline(timeout_seconds(timeout))

        async def invoke(
            t: str, i: str, m: str, args: Sequence[Any], kwargs: Mapping[str, Any]
        ) -> Any:
            return await self._get_caller().invoke(
                t, i, m, args, kwargs, timeout=deadline, metadata=metadata
            )

        async def tell(
            t: str, i: str, m: str, args: Sequence[Any], kwargs: Mapping[str, Any]
        ) -> object:
            return await self._get_caller().tell(
                t, i, m, args, kwargs, timeout=deadline, metadata=metadata
            )

        return ActorProxy(invoke, actor_type, actor_id, tell)

    async def invoke(
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
        """Call ``method`` on the actor and return its result.

        ``params`` is a dict of keyword arguments, a list of positional ones,
        ``bytes`` for one raw argument, or None. The actor is activated on first
        use. Raises :class:`ActorError` if the method raised, and the other
        :class:`TroupeError` subclasses for failures of the call itself.

        ``idempotency_key`` (1 to 256 bytes of printable UTF-8) names this logical call;
        None sends a fresh one. Pass your own to make a call you repeat yourself (e.g.
        after your process restarted) run once: the daemon answers a call with a key it
        recorded with the recorded answer, within its retention window.

        ``idempotency_retention`` (a duration, only with ``idempotency_key``) is how long
        you may send that key again: the daemon keeps the answer that long, at least a
        minute and at most its ``--idempotency-retention`` (a day by default). None keeps
        it the daemon's whole retention. A shorter one spares the daemon's store and
        memory when your own resends end sooner, e.g. with a job's retries.
        """
        args, kwargs = split_params(params)
        return await self._get_caller().invoke(
            actor_type,
            actor_id,
            method,
            args,
            kwargs,
            timeout=self._deadline(timeout),
            metadata=metadata,
            idempotency_key=idempotency_key,
            idempotency_retention=idempotency_retention,
        )

    async def tell(
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
        """Send a call whose result is dropped.

        Returns once the actor's mailbox accepted it; with ``durable=True``, once it is
        stored in the actor's inbox, from where it is delivered at least once, in order
        per caller, across crashes, restarts and hand-offs, and its state changes apply
        once (docs/delivery.md). ``durable=False`` forces best effort; None (the default)
        follows the actor type's ``durable_tells`` option. ``idempotency_key`` and
        ``idempotency_retention`` as in :meth:`invoke`: a durable tell retried with its key
        is stored once.

        With ``delay`` (``"10m"``, seconds, a timedelta) the call is stored at once and
        delivered that long from now as a durable tell; it waits as a reminder of the
        actor, whose name this returns (``"$tell:"`` and its idempotency key):
        :meth:`delete_reminder` with that name cancels it, :meth:`get_reminder` reads it.
        A retry with the same ``idempotency_key`` keeps the one that waits. ``at`` (an aware
        datetime or an RFC 3339 string) delivers it at that time instead, read against the
        daemon's clock (the test kit's clock under :mod:`troupe.testing`); a time already
        past delivers it at once. Not with ``delay``. Returns None without either.
        """
        args, kwargs = split_params(params)
        return await self._get_caller().tell(
            actor_type,
            actor_id,
            method,
            args,
            kwargs,
            timeout=self._deadline(timeout),
            metadata=metadata,
            durable=durable,
            idempotency_key=idempotency_key,
            idempotency_retention=idempotency_retention,
            delay=delay,
            at=at,
        )

    async def get_state(
        self,
        actor_type: str,
        actor_id: str,
        keys: Sequence[str] = (),
        *,
        raw: bool = False,
        timeout: DurationLike | None = None,
    ) -> dict[str, Any]:
        """Read an actor's state without running a turn.

        Returns the JSON-decoded values of ``keys`` (every key if empty), or
        the stored bytes with ``raw=True``. Missing keys are absent from the result, and so
        are expired ones (``State.set`` with ``ttl``).
        """
        return await self._get_caller().get_state(
            actor_type,
            actor_id,
            keys,
            raw=raw,
            timeout=self._deadline(timeout),
        )

    async def get_state_expiry(
        self,
        actor_type: str,
        actor_id: str,
        keys: Sequence[str] = (),
        *,
        timeout: DurationLike | None = None,
    ) -> dict[str, datetime]:
        """When the actor's state keys that expire (``State.set`` with ``ttl``) do so.

        Returns, for each of ``keys`` (every key if empty) that has an expiry, its time as
        an aware UTC datetime on the daemon's clock. Keys that do not expire, missing keys
        and expired ones are absent from the result.
        """
        return await self._get_caller().get_state_expiry(
            actor_type,
            actor_id,
            keys,
            timeout=self._deadline(timeout),
        )

    @staticmethod
    def sync(
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
    ) -> SyncClient:
        """A blocking client for scripts; same as ``troupe.SyncClient(address)``."""
        # Here, not at the top: _sync_client imports this module.
        from ._sync_client import SyncClient

        return SyncClient(
            address,
            timeout=timeout,
            tracer_provider=tracer_provider,
            token=token,
            token_file=token_file,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            retry=retry,
        )
