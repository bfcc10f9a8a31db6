"""Calling actors from any program with asyncio: Client. (SyncClient wraps it.)"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

import grpc
from opentelemetry.trace import TracerProvider

from . import _core
from ._actor import type_name
from ._address import open_channel, resolve_address
from ._auth import API_TOKEN_ENV, TokenPath, TokenSource
from ._caller import Caller, Params, split_params
from ._duration import DurationLike, timeout_seconds
from ._events import Watch
from ._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from ._proxy import A, ActorProxy
from ._retry import DEFAULT_RETRY_BUDGET, RetryBudget, check_retry_budget, native_budget
from ._schedule import Duration, MissedName, Reminder, RetryPolicy, TimeZoneLike, When
from ._tls import TlsPath, TlsSource
from ._tracing import Metadata, Tracing

if TYPE_CHECKING:
    from ._actor import Actor
    from ._events import WatchCall
    from ._native_calls import NativeCalls
    from ._sync_client import SyncClient

T = TypeVar("T")


class Client:
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
        # The native core's watches: a grpcio channel of their own, opened by the first.
        self._watch_channel: grpc.aio.Channel | None = None
        # Open watches, ended by close(); one left unclosed is not kept alive by it.
        self._watches: weakref.WeakSet[Watch] = weakref.WeakSet()

    def __repr__(self) -> str:
        tls = self._tls.describe()
        return f"<troupe.Client {self.address}, {self._auth.describe()}{', ' + tls if tls else ''}>"

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
        watches = list(self._watches)
        self._watches.clear()
        for watch in watches:
            watch._end()
        if self._watch_channel is not None:
            watch_channel, self._watch_channel = self._watch_channel, None
            await watch_channel.close(None)
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
        deadline = self.timeout if timeout is None else timeout_seconds(timeout)

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
            timeout=self.timeout if timeout is None else timeout,
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
            timeout=self.timeout if timeout is None else timeout,
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
            timeout=self.timeout if timeout is None else timeout,
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
            timeout=self.timeout if timeout is None else timeout,
        )

    # ---- events (docs/events.md) ----

    def watch(
        self,
        actor_type: str | type[Actor],
        actor_id: str,
        *,
        after: str | None = None,
        reconnect: bool = False,
    ) -> Watch:
        """Stream the events the actor publishes (``self.ctx.publish(value)`` in its turns)::

            async with client.watch("bus", "7") as events:
                async for event in events:
                    print(event.value, event.cursor)

        Entering the block returns once the daemon watches the actor: every event
        published after that arrives, in the order published (a turn's events when the turn
        has succeeded; a failed turn publishes none). Iterating without entering starts
        the watch at the first event asked for. Leaving the block, ``aclose()`` or
        :meth:`close` ends it. Watching does not activate the actor, and works on any
        daemon of the cluster. (Every actor of a type at once: :meth:`watch_type`.)

        ``after`` resumes after an event: its :attr:`ActorEvent.cursor`. The stream starts
        with the events published since that the daemon still holds (the last 256 of the
        actor, kept 30 s after its last watcher left); when it cannot tell whether some
        were missed (they were dropped, the actor moved to another daemon, or that daemon
        restarted), the first event says so with ``missed_before=True``. None: only events
        published from now on.

        Events are live, not stored: a watch gets them in the order published, but those
        published while nobody watched, or beyond what the daemon holds, are not delivered
        at all. The stream has no timeout. Errors raise as for other calls:
        :class:`InvalidArgument` for a bad type, id or cursor, :class:`Overloaded` when the
        daemon watches as many actors as it may, :class:`Unavailable` when it is unreachable.

        ``reconnect=True`` makes the watch outlive a daemon's restart or a broken
        connection, once it has begun (the first open raises as above): when the stream
        fails with UNAVAILABLE or the daemon ends it, the watch opens it again by itself,
        after the last event it yielded (else after ``after``), pausing 0.1 s doubling to
        5 s between attempts, until it is closed; each re-open is logged once (INFO, logger
        ``troupe``). Events the daemon can no longer send come as for any resume, the first
        with ``missed_before=True``; so does the first after a re-open with no cursor to
        resume from. Other errors still raise. Without it the watch is not retried: watch
        again with ``after=`` the last cursor.
        """
        actor_type = type_name(actor_type)
        actor = common_pb2.ActorRef(type=actor_type, id=actor_id)
        return self._new_watch(
            lambda stub, metadata, cursor: stub.Watch(
                client_pb2.WatchRequest(actor=actor, after=cursor), metadata=metadata
            ),
            f"watch {actor_type}/{actor_id}",
            again="client.watch(...)",
            actor_type=actor_type,
            actor_id=actor_id,
            after=_cursor(after),
            reconnect=reconnect,
        )

    def watch_type(
        self,
        actor_type: str | type[Actor],
        *,
        after: str | None = None,
        id_prefix: str | None = None,
        reconnect: bool = False,
    ) -> Watch:
        """Stream the events every actor of a type publishes, on every daemon of the cluster
        that hosts it: a map of every bus::

            async with client.watch_type("bus") as events:
                async for event in events:
                    show(event.actor_id, event.value)

        ``id_prefix`` keeps only the actors whose id starts with it: one tenant's carts
        with ``client.watch_type("cart", id_prefix="tenant-42/")``. Each daemon leaves the
        others' events out before they travel. Resume such a watch with the same prefix.

        Each :class:`ActorEvent` names the actor that published it (``actor_id``). One
        actor's events arrive in the order it published them; different actors' events
        interleave as they come. Otherwise it is :meth:`watch`: entering the block returns
        once the daemon watches the type, iterating without entering starts the watch at
        the first event asked for, leaving the block, ``aclose()`` or :meth:`close` ends
        it, and watching activates no actor.

        ``after`` resumes after an event of a type watch: its :attr:`ActorEvent.cursor`
        (a cursor of :meth:`watch` is not one). The stream starts with the events
        published since that the daemons still hold (the type's last 4096 on each, within
        8 MiB); ``missed_before=True`` says some may be missing. None: only events
        published from now on.

        Events are live, not stored, and the stream has no timeout. ``reconnect=True``
        re-opens a broken stream by itself as for :meth:`watch`, with the same
        ``id_prefix``; without it, after an error, watch again with ``after=`` the last
        cursor. Errors raise as for other calls: :class:`InvalidArgument` for an empty
        type, a bad cursor or a prefix longer than any id, :class:`NotFound` for a type no
        app has registered, :class:`Overloaded` past the daemon's bounds on watches,
        :class:`Unavailable` when it is unreachable.
        """
        actor_type = type_name(actor_type)
        prefix = id_prefix or ""
        what = f"watch_type {actor_type}"
        if id_prefix:
            what += f" id_prefix={id_prefix[:64]!r}"
        return self._new_watch(
            lambda stub, metadata, cursor: stub.WatchType(
                client_pb2.WatchTypeRequest(type=actor_type, after=cursor, id_prefix=prefix),
                metadata=metadata,
            ),
            what,
            again="client.watch_type(...)",
            actor_type=actor_type,
            after=_cursor(after),
            reconnect=reconnect,
        )

    def _new_watch(
        self,
        rpc: Callable[[Any, Metadata | None, str], WatchCall],
        what: str,
        *,
        again: str,
        actor_type: str,
        actor_id: str = "",
        after: str,
        reconnect: bool,
    ) -> Watch:
        """A Watch that opens ``rpc(stub, metadata, cursor)`` on the watch channel (a
        request resuming after ``cursor``), ended by :meth:`close`."""

        def open_call(cursor: str) -> WatchCall:
            # Here, in the event loop the watch runs on, as the channels bind to it.
            channel = self._open_watch_channel()
            stub = client_pb2_grpc.ActorClientStub(channel)  # type: ignore[no-untyped-call]
            return rpc(stub, self._call_auth or None, cursor)

        watch = Watch(
            open_call,
            what,
            again=again,
            actor_type=actor_type,
            actor_id=actor_id,
            after=after,
            reconnect=reconnect,
        )
        self._watches.add(watch)
        return watch

    def _open_watch_channel(self) -> grpc.aio.Channel:
        """The grpcio channel watches use: the pure core's own; on the native core one opened
        for them as the pure core opens its channel (address, TLS, token)."""
        self._get_caller()  # opens the connection, reading the token and TLS files
        if self._channel is not None:
            return self._channel
        if self._watch_channel is None:
            self._watch_channel = open_channel(self.address, credentials=self._tls.credentials())
        return self._watch_channel

    # ---- reminders, alarms, timers (docs/scheduling.md) ----

    def _deadline(self, timeout: DurationLike | None) -> DurationLike | None:
        return self.timeout if timeout is None else timeout

    async def set_reminder(
        self,
        actor_type: str,
        actor_id: str,
        name: str,
        due: When = "10s",
        period: Duration | None = None,
        *,
        repeat: int = 0,
        until: When | None = None,
        data: Any = None,
        retry: RetryPolicy | None = None,
        missed: MissedName = "fire_once",
        cron: str | None = None,
        time_zone: TimeZoneLike | None = None,
        jitter: DurationLike | None = None,
        timeout: DurationLike | None = None,
    ) -> Reminder:
        """Register (or replace) a durable reminder of an actor; see
        :meth:`troupe.Context.set_reminder` for the arguments.

        The actor need not be active: when the reminder comes due the daemon
        activates it and calls its ``on_reminder(name, data)``.
        """
        return await self._get_caller().set_reminder(
            actor_type,
            actor_id,
            name,
            due,
            period,
            repeat=repeat,
            until=until,
            data=data,
            retry=retry,
            missed=missed,
            cron=cron,
            time_zone=time_zone,
            jitter=jitter,
            timeout=self._deadline(timeout),
        )

    async def get_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """An actor's reminder ``name``, or None if it has none of that name."""
        return await self._get_caller().get_reminder(
            actor_type, actor_id, name, timeout=self._deadline(timeout)
        )

    async def delete_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        """Delete an actor's reminder ``name``; returns whether it existed."""
        return await self._get_caller().delete_reminder(
            actor_type, actor_id, name, timeout=self._deadline(timeout)
        )

    async def pause_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """Hold an actor's reminder ``name``, keeping its schedule, until
        :meth:`resume_reminder`; setting it again keeps it paused. Returns it, or None
        if there is none of that name."""
        return await self._get_caller().pause_reminder(
            actor_type, actor_id, name, timeout=self._deadline(timeout)
        )

    async def resume_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """Let a paused reminder fire again from when it was due (past that, its
        ``missed`` rule applies). Returns it, or None if there is none of that name."""
        return await self._get_caller().resume_reminder(
            actor_type, actor_id, name, timeout=self._deadline(timeout)
        )

    async def list_reminders(
        self,
        actor_type: str | None = None,
        actor_id: str | None = None,
        *,
        timeout: DurationLike | None = None,
    ) -> list[Reminder]:
        """Registered reminders and alarms: of every actor, of one type, or of one actor.

        Reads every page of the daemon's listing; ``timeout`` bounds each page.
        """
        return await self._get_caller().list_reminders(
            actor_type, actor_id, timeout=self._deadline(timeout)
        )

    async def set_alarm(
        self,
        actor_type: str,
        actor_id: str,
        at: When,
        data: Any = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: DurationLike | None = None,
    ) -> Reminder:
        """Set an actor's alarm (one per actor), replacing any earlier one.

        ``at`` is an aware datetime, an RFC 3339 string, or a duration from now.
        """
        return await self._get_caller().set_alarm(
            actor_type, actor_id, at, data, retry=retry, timeout=self._deadline(timeout)
        )

    async def get_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """An actor's alarm, or None if none is set."""
        return await self._get_caller().get_alarm(
            actor_type, actor_id, timeout=self._deadline(timeout)
        )

    async def delete_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> bool:
        """Delete an actor's alarm; returns whether one was set."""
        return await self._get_caller().delete_alarm(
            actor_type, actor_id, timeout=self._deadline(timeout)
        )

    async def set_timer(
        self,
        actor_type: str,
        actor_id: str,
        name: str,
        due: Duration = "1s",
        period: Duration | None = None,
        *,
        data: Any = None,
        keep_alive: bool = False,
        timeout: DurationLike | None = None,
    ) -> None:
        """Start an in-memory timer on an active actor.

        Raises :class:`FailedPrecondition` when the actor is not active; timers
        are usually set from inside a turn with ``self.ctx.set_timer``.
        """
        await self._get_caller().set_timer(
            actor_type,
            actor_id,
            name,
            due,
            period,
            data=data,
            keep_alive=keep_alive,
            timeout=self._deadline(timeout),
        )

    async def delete_timer(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        """Stop an actor's timer ``name``; returns whether it existed."""
        return await self._get_caller().delete_timer(
            actor_type, actor_id, name, timeout=self._deadline(timeout)
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


def _cursor(after: str | None) -> str:
    """A watch's ``after`` as the request's field ("": from now on)."""
    if after is not None and not isinstance(after, str):
        raise TypeError(
            f"after must be an event's cursor (a str, ActorEvent.cursor) or None, not"
            f" {type(after).__name__}"
        )
    return after or ""
