"""Client's reminders, alarms and timers (docs/scheduling.md): each sent through the
Caller's SchedulingCalls (_schedule_calls.py), with the client's default timeout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._duration import DurationLike
from ._schedule import Duration, MissedName, Reminder, RetryPolicy, TimeZoneLike, When

if TYPE_CHECKING:
    from ._caller import Caller


class ClientScheduling:
    """:class:`Client`'s reminder, alarm and timer methods."""

    # The Client's (declared for the type checker): the connection its calls go through,
    # and their deadline, the client's default unless a call gives its own.
    if TYPE_CHECKING:

        def _get_caller(self) -> Caller: ...

        def _deadline(self, timeout: DurationLike | None) -> DurationLike | None: ...

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
