"""W3C trace context through the daemon: a SERVER span per turn, a CLIENT span per call.

Only ``opentelemetry-api`` is used. Until the application installs an OpenTelemetry
SDK the spans are non-recording, but a non-recording span still carries its
parent's context, so a trace that comes in with a turn leaves with every call
the handler makes: the trace passes through an app that records nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context as OtelContext
from opentelemetry.trace import (
    NoOpTracer,
    ProxyTracer,
    ProxyTracerProvider,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from ._address import SDK_VERSION
from ._proto.troupe.v1 import app_pb2, common_pb2

INSTRUMENTATION_NAME = "troupe"
_SERVICE = "troupe.v1.ActorClient"

# The daemon speaks W3C trace context whatever global propagator the application
# configured, so this one is used directly rather than opentelemetry.propagate.
_PROPAGATOR = TraceContextTextMapPropagator()

# gRPC call metadata: (key, value) pairs.
Metadata = tuple[tuple[str, str], ...]

_KIND_NAMES = {
    common_pb2.TURN_KIND_UNSPECIFIED: "call",
    common_pb2.TURN_KIND_CALL: "call",
    common_pb2.TURN_KIND_REMINDER: "reminder",
    common_pb2.TURN_KIND_TIMER: "timer",
    common_pb2.TURN_KIND_ALARM: "alarm",
}
_HOOKS = {
    common_pb2.TURN_KIND_REMINDER: "on_reminder",
    common_pb2.TURN_KIND_TIMER: "on_timer",
    common_pb2.TURN_KIND_ALARM: "on_alarm",
}


# What an untraced call or turn runs in: nothing to enter or leave.
_UNTRACED: AbstractContextManager[None] = contextlib.nullcontext()


def remote_context(traceparent: str, tracestate: str) -> OtelContext:
    """The context holding the (remote) span of a W3C ``traceparent`` and ``tracestate`` the
    daemon passed on; an empty context when there is none or it is malformed.

    Built on an empty context, not the current one: what it continues is the daemon's
    trace, never whatever span happens to be current where it is read.
    """
    if not traceparent:
        return OtelContext()
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier, OtelContext())


def turn_parent(msg: app_pb2.Turn) -> OtelContext:
    """The context a turn continues: the daemon's turn span, or a fresh root when untraced
    (so a turn does not inherit whatever span was current where the App was started)."""
    return remote_context(msg.traceparent, msg.tracestate)


class Tracing:
    """The tracer of one Client or App: the provider it was given, else the global one."""

    __slots__ = ("_tracer",)

    def __init__(self, provider: TracerProvider | None = None) -> None:
        # Without an explicit provider this is a proxy that follows the global
        # provider, including one set after the Client or App was created.
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, SDK_VERSION, tracer_provider=provider)

    def _idle(self) -> bool:
        """Whether a span made now would record nothing and carry no trace: no OpenTelemetry
        SDK behind this tracer (yet) and no valid span current. Then the spans and context
        changes around a call or turn are skipped, which is most of the SDK's work per
        call in an app that does not trace (the API's no-op path costs tens of µs a turn).
        """
        tracer = self._tracer
        noop = isinstance(tracer, NoOpTracer) or (
            isinstance(tracer, ProxyTracer)
            and isinstance(trace.get_tracer_provider(), ProxyTracerProvider)
        )
        return noop and not trace.get_current_span().get_span_context().is_valid

    def client_call(
        self,
        rpc: str,
        actor_type: str = "",
        actor_id: str = "",
        method: str = "",
    ) -> AbstractContextManager[Metadata | None]:
        """A CLIENT span around one ActorClient RPC; yields the metadata that carries it.

        The span is not made current: nothing else runs inside it in this process.
        """
        if self._idle():
            return _UNTRACED
        return self._client_span(rpc, actor_type, actor_id, method)

    @contextlib.contextmanager
    def _client_span(
        self, rpc: str, actor_type: str, actor_id: str, method: str
    ) -> Iterator[Metadata | None]:
        target = method or rpc
        name = f"{actor_type}/{target}" if actor_type else f"{INSTRUMENTATION_NAME}/{target}"
        attributes: dict[str, AttributeValue] = {
            "rpc.system": "grpc",
            "rpc.service": _SERVICE,
            "rpc.method": rpc,
        }
        if actor_type:
            attributes["troupe.actor.type"] = actor_type
        if actor_id:
            attributes["troupe.actor.id"] = actor_id
        if method:
            attributes["troupe.method"] = method
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        try:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
            yield tuple(carrier.items()) or None
        except Exception as e:
            if span.is_recording():
                span.record_exception(e)
                span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
            raise
        finally:
            span.end()

    def turn(self, msg: app_pb2.Turn) -> AbstractContextManager[None]:
        """A SERVER span for one turn, current while the handler runs.

        Current through contextvars, so calls the handler makes (and tasks it
        starts) become its children. An exception leaving the block is recorded
        and sets the span's status to ERROR.
        """
        if not msg.traceparent and self._idle():
            # What the no-op tracer would do: no span, no trace for the calls made.
            return _UNTRACED
        return self._turn_span(msg)

    @contextlib.contextmanager
    def _turn_span(self, msg: app_pb2.Turn) -> Iterator[None]:
        ref = msg.actor
        kind = msg.kind
        hook = _HOOKS.get(kind)
        attributes: dict[str, AttributeValue] = {
            "troupe.actor.type": ref.type,
            "troupe.actor.id": ref.id,
            "troupe.turn.kind": _KIND_NAMES.get(kind, str(kind)),
        }
        if hook is None:
            attributes["troupe.method"] = msg.name
        elif kind == common_pb2.TURN_KIND_REMINDER:
            attributes["troupe.reminder.name"] = msg.name
        elif kind == common_pb2.TURN_KIND_TIMER:
            attributes["troupe.timer.name"] = msg.name
        with self._tracer.start_as_current_span(
            f"{ref.type}/{hook or msg.name}",
            context=turn_parent(msg),
            kind=SpanKind.SERVER,
            attributes=attributes,
        ):
            yield
