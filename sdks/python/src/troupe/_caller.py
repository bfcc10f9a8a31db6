"""The calls shared by Client and an actor's Context: invoke, tell, get_state, and the
management of reminders, alarms and timers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from ._duration import DurationLike, to_millis
from ._errors import InvalidArgument
from ._payload import decode_result, decode_state, encode_call
from ._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from ._retry import (
    DEFAULT_RETRY_BUDGET,
    RetryBudget,
    RetryThrottle,
    call_key,
    check_key_type,
    key_retention_ms,
    send_with_retries,
)
from ._schedule import format_instant, from_unix_ms
from ._schedule_calls import SchedulingCalls
from ._tracing import Metadata, Tracing
from ._turn import chain_for_call, timeout_for_call

if TYPE_CHECKING:
    from ._native_calls import NativeCalls

Params = Mapping[str, Any] | Sequence[Any] | bytes | None
R = TypeVar("R", bound=Message)

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


class Caller(SchedulingCalls):
    """Issues ActorClient RPCs on a channel.

    An RPC made while a turn runs (in its task, or a task it started) is made on the
    turn's behalf: invoke and tell carry its call chain, and every RPC's deadline is
    cut to the turn's caller's (see _turn.py).

    ``auth`` is metadata sent with every RPC besides the trace context: the
    ``authorization`` entry of the Client's or App's token, or nothing.

    The scheduling RPCs (reminders, alarms, timers) are SchedulingCalls'.

    Invoke and tell carry an idempotency key, the caller's or a fresh one per call, and
    with ``retry`` are resent with the same key on UNAVAILABLE (or a RESOURCE_EXHAUSTED
    with a retry pushback) while their deadline leaves time and the Caller's
    ``retry_budget`` allows (one budget for all its calls; None: no budget). The other
    RPCs are sent once.

    With ``native`` (the native core, _core.py) every RPC goes through it, keys and
    retries included (crates/sdk-core, where the native client holds the budget, so
    ``retry_budget`` is not used here); else through ``channel`` on grpcio, with the keys
    and retries of _retry.py.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel | None,
        tracing: Tracing | None = None,
        auth: Metadata = (),
        *,
        retry: bool = True,
        native: NativeCalls | None = None,
        retry_budget: RetryBudget | None = DEFAULT_RETRY_BUDGET,
    ) -> None:
        if native is None and channel is None:
            raise ValueError("a Caller needs a channel or the native core's calls")
        self._stub = (
            client_pb2_grpc.ActorClientStub(channel)  # type: ignore[no-untyped-call]
            if native is None
            else None
        )
        self._tracing = tracing or Tracing()
        self._auth = auth
        self._retry = retry
        self._native = native
        self._throttle = (
            RetryThrottle(retry_budget) if retry_budget is not None and native is None else None
        )

    @contextlib.contextmanager
    def _rpc(
        self, rpc: str, actor_type: str = "", actor_id: str = "", method: str = ""
    ) -> Iterator[Metadata | None]:
        """The RPC's CLIENT span; yields the call's metadata: trace context and token."""
        with self._tracing.client_call(rpc, actor_type, actor_id, method) as md:
            yield (md or ()) + self._auth or None

    def _grpc_stub(self) -> client_pb2_grpc.ActorClientStub:
        if self._stub is None:
            raise RuntimeError("this Caller has no grpcio channel: it is on the native core")
        return self._stub

    async def _unary(
        self,
        rpc: str,
        request: Message,
        response: type[R],
        timeout: float | None,
        md: Metadata | None,
    ) -> R:
        """One of the rarer RPCs (``rpc``: its name, "GetState"), sent once on the core in
        use; raises grpc.aio.AioRpcError on either."""
        if self._native is not None:
            data = await self._native.unary(rpc, request.SerializeToString(), timeout, md or ())
            return response.FromString(data)
        answer = await getattr(self._grpc_stub(), rpc)(request, timeout=timeout, metadata=md)
        return cast(R, answer)

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
        idempotency_retention: DurationLike | None = None,
    ) -> Any:
        what = f"invoke {actor_type}/{actor_id}.{method}"
        native = self._native
        # The native core makes (or checks) the key, and asks for its retention, itself.
        key = call_key(idempotency_key) if native is None else None
        check_key_type(idempotency_key)
        timeout = timeout_for_call(timeout, what)
        keep = key_retention_ms(
            idempotency_key, idempotency_retention, timeout, made_here=native is None
        )
        req = client_pb2.InvokeRequest(
            actor=common_pb2.ActorRef(type=actor_type, id=actor_id),
            method=method,
            payload=encode_call(args, kwargs),
            metadata=dict(metadata or {}),
            chain=chain if chain is not None else chain_for_call(),
            idempotency_key=key,
            new_key=idempotency_key is None,
            key_retention_ms=keep,
        )
        # One span for the logical call: its retries are not separate calls.
        with self._rpc("Invoke", actor_type, actor_id, method) as md:
            if native is not None:
                answer = await native.invoke(
                    req.SerializeToString(),
                    idempotency_key,
                    timeout,
                    md or (),
                    retry=self._retry,
                    what=what,
                )
                resp = client_pb2.InvokeResponse.FromString(answer)
            else:
                stub = self._grpc_stub()

                async def attempt(left: float | None) -> client_pb2.InvokeResponse:
                    try:
                        r: client_pb2.InvokeResponse = await stub.Invoke(
                            req, timeout=left, metadata=md
                        )
                    finally:
                        # A retry resends a key the daemon may have recorded by now.
                        req.new_key = False
                    return r

                resp = await send_with_retries(
                    attempt, timeout, retry=self._retry, what=what, throttle=self._throttle
                )
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
        idempotency_retention: DurationLike | None = None,
        delay: DurationLike | None = None,
        at: datetime | str | None = None,
    ) -> str | None:
        what = f"tell {actor_type}/{actor_id}.{method}"
        delay_ms = 0 if delay is None else to_millis(delay, "delay")
        deliver_at = "" if at is None else format_instant(at, "at")
        if delay is not None and at is not None:
            raise InvalidArgument(f"{what}: give delay (from now) or at (a time), not both")
        if (delay_ms or deliver_at) and durable is False:
            raise InvalidArgument(
                f"{what}: a delayed tell is stored until it is due, so it cannot be best "
                "effort; leave durable unset (or True) with delay or at"
            )
        native = self._native
        key = call_key(idempotency_key) if native is None else None
        check_key_type(idempotency_key)
        timeout = timeout_for_call(timeout, what)
        keep = key_retention_ms(
            idempotency_key, idempotency_retention, timeout, made_here=native is None
        )
        req = client_pb2.TellRequest(
            actor=common_pb2.ActorRef(type=actor_type, id=actor_id),
            method=method,
            payload=encode_call(args, kwargs),
            metadata=dict(metadata or {}),
            chain=chain if chain is not None else chain_for_call(),
            delivery=_DELIVERY[durable],
            idempotency_key=key,
            new_key=idempotency_key is None,
            key_retention_ms=keep,
            delay_ms=delay_ms,
            deliver_at=deliver_at,
        )
        with self._rpc("Tell", actor_type, actor_id, method) as md:
            if native is not None:
                answer = await native.tell(
                    req.SerializeToString(),
                    idempotency_key,
                    timeout,
                    md or (),
                    retry=self._retry,
                    what=what,
                )
                return client_pb2.TellResponse.FromString(answer).reminder or None
            stub = self._grpc_stub()

            async def attempt(left: float | None) -> client_pb2.TellResponse:
                try:
                    return cast(
                        client_pb2.TellResponse,
                        await stub.Tell(req, timeout=left, metadata=md),
                    )
                finally:
                    # As invoke's: only the first attempt's key is new.
                    req.new_key = False

            resp = await send_with_retries(
                attempt, timeout, retry=self._retry, what=what, throttle=self._throttle
            )
            return resp.reminder or None

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
        resp = await self._call_once(
            "GetState", actor_type, actor_id, req, client_pb2.GetStateResponse, timeout, what
        )
        if raw:
            return dict(resp.entries)
        return {k: decode_state(v) for k, v in resp.entries.items()}

    async def get_state_expiry(
        self,
        actor_type: str,
        actor_id: str,
        keys: Sequence[str] = (),
        *,
        timeout: DurationLike | None = None,
    ) -> dict[str, datetime]:
        what = f"get_state_expiry {actor_type}/{actor_id}"
        timeout = timeout_for_call(timeout, what)
        if isinstance(keys, str):
            raise InvalidArgument("keys must be a list of key names, not a single string")
        req = client_pb2.GetStateRequest(
            actor=common_pb2.ActorRef(type=actor_type, id=actor_id), keys=list(keys)
        )
        resp = await self._call_once(
            "GetState", actor_type, actor_id, req, client_pb2.GetStateResponse, timeout, what
        )
        return {k: from_unix_ms(ms) for k, ms in resp.expires_unix_ms.items()}
