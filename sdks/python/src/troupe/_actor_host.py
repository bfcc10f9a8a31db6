"""The actors one app stream hosts (ActorHost): their activations, turns and
deactivations, each run in its own task and answered through the stream's outbox, and
the turns the daemon cancels. The stream itself is _Session's on grpcio (_session.py)
and _NativeSession's on the native core (_native_session.py)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from ._actor import Actor, maybe_await
from ._address import SDK_NAME
from ._caller import Caller
from ._context import Context
from ._filters import IncomingCall, TurnKind, run_filtered
from ._payload import decode_call, decode_data, encode_result
from ._proto.troupe.v1 import app_pb2, common_pb2
from ._state import State
from ._tracing import Metadata
from ._turn import TurnScope, current_turn
from ._turn_failure import bound, callers_mistake, failure, from_the_actor

if TYPE_CHECKING:
    from ._app import App
    from ._native_calls import NativeCalls

# Records carry the logger's name ("troupe"), so messages do not repeat it.
log = logging.getLogger("troupe")

_Key = tuple[str, str]

# What a call filter is told a turn is.
_KINDS: dict[int, TurnKind] = {
    common_pb2.TURN_KIND_CALL: "call",
    common_pb2.TURN_KIND_REMINDER: "reminder",
    common_pb2.TURN_KIND_TIMER: "timer",
    common_pb2.TURN_KIND_ALARM: "alarm",
}


# The answer of a turn stopped by CancelTurn; no one reads it, but the daemon ends the
# turn on it (discarding its changes) and runs the actor's next one.
_CANCELLED = common_pb2.ActorFailure(
    type="CancelledError",
    message="the caller stopped waiting (it cancelled the call or its deadline passed), "
    "so the turn was stopped and its state changes discarded",
)


def _lease_late_ms(lease_deadline_unix_ms: int) -> float | None:
    """How long ago (ms) the placement lease a Turn or Activate was sent under ended, or None
    while it lasts (or when there is none: 0, a single daemon).

    Past the lease another daemon may own the actor, so the work must not start. The
    daemon and the app share the host's clock, hence wall-clock time.
    """
    if not lease_deadline_unix_ms:
        return None
    late = time.time() * 1000 - lease_deadline_unix_ms
    return late if late >= 0 else None


def _turn_label(msg: app_pb2.Turn) -> str:
    """What a turn runs, for messages: "call incr", "reminder expire", "alarm"."""
    kind = msg.kind
    if kind in (common_pb2.TURN_KIND_UNSPECIFIED, common_pb2.TURN_KIND_CALL):
        return f"call {msg.name}"
    if kind == common_pb2.TURN_KIND_REMINDER:
        return f"reminder {msg.name}"
    if kind == common_pb2.TURN_KIND_TIMER:
        return f"timer {msg.name}"
    if kind == common_pb2.TURN_KIND_ALARM:
        return "alarm"
    return f"turn of kind {kind}"


# Turns a caller waits for (unless the daemon marks one unanswered: a tell).
_ANSWERED = (common_pb2.TURN_KIND_UNSPECIFIED, common_pb2.TURN_KIND_CALL)


def _log_unheard(msg: app_pb2.Turn, exc: Exception) -> None:
    """Logs a failed turn no caller hears of: a best-effort tell's, or a reminder's,
    timer's or alarm's (the daemon retries a reminder as its policy says, and logs
    only the last failure). Without this line nobody would see where it raised."""
    ref = msg.actor
    label = f"tell {msg.name}" if msg.unanswered else _turn_label(msg)
    log.warning(
        "%s of %s/%s raised %s: %s (no caller hears of it)",
        label,
        ref.type,
        ref.id,
        type(exc).__name__,
        exc,
        exc_info=(type(exc), exc, from_the_actor(exc)),
    )


class Outbox(Protocol):
    """Where a host puts its answers; its stream writes them to the daemon."""

    def put_nowait(self, msg: app_pb2.AppMessage, /) -> None: ...


class ActorHost:
    """The actors one stream hosts and the tasks running their work."""

    # Declared for the type checker: _Session narrows it to its write queue.
    out: Outbox

    def __init__(
        self,
        app: App,
        channel: grpc.aio.Channel | None,
        auth: Metadata,
        out: Outbox,
        *,
        native: NativeCalls | None = None,
    ) -> None:
        """``channel``: the grpcio core's connection; None on the native core, whose
        ``native`` calls carry the turns' calls instead."""
        self.app = app
        # Calls from turns go on the app's connection with the app's token, which the
        # daemon's ActorClient accepts as well as the client API token. They are retried as
        # a Client's are, within a retry budget (the App's retry_budget) per stream: per
        # connection, as gRPC throttles per channel (on the native core, its
        # Session.client's).
        self.caller = Caller(
            channel, app._tracing, auth, native=native, retry_budget=app.retry_budget
        )
        self.instances: dict[_Key, Actor] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        # The running turns by call id, for the daemon's CancelTurn; and those it
        # cancelled, answered as such when their task ends (spawn_turn), unlike the
        # tasks a session ending cancels, whose turns the daemon fails with it.
        self.turns: dict[int, asyncio.Task[None]] = {}
        self.cancelled: set[int] = set()
        self.out = out

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def spawn_turn(self, msg: app_pb2.Turn) -> None:
        if msg.expired_keys:
            obj = self.instances.get((msg.actor.type, msg.actor.id))
            if obj is not None:
                # Here, not in the turn's task: the daemon deleted these keys and counts
                # the app told, even if the turn is cancelled before its task starts or
                # is refused for a lapsed lease; the handler must not see them.
                obj.state._expire(msg.expired_keys)
        call_id = msg.call_id
        task = self.spawn(self._turn(msg))
        self.turns[call_id] = task

        def ended(task: asyncio.Task[None]) -> None:
            self.turns.pop(call_id, None)
            if call_id not in self.cancelled:
                return
            self.cancelled.discard(call_id)
            # Answered here, not in _turn: a task cancelled before its first step (the
            # CancelTurn came in the same read) never ran _turn at all. _run_turn undid
            # the changes of one that did. A handler that caught CancelledError and
            # finished has answered already.
            if task.cancelled():
                result = app_pb2.TurnResult(call_id=call_id, error=_CANCELLED)
                self.out.put_nowait(app_pb2.AppMessage(turn_result=result))

        task.add_done_callback(ended)

    def cancel_turn(self, call_id: int) -> None:
        """The turn's caller stopped waiting: stop its handler, which sees CancelledError
        at its next await (a turn already answered is left alone)."""
        task = self.turns.get(call_id)
        if task is not None and task.cancel():
            self.cancelled.add(call_id)

    async def _activate(self, msg: app_pb2.Activate) -> None:
        ref = msg.actor
        result = app_pb2.ActivateResult(call_id=msg.call_id)
        # Checked here, where the activation starts (nothing is awaited before the
        # constructor and on_activate run), not when the message was read.
        late = _lease_late_ms(msg.lease_deadline_unix_ms)
        if late is not None:
            log.warning(
                "not activating %s/%s: its daemon's placement lease ended %.0f ms"
                " before the activation could start; answered lease_expired",
                ref.type,
                ref.id,
                late,
            )
            result.lease_expired = True
            self.out.put_nowait(app_pb2.AppMessage(activated=result))
            return
        spec = self.app._specs.get(ref.type)
        if spec is None:
            result.error.CopyFrom(self.app._unknown_type(ref.type))
        else:
            try:
                obj = spec.cls()
                obj._troupe_id = ref.id
                obj._troupe_state = State(msg.state)
                obj._troupe_ctx = Context(self.caller, ref.type, ref.id)
                scope = TurnScope(obj.state, f"{ref.type}/{ref.id}", "on_activate")
                current_turn.set(scope)
                try:
                    await maybe_await(obj.on_activate())
                    result.changes.extend(obj.state._commit(scope))
                finally:
                    obj.state._end(scope)
            except Exception as e:
                result.error.CopyFrom(failure(e))
            else:
                self.instances[(ref.type, ref.id)] = obj
        self.out.put_nowait(app_pb2.AppMessage(activated=result))

    async def _turn(self, msg: app_pb2.Turn) -> None:
        result = app_pb2.TurnResult(call_id=msg.call_id)
        # Checked here, where the turn starts (nothing is awaited between this and the
        # handler), not when the message was read: no outcome, no changes, no span.
        late = _lease_late_ms(msg.lease_deadline_unix_ms)
        if late is not None:
            ref = msg.actor
            log.warning(
                "not running %s of %s/%s: its daemon's placement lease ended"
                " %.0f ms before the turn could start; answered lease_expired",
                _turn_label(msg),
                ref.type,
                ref.id,
                late,
            )
            result.lease_expired = True
            self.out.put_nowait(app_pb2.AppMessage(turn_result=result))
            return
        try:
            with self.app._tracing.turn(msg):
                reply = await self._run_turn(msg, result)
            result.reply.CopyFrom(reply)
        except Exception as e:
            result.ClearField("changes")
            result.ClearField("events")
            result.error.CopyFrom(failure(e))
            if msg.unanswered or msg.kind not in _ANSWERED:
                _log_unheard(msg, e)
        self.out.put_nowait(app_pb2.AppMessage(turn_result=result))

    async def _run_turn(self, msg: app_pb2.Turn, result: app_pb2.TurnResult) -> common_pb2.Payload:
        ref = msg.actor
        obj = self.instances.get((ref.type, ref.id))
        if obj is None:
            raise LookupError(f"actor {ref.type}/{ref.id} is not active in this app")
        kind = msg.kind
        readonly = False
        scheduled = kind not in _ANSWERED
        handler: Callable[[], Any]
        name = msg.name  # the method, or the hook a scheduled turn runs (for messages)
        args: Sequence[Any]
        kwargs: dict[str, Any] = {}
        if not scheduled:
            spec = self.app._specs[ref.type]
            attr = spec.methods.get(msg.name)
            if attr is None:
                # TypeError, as the TypeScript SDK raises: the caller named a
                # method the type lacks, a caller error (its kind: the CLI exits 4).
                missing = TypeError(
                    f"actor type {ref.type!r} has no method {msg.name!r};"
                    f" its methods are: {', '.join(sorted(spec.methods))}"
                )
                callers_mistake(missing, common_pb2.FAILURE_KIND_NO_SUCH_METHOD)
                raise missing
            readonly = msg.name in spec.readonly
            try:
                args, kwargs = decode_call(msg.payload)
            except Exception as e:
                callers_mistake(e, common_pb2.FAILURE_KIND_BAD_ARGUMENTS)
                raise
            handler = bound(getattr(obj, attr), args, kwargs, spec.declared.get(msg.name))
        elif kind == common_pb2.TURN_KIND_REMINDER:
            name = "on_reminder"
            args = (msg.name, decode_data(msg.payload))
            handler = functools.partial(obj.on_reminder, *args)
        elif kind == common_pb2.TURN_KIND_TIMER:
            name = "on_timer"
            args = (msg.name, decode_data(msg.payload))
            handler = functools.partial(obj.on_timer, *args)
        elif kind == common_pb2.TURN_KIND_ALARM:
            name = "on_alarm"
            args = (decode_data(msg.payload),)
            handler = functools.partial(obj.on_alarm, *args)
        else:
            raise NotImplementedError(
                f"{SDK_NAME} does not handle turns of kind {kind}; upgrade the SDK"
            )
        state = obj.state
        # The daemon may run this turn beside others of the same actor (read-only ones,
        # or one nested in a turn waiting on a chain that called back into this
        # reentrant actor): the scope keeps this turn's chain, deadline and changes apart.
        scope = TurnScope(
            state,
            f"{ref.type}/{ref.id}",
            name,
            readonly=readonly,
            turn=True,
            chain=msg.chain if msg.HasField("chain") else None,
            deadline_unix_ms=msg.deadline_unix_ms,
            metadata=msg.metadata,
        )
        current_turn.set(scope)
        try:
            filters = self.app._filters
            if filters:
                call = IncomingCall(
                    actor_type=ref.type,
                    actor_id=ref.id,
                    actor=obj,
                    method=name,
                    kind=_KINDS.get(kind, "call"),
                    args=tuple(args),
                    kwargs=MappingProxyType(kwargs),
                    metadata=MappingProxyType(dict(msg.metadata)),
                    readonly=readonly,
                )
                value = await run_filtered(filters, call, handler)
            else:
                value = await maybe_await(handler())
            # A scheduled turn has no caller: its reply is JSON null.
            reply = encode_result(None if scheduled else value)
            if readonly:
                # Normally empty. Changes made in place to values read are undone here
                # and sent, so that the daemon refuses the turn with an error naming them.
                result.changes.extend(state._refuse(scope))
            else:
                result.changes.extend(state._commit(scope))
            # Last: what the turn published goes only with a result that succeeded.
            result.events.extend(scope.events or ())
        except BaseException:
            state._rollback(scope)
            raise
        finally:
            state._end(scope)
        return reply

    async def _deactivate(self, msg: app_pb2.Deactivate) -> None:
        ref = msg.actor
        result = app_pb2.DeactivateResult(call_id=msg.call_id)
        obj = self.instances.get((ref.type, ref.id))
        if obj is not None:
            scope = TurnScope(obj.state, f"{ref.type}/{ref.id}", "on_deactivate")
            current_turn.set(scope)
            try:
                await maybe_await(obj.on_deactivate())
                result.changes.extend(obj.state._commit(scope))
            except Exception:
                log.exception("on_deactivate of %s/%s raised", ref.type, ref.id)
                obj.state._rollback(scope)
            finally:
                obj.state._end(scope)
            self.instances.pop((ref.type, ref.id), None)
        self.out.put_nowait(app_pb2.AppMessage(deactivated=result))
