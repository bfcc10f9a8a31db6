"""SyncClient's reminders, alarms and timers: each runs its Client twin
(_client_schedule.py) on the client's event loop and blocks for its result."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ._duration import DurationLike
from ._schedule import Duration, MissedName, Reminder, RetryPolicy, TimeZoneLike, When

if TYPE_CHECKING:
    from ._client import Client

T = TypeVar("T")


class SyncClientScheduling:
    """:class:`SyncClient`'s reminder, alarm and timer methods."""

    # The SyncClient's (declared for the type checker; SyncClient sets them): the async
    # client whose calls these run, and how one is run to its end.
    _client: Client

    if TYPE_CHECKING:

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def set_reminder(
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
        """See :meth:`Client.set_reminder`."""
        return self._run(
            self._client.set_reminder(
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
                timeout=timeout,
            )
        )

    def get_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """See :meth:`Client.get_reminder`."""
        return self._run(self._client.get_reminder(actor_type, actor_id, name, timeout=timeout))

    def delete_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        """See :meth:`Client.delete_reminder`."""
        return self._run(self._client.delete_reminder(actor_type, actor_id, name, timeout=timeout))

    def pause_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """See :meth:`Client.pause_reminder`."""
        return self._run(self._client.pause_reminder(actor_type, actor_id, name, timeout=timeout))

    def resume_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """See :meth:`Client.resume_reminder`."""
        return self._run(self._client.resume_reminder(actor_type, actor_id, name, timeout=timeout))

    def list_reminders(
        self,
        actor_type: str | None = None,
        actor_id: str | None = None,
        *,
        timeout: DurationLike | None = None,
    ) -> list[Reminder]:
        """See :meth:`Client.list_reminders`."""
        return self._run(self._client.list_reminders(actor_type, actor_id, timeout=timeout))

    def set_alarm(
        self,
        actor_type: str,
        actor_id: str,
        at: When,
        data: Any = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: DurationLike | None = None,
    ) -> Reminder:
        """See :meth:`Client.set_alarm`."""
        return self._run(
            self._client.set_alarm(actor_type, actor_id, at, data, retry=retry, timeout=timeout)
        )

    def get_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        """See :meth:`Client.get_alarm`."""
        return self._run(self._client.get_alarm(actor_type, actor_id, timeout=timeout))

    def delete_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> bool:
        """See :meth:`Client.delete_alarm`."""
        return self._run(self._client.delete_alarm(actor_type, actor_id, timeout=timeout))

    def set_timer(
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
        """See :meth:`Client.set_timer`."""
        self._run(
            self._client.set_timer(
                actor_type,
                actor_id,
                name,
                due,
                period,
                data=data,
                keep_alive=keep_alive,
                timeout=timeout,
            )
        )

    def delete_timer(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        """See :meth:`Client.delete_timer`."""
        return self._run(self._client.delete_timer(actor_type, actor_id, name, timeout=timeout))
