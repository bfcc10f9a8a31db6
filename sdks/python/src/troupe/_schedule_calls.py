"""The scheduling RPCs shared by Client and an actor's Context: reminders, alarms and
timers (docs/scheduling.md), each sent once through the Caller's transport."""

from __future__ import annotations

import abc
import contextlib
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from ._duration import DurationLike
from ._errors import InvalidArgument, from_rpc_error
from ._proto.troupe.v1 import client_pb2, common_pb2
from ._schedule import (
    Duration,
    Reminder,
    RetryPolicy,
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
        )
        with self._rpc("SetReminder", actor_type, actor_id) as md:
            try:
                resp: client_pb2.Reminder = await self._unary(
                    "SetReminder", req, client_pb2.Reminder, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
        return Reminder.from_proto(resp)

    async def get_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        what = f"get_reminder {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.ReminderRef(actor=_ref(actor_type, actor_id), name=name)
        with self._rpc("GetReminder", actor_type, actor_id) as md:
            try:
                resp: client_pb2.Reminder = await self._unary(
                    "GetReminder", req, client_pb2.Reminder, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                raise from_rpc_error(e, what) from None
        return Reminder.from_proto(resp)

    async def delete_reminder(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        what = f"delete_reminder {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.ReminderRef(actor=_ref(actor_type, actor_id), name=name)
        with self._rpc("DeleteReminder", actor_type, actor_id) as md:
            try:
                resp: client_pb2.DeleteResponse = await self._unary(
                    "DeleteReminder", req, client_pb2.DeleteResponse, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
        return bool(resp.deleted)

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
            with self._rpc("ListReminders", actor_type or "", actor_id or "") as md:
                try:
                    resp: client_pb2.ListRemindersResponse = await self._unary(
                        "ListReminders", req, client_pb2.ListRemindersResponse, page_timeout, md
                    )
                except grpc.aio.AioRpcError as e:
                    raise from_rpc_error(e, f"list_reminders {what}") from None
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
        with self._rpc("SetAlarm", actor_type, actor_id) as md:
            try:
                resp: client_pb2.Reminder = await self._unary(
                    "SetAlarm", req, client_pb2.Reminder, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
        return Reminder.from_proto(resp)

    async def get_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> Reminder | None:
        what = f"get_alarm {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.AlarmRef(actor=_ref(actor_type, actor_id))
        with self._rpc("GetAlarm", actor_type, actor_id) as md:
            try:
                resp: client_pb2.Reminder = await self._unary(
                    "GetAlarm", req, client_pb2.Reminder, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                raise from_rpc_error(e, what) from None
        return Reminder.from_proto(resp)

    async def delete_alarm(
        self, actor_type: str, actor_id: str, *, timeout: DurationLike | None = None
    ) -> bool:
        what = f"delete_alarm {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.AlarmRef(actor=_ref(actor_type, actor_id))
        with self._rpc("DeleteAlarm", actor_type, actor_id) as md:
            try:
                resp: client_pb2.DeleteResponse = await self._unary(
                    "DeleteAlarm", req, client_pb2.DeleteResponse, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
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
        with self._rpc("SetTimer", actor_type, actor_id) as md:
            try:
                await self._unary("SetTimer", req, client_pb2.SetTimerResponse, timeout, md)
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None

    async def delete_timer(
        self, actor_type: str, actor_id: str, name: str, *, timeout: DurationLike | None = None
    ) -> bool:
        what = f"delete_timer {actor_type}/{actor_id} {name!r}"
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.TimerRef(actor=_ref(actor_type, actor_id), name=name)
        with self._rpc("DeleteTimer", actor_type, actor_id) as md:
            try:
                resp: client_pb2.DeleteResponse = await self._unary(
                    "DeleteTimer", req, client_pb2.DeleteResponse, timeout, md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
        return bool(resp.deleted)


def _ref(actor_type: str, actor_id: str) -> common_pb2.ActorRef:
    return common_pb2.ActorRef(type=actor_type, id=actor_id)
