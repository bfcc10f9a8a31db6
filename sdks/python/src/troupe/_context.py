"""``self.ctx``: what an actor can do beyond its own state: call other actors, and manage its
own reminders, alarm and timers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, overload

from ._actor import type_name
from ._caller import Caller, Params, split_params
from ._duration import DurationLike, timeout_seconds
from ._payload import encode_result
from ._proxy import A, ActorProxy
from ._schedule import Duration, MissedName, Reminder, RetryPolicy, TimeZoneLike, When
from ._turn import live_turn

if TYPE_CHECKING:
    from ._actor import Actor

# The daemon fails a turn that publishes more (with its changes); refused here, at the
# publish that goes over, where the handler can still act on it.
MAX_EVENTS_PER_TURN = 256


class Context:
    """Calls to other actors made from inside a turn, and this actor's scheduled work.

    A call made while a turn runs (through ``self.ctx`` or any :class:`Client`) carries
    the turn's call chain, so the daemon can let a chain re-enter a reentrant actor and
    refuse a cycle into any other one at once, and a deadline no later than the turn's
    caller's. See docs/calls.md.

    Reminders (durable, by name), the alarm (durable, one per actor) and timers
    (in memory, gone when the actor deactivates) fire as turns that call the
    actor's ``on_reminder(name, data)``, ``on_alarm(data)`` and
    ``on_timer(name, data)``; see docs/scheduling.md.

    Events (:meth:`publish`) go to the clients that watch this actor
    (:meth:`Client.watch`) once the turn that published them succeeded.

    Invoke and tell carry an idempotency key and are retried on UNAVAILABLE (or a
    RESOURCE_EXHAUSTED with a retry pushback) within the turn's caller's deadline, as a
    :class:`Client`'s, and within a retry budget shared by all the calls the app's actors
    make on one connection to the daemon (the :class:`App`'s ``retry_budget``).
    """

    def __init__(self, caller: Caller, actor_type: str, actor_id: str) -> None:
        self._caller = caller
        self._type = actor_type
        self._id = actor_id

    @property
    def chain(self) -> tuple[str, ...]:
        """The running turn's call chain as ``"type/id"`` names, outermost caller first and
        this actor last; empty outside a turn."""
        scope = live_turn()
        if scope is None or scope.chain is None:
            return ()
        return tuple(f"{a.type}/{a.id}" for a in scope.chain.actors)

    @property
    def metadata(self) -> Mapping[str, str]:
        """What the running turn's caller sent as ``metadata=`` with its invoke or tell
        (a tenant, a user, a request id); empty for reminders, timers and the alarm, and
        outside a turn. Read-only; the daemon passes it through as the caller sent it."""
        scope = live_turn()
        if scope is None or not scope.metadata:
            return MappingProxyType({})
        return MappingProxyType(dict(scope.metadata))

    @property
    def deadline(self) -> float | None:
        """When the running turn's caller stops waiting, as a ``time.time()`` value; None
        when it set no deadline (or outside a turn). Calls the turn makes end by then."""
        scope = live_turn()
        return scope.deadline if scope is not None else None

    def publish(self, value: Any) -> None:
        """Publish ``value`` as an event of the running turn to this actor's watchers
        (:meth:`Client.watch`).

        ``value`` is encoded as a method's return value is: any JSON value, or bytes. The
        events of a turn go out in the order published, once the turn has succeeded; a turn
        that fails (it raises, is cancelled, or the daemon refuses its changes) publishes
        none. Events are live: a client sees those published while it watches, and on
        resuming (``watch(..., after=cursor)``) those the daemon still holds (at most the
        last 256 of the actor).

        Raises TypeError for a value that cannot be encoded, ValueError for a turn's 257th
        event (the most one turn may publish is 256), and RuntimeError outside a turn of
        this actor (``on_activate``, ``on_deactivate``, or a task that outlived its turn):
        only a turn has a result that carries events.
        """
        scope = live_turn()
        name = f"{self._type}/{self._id}"
        if scope is None or scope.actor != name or scope.events is None:
            where = (
                f"in {scope.method} of {scope.actor}"
                if scope is not None
                else "outside any turn (a task that outlived its turn, or code not run by one)"
            )
            raise RuntimeError(
                f"{name} cannot publish an event {where}: events can only be published from a"
                " turn of the actor (a method, on_reminder, on_timer or on_alarm, or a task it"
                " awaits while it runs), whose result carries them; publish from such a turn"
                " instead"
            )
        if len(scope.events) >= MAX_EVENTS_PER_TURN:
            raise ValueError(
                f"{name} published more than {MAX_EVENTS_PER_TURN} events in one turn of"
                f" {scope.method}, the most the daemon takes (it would fail the turn);"
                " publish fewer, larger events (a list of changes, say)"
            )
        scope.events.append(encode_result(value, "a published event"))

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
        """A proxy on another actor: ``await self.ctx.actor("t", "id").method(...)``; the type
        may be the actor class, as for :meth:`Client.actor`."""
        actor_type = type_name(actor_type)
        timeout = timeout_seconds(timeout)  # a bad one fails here, not at the first call

        async def invoke(
            t: str, i: str, m: str, args: Sequence[Any], kwargs: Mapping[str, Any]
        ) -> Any:
            return await self._caller.invoke(
                t, i, m, args, kwargs, timeout=timeout, metadata=metadata
            )

        async def tell(
            t: str, i: str, m: str, args: Sequence[Any], kwargs: Mapping[str, Any]
        ) -> object:
            return await self._caller.tell(
                t, i, m, args, kwargs, timeout=timeout, metadata=metadata
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
        """Call a method on another actor and return its result (see Client.invoke, also
        for ``idempotency_key`` and ``idempotency_retention``)."""
        args, kwargs = split_params(params)
        return await self._caller.invoke(
            actor_type,
            actor_id,
            method,
            args,
            kwargs,
            timeout=timeout,
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
        """Queue a call on another actor without waiting for its result.

        ``durable``, ``idempotency_key``, ``idempotency_retention``, ``delay`` and ``at`` as
        in :meth:`Client.tell`: True returns once the call is stored in the target's inbox;
        a ``delay`` or an ``at`` delivers it later (to this actor too: a message to its
        future self) and returns the name of the reminder it waits as.
        """
        args, kwargs = split_params(params)
        return await self._caller.tell(
            actor_type,
            actor_id,
            method,
            args,
            kwargs,
            timeout=timeout,
            metadata=metadata,
            durable=durable,
            idempotency_key=idempotency_key,
            idempotency_retention=idempotency_retention,
            delay=delay,
            at=at,
        )

    # ---- reminders ----

    async def set_reminder(
        self,
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
        """Register (or replace) the durable reminder ``name`` of this actor.

        Args:
            name: the reminder's name, passed to ``on_reminder``; names starting
                with ``$`` are reserved.
            due: the first firing: a duration from now (``"90s"``, ``"1h30m"``,
                ``"PT1M30S"``, a timedelta), or a time (an aware datetime or an
                RFC 3339 string).
            period: time between firings (``"10s"``, ``"PT10S"``, a timedelta), or
                an ISO 8601 repetition ``"R5/PT10S"`` (five firings in all). None: once.
            repeat: at most this many firings (0: unbounded).
            until: no firing after this time (or duration from now).
            data: passed to ``on_reminder``: any JSON value, or bytes.
            retry: how a failed firing is retried; None: the daemon's defaults.
            missed: ``"fire_once"`` or ``"skip"``: what happens to firings that
                came due while the daemon was down.
            cron: fire at the matches of this cron pattern instead of every
                ``period``: five fields (minute hour day-of-month month
                day-of-week) such as ``"0 9 * * MON-FRI"``, six with seconds
                first, or ``"@daily"``; ``L``, ``W`` and ``#`` as in Quartz. The
                first firing is the first match at or after ``due``.
            time_zone: the IANA zone ``cron`` is read in (``"Europe/Berlin"`` or a
                ``zoneinfo.ZoneInfo``); None: UTC. Wall times the clocks skip fire
                just after the change; those they pass twice fire once.
            jitter: fire a fixed delay of up to this after each scheduled time
                (``"10m"``, a timedelta), chosen once per reminder from its actor
                and name, so that reminders set alike (``"@daily"`` for every
                user) do not all fire at once; setting it again keeps the delay.

        Returns the reminder as stored. Raises InvalidArgument for durations or
        times the daemon cannot read.
        """
        return await self._caller.set_reminder(
            self._type,
            self._id,
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
            timeout=timeout,
        )

    async def get_reminder(
        self, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """This actor's reminder ``name``, or None if there is none."""
        return await self._caller.get_reminder(self._type, self._id, name, timeout=timeout)

    async def delete_reminder(self, name: str, *, timeout: DurationLike | None = None) -> bool:
        """Delete the reminder ``name``; returns whether it existed."""
        return await self._caller.delete_reminder(self._type, self._id, name, timeout=timeout)

    async def pause_reminder(
        self, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """Hold the reminder ``name`` until :meth:`resume_reminder`; None if there is none."""
        return await self._caller.pause_reminder(self._type, self._id, name, timeout=timeout)

    async def resume_reminder(
        self, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """Let the paused reminder ``name`` fire again; None if there is none."""
        return await self._caller.resume_reminder(self._type, self._id, name, timeout=timeout)

    async def list_reminders(self, *, timeout: DurationLike | None = None) -> list[Reminder]:
        """Every reminder of this actor (its alarm included, with ``alarm=True``)."""
        return await self._caller.list_reminders(self._type, self._id, timeout=timeout)

    # ---- the alarm ----

    async def set_alarm(
        self,
        at: When,
        data: Any = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: DurationLike | None = None,
    ) -> Reminder:
        """Set this actor's alarm, replacing any earlier one; it calls ``on_alarm(data)``.

        ``at`` is an aware datetime, an RFC 3339 string, or a duration from now
        (a timedelta or a string such as ``"30s"``).
        """
        return await self._caller.set_alarm(
            self._type, self._id, at, data, retry=retry, timeout=timeout
        )

    async def get_alarm(self, *, timeout: DurationLike | None = None) -> Reminder | None:
        """This actor's alarm, or None if none is set."""
        return await self._caller.get_alarm(self._type, self._id, timeout=timeout)

    async def delete_alarm(self, *, timeout: DurationLike | None = None) -> bool:
        """Delete this actor's alarm; returns whether one was set."""
        return await self._caller.delete_alarm(self._type, self._id, timeout=timeout)

    # ---- timers ----

    async def set_timer(
        self,
        name: str,
        due: Duration = "1s",
        period: Duration | None = None,
        *,
        data: Any = None,
        keep_alive: bool = False,
        timeout: DurationLike | None = None,
    ) -> None:
        """Start (or replace) the in-memory timer ``name``; it calls ``on_timer(name, data)``.

        Timers belong to this activation: they are gone when the actor
        deactivates and are not retried. ``due`` and ``period`` are durations
        (strings or timedeltas); period None fires once. With ``keep_alive``
        a firing counts as activity, so the timer keeps the actor from idling out.
        """
        await self._caller.set_timer(
            self._type,
            self._id,
            name,
            due,
            period,
            data=data,
            keep_alive=keep_alive,
            timeout=timeout,
        )

    async def delete_timer(self, name: str, *, timeout: DurationLike | None = None) -> bool:
        """Stop the timer ``name``; returns whether it existed."""
        return await self._caller.delete_timer(self._type, self._id, name, timeout=timeout)
