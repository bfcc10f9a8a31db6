"""The calls shared by Client and an actor's Context: invoke, tell, get_state, and the
management of reminders, alarms and timers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from ._duration import DurationLike
from ._errors import InvalidArgument, from_rpc_error
from ._payload import decode_result, decode_state, encode_call
from ._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from ._retry import call_key, send_with_retries
from ._schedule import (
    Duration,
    Reminder,
    RetryPolicy,
    When,
    alarm_request,
    reminder_request,
    timer_request,
)
from ._tracing import Metadata, Tracing
from ._turn import chain_for_call, timeout_for_call

if TYPE_CHECKING:
    from ._native_calls import NativeCalls

Params = Mapping[str, Any] | Sequence[Any] | bytes | None
_LIST_PAGE_SIZE = 500

# None leaves the choice to the actor type's registration (durable_tells).
_DELIVERY: dict[bool | None, common_pb2.Delivery] = {
    None: common_pb2.DELIVERY_UNSPECIFIED,
    False: common_pb2.DELIVERY_BEST_EFFORT,
    True: common_pb2.DELIVERY_DURABLE,
}


def split_params(params: Params) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """A dict means keyword arguments, a list/tuple positional ones, bytes one raw argument."""
    if params is None:
        return (), {}
    if isinstance(params, bytes | bytearray | memoryview):
        return (bytes(params),), {}
    if isinstance(params, Mapping):
        return (), params
    if isinstance(params, str) or not isinstance(params, Sequence):
        raise TypeError(
            "params must be a dict (keyword arguments), a list or tuple (positional arguments),"
            f" bytes (one raw argument) or None, got {type(params).__name__}"
        )
    return params, {}


class Caller:
    """Issues ActorClient RPCs on a channel.

    An RPC made while a turn runs (in its task, or a task it started) is made on the
    turn's behalf: invoke and tell carry its call chain, and every RPC's deadline is
    cut to the turn's caller's (see _turn.py).

    ``auth`` is metadata sent with every RPC besides the trace context: the
    ``authorization`` entry of the Client's or App's token, or nothing.

    Invoke and tell carry an idempotency key, the caller's or a fresh one per call, and
    with ``retry`` are resent with the same key on UNAVAILABLE while their deadline
    leaves time (_retry.py). The other RPCs are sent once.

    With ``native`` (the native core, _core.py), invoke and tell go through it; the
    rarer RPCs stay on ``channel``, which connects only when one of them is made.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        tracing: Tracing | None = None,
        auth: Metadata = (),
        *,
        retry: bool = True,
        native: NativeCalls | None = None,
    ) -> None:
        self._stub = client_pb2_grpc.ActorClientStub(channel)  # type: ignore[no-untyped-call]
        self._tracing = tracing or Tracing()
        self._auth = auth
        self._retry = retry
        self._native = native

    @contextlib.contextmanager
    def _rpc(
        self, rpc: str, actor_type: str = "", actor_id: str = "", method: str = ""
    ) -> Iterator[Metadata | None]:
        """The RPC's CLIENT span; yields the call's metadata: trace context and token."""
        with self._tracing.client_call(rpc, actor_type, actor_id, method) as md:
            yield (md or ()) + self._auth or None

    async def invoke(
        self,
        actor_type: str,
        actor_id: str,
        method: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
        chain: common_pb2.CallChain | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        what = f"invoke {actor_type}/{actor_id}.{method}"
        key = call_key(idempotency_key)
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.InvokeRequest(
            actor=common_pb2.ActorRef(type=actor_type, id=actor_id),
            method=method,
            payload=encode_call(args, kwargs),
            metadata=dict(metadata or {}),
            chain=chain if chain is not None else chain_for_call(),
            idempotency_key=key,
        )
        native = self._native
        # One span for the logical call: its retries are not separate calls.
        with self._rpc("Invoke", actor_type, actor_id, method) as md:
            if native is not None:
                data = req.SerializeToString()

                async def attempt(left: float | None) -> client_pb2.InvokeResponse:
                    answer = await native.invoke(data, left, md or ())
                    return client_pb2.InvokeResponse.FromString(answer)

            else:

                async def attempt(left: float | None) -> client_pb2.InvokeResponse:
                    resp: client_pb2.InvokeResponse = await self._stub.Invoke(
                        req, timeout=left, metadata=md
                    )
                    return resp

            resp = await send_with_retries(attempt, timeout, retry=self._retry, what=what)
        return decode_result(resp.payload)

    async def tell(
        self,
        actor_type: str,
        actor_id: str,
        method: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        timeout: DurationLike | None = None,
        metadata: Mapping[str, str] | None = None,
        chain: common_pb2.CallChain | None = None,
        durable: bool | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        what = f"tell {actor_type}/{actor_id}.{method}"
        key = call_key(idempotency_key)
        timeout = timeout_for_call(timeout, what)
        req = client_pb2.TellRequest(
            actor=common_pb2.ActorRef(type=actor_type, id=actor_id),
            method=method,
            payload=encode_call(args, kwargs),
            metadata=dict(metadata or {}),
            chain=chain if chain is not None else chain_for_call(),
            delivery=_DELIVERY[durable],
            idempotency_key=key,
        )
        native = self._native
        with self._rpc("Tell", actor_type, actor_id, method) as md:
            if native is not None:
                data = req.SerializeToString()

                async def attempt(left: float | None) -> None:
                    await native.tell(data, left, md or ())

            else:

                async def attempt(left: float | None) -> None:
                    await self._stub.Tell(req, timeout=left, metadata=md)

            await send_with_retries(attempt, timeout, retry=self._retry, what=what)

    async def get_state(
        self,
        actor_type: str,
        actor_id: str,
        keys: Sequence[str] = (),
        *,
        raw: bool = False,
        timeout: DurationLike | None = None,
    ) -> dict[str, Any]:
        what = f"get_state {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        if isinstance(keys, str):
            raise InvalidArgument("keys must be a list of key names, not a single string")
        req = client_pb2.GetStateRequest(
            actor=common_pb2.ActorRef(type=actor_type, id=actor_id), keys=list(keys)
        )
        with self._rpc("GetState", actor_type, actor_id) as md:
            try:
                resp: client_pb2.GetStateResponse = await self._stub.GetState(
                    req, timeout=timeout, metadata=md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
        if raw:
            return dict(resp.entries)
        return {k: decode_state(v) for k, v in resp.entries.items()}

    # ---- reminders, alarms, timers (docs/scheduling.md) ----

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
                resp: client_pb2.Reminder = await self._stub.SetReminder(
                    req, timeout=timeout, metadata=md
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
                resp: client_pb2.Reminder = await self._stub.GetReminder(
                    req, timeout=timeout, metadata=md
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
                resp: client_pb2.DeleteResponse = await self._stub.DeleteReminder(
                    req, timeout=timeout, metadata=md
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
                    resp: client_pb2.ListRemindersResponse = await self._stub.ListReminders(
                        req, timeout=page_timeout, metadata=md
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
                resp: client_pb2.Reminder = await self._stub.SetAlarm(
                    req, timeout=timeout, metadata=md
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
                resp: client_pb2.Reminder = await self._stub.GetAlarm(
                    req, timeout=timeout, metadata=md
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
                resp: client_pb2.DeleteResponse = await self._stub.DeleteAlarm(
                    req, timeout=timeout, metadata=md
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
                await self._stub.SetTimer(req, timeout=timeout, metadata=md)
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
                resp: client_pb2.DeleteResponse = await self._stub.DeleteTimer(
                    req, timeout=timeout, metadata=md
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, what) from None
        return bool(resp.deleted)


def _ref(actor_type: str, actor_id: str) -> common_pb2.ActorRef:
    return common_pb2.ActorRef(type=actor_type, id=actor_id)
