"""The scheduling RPCs shared by Client and an actor's Context: reminders, alarms and
timers (docs/scheduling.md), each sent once through the Caller's transport."""

from __future__ import annotations

import abc
import contextlib
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from ._duration import DurationLike
from ._errors import InvalidArgument, NotFound, from_rpc_error
from ._proto.troupe.v1 import client_pb2, common_pb2
from ._schedule import (
    Duration,
    Reminder,
    RetryPolicy,
    TimeZoneLike,
    When,
    alarm_request,
    reminder_request,
    timer_request,
)
from ._tracing import Metadata
from ._turn import timeout_for_call

R = TypeVar("R", bound=Message)
_LIST_PAGE_SIZE = 500


class SchedulingCalls(abc.ABC):
    """The scheduling RPCs, on the transport of the class that provides ``_rpc`` (a
    call's span and metadata) and ``_unary`` (one RPC, sent once): the Caller."""

    @abc.abstractmethod
    def _rpc(
        self, rpc: str, actor_type: str = "", actor_id: str = "", method: str = ""
    ) -> contextlib.AbstractContextManager[Metadata | None]: ...

    @abc.abstractmethod
    async def _unary(
        self,
        rpc: str,
        request: Message,
        response: type[R],
        timeout: float | None,
        md: Metadata | None,
    ) -> R: ...

    async def _call_once(
        self,
        rpc: str,
        actor_type: str,
        actor_id: str,
        request: Message,
        response: type[R],
        timeout: float | None,
        what: str,
    ) -> R:
        """``rpc`` in its span, sent once; a failure raised as the SDK's error naming
        ``what`` (NOT_FOUND as :class:`NotFound`, which lookups answer as ``None``)."""
        with self._rpc(rpc, actor_type, actor_id) as md:
            try:
                return await self._unary(rpc, request, response, timeout, md)
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None

    async def set_reminder(
        self,
        actor_type: str,
        actor_id: str,
        name: str,
        due: When,
        period: Duration | None,
        *,
        repeat: int = 0,
        until: When | None = None,
        data: Any = None,
        retry: RetryPolicy | None = None,
        missed: str = "fire_once",
        cron: str | None = None,
        time_zone: TimeZoneLike | None = None,
        jitter: DurationLike | None = None,
        timeout: DurationLike | None = None,
    ) -> Reminder:
        what = f"set_reminder {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = reminder_request(
            _ref(actor_type, actor_id),
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
        )
        resp: client_pb2.Reminder = await self._call_once(
            "SetReminder", actor_type, actor_id, req, client_pb2.Reminder, timeout, what
        )
        return Reminder.from_proto(resp)

    async def get_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        what = f"get_reminder {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.ReminderRef(actor=_ref(actor_type, actor_id), name=name)
        try:
            resp: client_pb2.Reminder = await self._call_once(
                "GetReminder", actor_type, actor_id, req, client_pb2.Reminder, timeout, what
            )
        except NotFound:
            return None
        return Reminder.from_proto(resp)

    async def delete_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        what = f"delete_reminder {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.ReminderRef(actor=_ref(actor_type, actor_id), name=name)
        resp: client_pb2.DeleteResponse = await self._call_once(
            "DeleteReminder", actor_type, actor_id, req, client_pb2.DeleteResponse, timeout, what
        )
        return bool(resp.deleted)

    async def pause_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        return await self._set_paused("PauseReminder", actor_type, actor_id, name, timeout)

    async def resume_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        return await self._set_paused("ResumeReminder", actor_type, actor_id, name, timeout)

    async def _set_paused(
        self,
        rpc: str,
        actor_type: str,
        actor_id: str,
        name: str,
        timeout: DurationLike | None,
    ) -> Reminder | None:
        verb = "pause_reminder" if rpc == "PauseReminder" else "resume_reminder"
        what = f"{verb} {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.ReminderRef(actor=_ref(actor_type, actor_id), name=name)
        try:
            resp: client_pb2.Reminder = await self._call_once(
                rpc, actor_type, actor_id, req, client_pb2.Reminder, timeout, what
            )
        except NotFound:
            return None
        return Reminder.from_proto(resp)

    async def list_reminders(
        self,
        actor_type: str | None = None,
        actor_id: str | None = None,
        *,
        timeout: DurationLike | None = None,
    ) -> list[Reminder]:
        if actor_id and not actor_type:
            raise InvalidArgument("list_reminders: an actor_id needs its actor_type")
        out: list[Reminder] = []
        token = ""
        seen: set[str] = set()
        while True:
            what = "/".join(p for p in (actor_type, actor_id) if p) or "all actors"
            page_timeout = timeout_for_call(timeout, f"list_reminders {what}")
            req = client_pb2.ListRemindersRequest(
                type=actor_type or "",
                id=actor_id or "",
                page_size=_LIST_PAGE_SIZE,
                page_token=token,
            )
            resp = await self._call_once(
                "ListReminders",
                actor_type or "",
                actor_id or "",
                req,
                client_pb2.ListRemindersResponse,
                page_timeout,
                f"list_reminders {what}",
            )
            out.extend(Reminder.from_proto(r) for r in resp.reminders)
            token = resp.next_page_token
            if not token:
                return out
            if token in seen:
                # A daemon that hands out the same token twice would loop forever.
                raise RuntimeError(f"list_reminders: the daemon repeated page token {token!r}")
            seen.add(token)

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
        what = f"set_alarm {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        req = alarm_request(_ref(actor_type, actor_id), at, data, retry)
        resp: client_pb2.Reminder = await self._call_once(
            "SetAlarm", actor_type, actor_id, req, client_pb2.Reminder, timeout, what
        )
        return Reminder.from_proto(resp)

    async def get_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        what = f"get_alarm {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.AlarmRef(actor=_ref(actor_type, actor_id))
        try:
            resp: client_pb2.Reminder = await self._call_once(
                "GetAlarm", actor_type, actor_id, req, client_pb2.Reminder, timeout, what
            )
        except NotFound:
            return None
        return Reminder.from_proto(resp)

    async def delete_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> bool:
        what = f"delete_alarm {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.AlarmRef(actor=_ref(actor_type, actor_id))
        resp: client_pb2.DeleteResponse = await self._call_once(
            "DeleteAlarm", actor_type, actor_id, req, client_pb2.DeleteResponse, timeout, what
        )
        return bool(resp.deleted)

    async def set_timer(
        self,
        actor_type: str,
        actor_id: str,
        name: str,
        due: Duration,
        period: Duration | None,
        *,
        data: Any = None,
        keep_alive: bool = False,
        timeout: DurationLike | None = None,
    ) -> None:
        what = f"set_timer {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = timer_request(_ref(actor_type, actor_id), name, due, period, data, keep_alive)
        await self._call_once(
            "SetTimer", actor_type, actor_id, req, client_pb2.SetTimerResponse, timeout, what
        )

    async def delete_timer(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        what = f"delete_timer {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.TimerRef(actor=_ref(actor_type, actor_id), name=name)
        resp: client_pb2.DeleteResponse = await self._call_once(
            "DeleteTimer", actor_type, actor_id, req, client_pb2.DeleteResponse, timeout, what
        )
        return bool(resp.deleted)


def _ref(actor_type: str, actor_id: str) -> common_pb2.ActorRef:
    return common_pb2.ActorRef(type=actor_type, id=actor_id)
