"""W3C trace context through the real daemon: one trace from a client through nested calls.

The SDK side records with opentelemetry-sdk TracerProviders handed to the Client
and App (never the global provider, so the no-SDK test below really runs
without one). The daemon's own spans come over OTLP/gRPC to a receiver in the test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, StatusCode

import troupe
from troupe._proto.troupe.v1 import app_pb2
from troupe._proto.troupe.v1 import common_pb2 as troupe_common_pb2
from troupe._tracing import Tracing

from .conftest import Daemon, hosting

WAIT = 20.0  # upper bound on waiting for spans to be exported


@dataclass(frozen=True)
class Seen:
    """A finished span, from the SDK in this process or from the daemon over OTLP."""

    service: str
    name: str
    kind: SpanKind
    trace_id: int
    span_id: int
    parent_id: int | None
    attributes: dict[str, Any] = field(hash=False, compare=False)
    status: StatusCode = StatusCode.UNSET


class SpanSink:
    """Spans from any thread; waiters in the event loop are woken by each arrival."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Seen] = []
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()

    def add(self, spans: Sequence[Seen]) -> None:
        with self._lock:
            self._spans.extend(spans)
        self._loop.call_soon_threadsafe(self._changed.set)

    @property
    def spans(self) -> list[Seen]:
        with self._lock:
            return list(self._spans)

    async def wait_for(self, what: str, found: Callable[[list[Seen]], Any]) -> Any:
        """Wait until ``found(spans)`` is truthy and return it; fail after WAIT seconds."""

        async def loop() -> Any:
            while True:
                self._changed.clear()
                result = found(self.spans)
                if result:
                    return result
                await self._changed.wait()

        try:
            return await asyncio.wait_for(loop(), WAIT)
        except asyncio.TimeoutError:
            lines = "\n".join(f"  {s}" for s in self.spans)
            pytest.fail(f"no {what} within {WAIT}s; spans seen:\n{lines}")


class SinkExporter(SpanExporter):
    """Hands the SDK's finished spans to a SpanSink."""

    def __init__(self, sink: SpanSink) -> None:
        self._sink = sink

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._sink.add([_from_sdk(s) for s in spans])
        return SpanExportResult.SUCCESS


def _from_sdk(span: ReadableSpan) -> Seen:
    ctx = span.context
    assert ctx is not None
    return Seen(
        service=str(span.resource.attributes.get("service.name", "")),
        name=span.name,
        kind=span.kind,
        trace_id=ctx.trace_id,
        span_id=ctx.span_id,
        parent_id=span.parent.span_id if span.parent is not None else None,
        attributes=dict(span.attributes or {}),
        status=span.status.status_code,
    )


_OTLP_KINDS = {
    trace_pb2.Span.SPAN_KIND_INTERNAL: SpanKind.INTERNAL,
    trace_pb2.Span.SPAN_KIND_SERVER: SpanKind.SERVER,
    trace_pb2.Span.SPAN_KIND_CLIENT: SpanKind.CLIENT,
    trace_pb2.Span.SPAN_KIND_PRODUCER: SpanKind.PRODUCER,
    trace_pb2.Span.SPAN_KIND_CONSUMER: SpanKind.CONSUMER,
}


def _otlp_value(v: common_pb2.AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """The trace half of an OTLP/gRPC collector: every exported span goes to the sink."""

    def __init__(self, sink: SpanSink) -> None:
        self._sink = sink

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        seen: list[Seen] = []
        for rs in request.resource_spans:
            resource = {a.key: _otlp_value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    seen.append(
                        Seen(
                            service=str(resource.get("service.name", "")),
                            name=s.name,
                            kind=_OTLP_KINDS.get(s.kind, SpanKind.INTERNAL),
                            trace_id=int.from_bytes(s.trace_id, "big"),
                            span_id=int.from_bytes(s.span_id, "big"),
                            parent_id=int.from_bytes(s.parent_span_id, "big")
                            if s.parent_span_id
                            else None,
                            attributes={a.key: _otlp_value(a.value) for a in s.attributes},
                        )
                    )
        self._sink.add(seen)
        return trace_service_pb2.ExportTraceServiceResponse()


class ListExporter(SpanExporter):
    """Keeps the finished spans, for tests without an event loop."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def list_provider() -> tuple[TracerProvider, ListExporter]:
    exporter = ListExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def recording_provider(service: str, sink: SpanSink) -> TracerProvider:
    """A provider whose spans reach the sink as each one ends."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(SinkExporter(sink)))
    return provider


# ---- actors: caller/a relays to callee/b; each remembers the span context it ran in ----

contexts: dict[str, trace.SpanContext] = {}


@troupe.actor("caller")
class CallerActor(troupe.Actor):
    @troupe.method
    async def relay(self, target: str) -> str:
        contexts[f"caller/{self.id}"] = trace.get_current_span().get_span_context()
        result: str = await self.ctx.actor("callee", target).work()
        return f"relayed {result}"

    @troupe.method
    async def fail(self) -> None:
        raise ValueError("nope")


@troupe.actor("callee")
class CalleeActor(troupe.Actor):
    @troupe.method
    async def work(self) -> str:
        contexts[f"callee/{self.id}"] = trace.get_current_span().get_span_context()
        return "worked"


@pytest.fixture(autouse=True)
def _clear_contexts() -> Iterator[None]:
    contexts.clear()
    yield
    contexts.clear()


@pytest.fixture(autouse=True)
def _no_ambient_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon reads OTEL_EXPORTER_OTLP_ENDPOINT too; the pass-through tests need
    # a daemon that exports nothing, whatever the developer's shell has set.
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)


def _by_id(spans: Sequence[Seen]) -> dict[int, Seen]:
    return {s.span_id: s for s in spans}


def _one(spans: Sequence[Seen], service: str, name: str, kind: SpanKind) -> Seen:
    found = [s for s in spans if s.service == service and s.name == name and s.kind == kind]
    assert len(found) == 1, f"expected one {kind.name} span {service}:{name}, got {found}"
    return found[0]


# ---- the whole trace, daemon spans included ----


@pytest.fixture
async def otlp_sink() -> AsyncIterator[tuple[SpanSink, str]]:
    """An OTLP/gRPC trace receiver on a free loopback port: (sink, endpoint)."""
    sink = SpanSink()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(OtlpReceiver(sink), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield sink, f"http://127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
async def traced_daemon(
    daemon_binary: Path, tmp_path: Path, otlp_sink: tuple[SpanSink, str]
) -> AsyncIterator[Daemon]:
    """A daemon exporting its spans to the test's OTLP receiver, quickly."""
    _, endpoint = otlp_sink
    d = Daemon(
        binary=daemon_binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=["--host-wait", "200ms", "--otlp-endpoint", endpoint],
        env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    await d.start()
    try:
        yield d
    finally:
        await d.kill()


def otlp_provider(service: str, endpoint: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    # Batch: the exporter is a blocking gRPC client and the receiver answers on
    # this event loop, so exports must happen off it.
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    return provider


async def test_one_trace_from_client_through_daemon_and_nested_call(
    traced_daemon: Daemon, otlp_sink: tuple[SpanSink, str]
) -> None:
    sink, endpoint = otlp_sink
    client_provider = otlp_provider("trace-client", endpoint)
    app_provider = otlp_provider("trace-app", endpoint)
    try:
        async with (
            troupe.Client(traced_daemon.address, timeout=20, tracer_provider=client_provider) as c,
            hosting(traced_daemon.address, CallerActor, CalleeActor, tracer_provider=app_provider),
        ):
            tracer = client_provider.get_tracer("test")
            with tracer.start_as_current_span("test-root") as root:
                assert await c.actor("caller", "a").relay("b") == "relayed worked"
            trace_id = root.get_span_context().trace_id
        # Flushing blocks until the receiver, served by this loop, has answered.
        for provider in (client_provider, app_provider):
            assert await asyncio.to_thread(provider.force_flush, 10_000)
    finally:
        for provider in (client_provider, app_provider):
            await asyncio.to_thread(provider.shutdown)

    def chain_from_callee(spans: list[Seen]) -> list[Seen] | None:
        """The spans from callee/b's turn up to the root, once all have arrived."""
        in_trace = _by_id([s for s in spans if s.trace_id == trace_id])
        leaf = [
            s
            for s in in_trace.values()
            if s.service == "trace-app" and s.name == "callee/work" and s.kind == SpanKind.SERVER
        ]
        if not leaf:
            return None
        chain = [leaf[0]]
        while chain[-1].parent_id is not None:
            parent = in_trace.get(chain[-1].parent_id)
            if parent is None:
                return None  # not exported yet
            chain.append(parent)
        return chain

    chain: list[Seen] = await sink.wait_for(
        "complete trace from callee/b to the root", chain_from_callee
    )
    got = [(s.service, s.name) for s in chain]
    assert got == [
        ("trace-app", "callee/work"),
        ("troupe", "troupe.turn"),
        ("troupe", "troupe.call"),
        ("trace-app", "callee/work"),
        ("trace-app", "caller/relay"),
        ("troupe", "troupe.turn"),
        ("troupe", "troupe.call"),
        ("trace-client", "caller/relay"),
        ("trace-client", "test-root"),
    ], got
    kinds = [s.kind for s in chain]
    assert kinds[0] == kinds[4] == SpanKind.SERVER  # the handlers' spans
    assert kinds[3] == kinds[7] == SpanKind.CLIENT  # the calls
    assert kinds[2] == kinds[6] == SpanKind.SERVER  # the daemon's troupe.call
    assert chain[0].attributes["troupe.actor.type"] == "callee"
    assert chain[0].attributes["troupe.actor.id"] == "b"
    assert chain[0].attributes["troupe.turn.kind"] == "call"
    assert chain[4].attributes["troupe.actor.id"] == "a"
    assert chain[7].attributes["troupe.method"] == "relay"
    # The handler's current span (seen through contextvars) is its server span.
    assert contexts["caller/a"].span_id == chain[4].span_id
    assert contexts["callee/b"].span_id == chain[0].span_id


# ---- pass-through: a daemon that exports nothing hands the caller's context on ----


@pytest.fixture
async def sink() -> SpanSink:
    return SpanSink()


async def test_handler_span_is_child_of_client_span_through_daemon(
    daemon: Daemon, sink: SpanSink
) -> None:
    client_provider = recording_provider("trace-client", sink)
    app_provider = recording_provider("trace-app", sink)
    async with (
        troupe.Client(daemon.address, timeout=20, tracer_provider=client_provider) as c,
        hosting(daemon.address, CallerActor, CalleeActor, tracer_provider=app_provider),
    ):
        assert await c.actor("caller", "a").relay("b") == "relayed worked"
    # Every span here ended before the reply left its process (synchronous export).
    spans = sink.spans
    call = _one(spans, "trace-client", "caller/relay", SpanKind.CLIENT)
    turn_a = _one(spans, "trace-app", "caller/relay", SpanKind.SERVER)
    nested = _one(spans, "trace-app", "callee/work", SpanKind.CLIENT)
    turn_b = _one(spans, "trace-app", "callee/work", SpanKind.SERVER)
    assert call.parent_id is None  # no span was current in the test: the call is a root
    assert {s.trace_id for s in (call, turn_a, nested, turn_b)} == {call.trace_id}
    assert turn_a.parent_id == call.span_id
    assert nested.parent_id == turn_a.span_id
    assert turn_b.parent_id == nested.span_id
    assert call.attributes["rpc.method"] == "Invoke"
    assert call.attributes["troupe.actor.type"] == "caller"
    assert contexts["caller/a"].trace_id == call.trace_id
    assert contexts["caller/a"].span_id == turn_a.span_id


async def test_trace_passes_through_an_app_without_otel_sdk(daemon: Daemon, sink: SpanSink) -> None:
    # Only the client records; the app uses the global provider, which is the
    # API's no-op one in this test process.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    client_provider = recording_provider("trace-client", sink)
    async with (
        troupe.Client(daemon.address, timeout=20, tracer_provider=client_provider) as c,
        hosting(daemon.address, CallerActor, CalleeActor),
    ):
        assert await c.actor("caller", "a").relay("b") == "relayed worked"
    call = _one(sink.spans, "trace-client", "caller/relay", SpanKind.CLIENT)
    # Non-recording spans carry their parent's context: both handlers, the nested
    # call's callee included, run in the client span's context.
    for who in ("caller/a", "callee/b"):
        ctx = contexts[who]
        assert ctx.is_valid, who
        assert ctx.trace_id == call.trace_id, who
        assert ctx.span_id == call.span_id, who


async def test_sync_client_calls_are_children_of_the_calling_threads_span(
    daemon: Daemon, sink: SpanSink
) -> None:
    client_provider = recording_provider("trace-client", sink)
    app_provider = recording_provider("trace-app", sink)
    tracer = client_provider.get_tracer("test")

    def from_a_thread() -> tuple[str, int]:
        with (
            troupe.SyncClient(daemon.address, timeout=20, tracer_provider=client_provider) as c,
            tracer.start_as_current_span("script") as root,
        ):
            return c.actor("callee", "s").work(), root.get_span_context().span_id

    async with hosting(daemon.address, CalleeActor, tracer_provider=app_provider):
        result, root_id = await asyncio.to_thread(from_a_thread)
    assert result == "worked"
    call = _one(sink.spans, "trace-client", "callee/work", SpanKind.CLIENT)
    turn = _one(sink.spans, "trace-app", "callee/work", SpanKind.SERVER)
    assert call.parent_id == root_id
    assert turn.parent_id == call.span_id


async def test_untraced_call_gets_a_fresh_trace_and_failures_mark_spans(
    daemon: Daemon, sink: SpanSink
) -> None:
    app_provider = recording_provider("trace-app", sink)
    async with (
        troupe.Client(daemon.address, timeout=20) as c,  # global no-op provider: no context sent
        hosting(daemon.address, CallerActor, CalleeActor, tracer_provider=app_provider),
    ):
        assert await c.actor("callee", "fresh").work() == "worked"
        with pytest.raises(troupe.ActorError, match="nope"):
            await c.actor("caller", "x").fail()
    turn = _one(sink.spans, "trace-app", "callee/work", SpanKind.SERVER)
    assert turn.parent_id is None
    assert contexts["callee/fresh"].span_id == turn.span_id
    failed = _one(sink.spans, "trace-app", "caller/fail", SpanKind.SERVER)
    assert failed.status == StatusCode.ERROR
    assert failed.trace_id != turn.trace_id


async def test_timer_turns_have_spans(daemon: Daemon, sink: SpanSink) -> None:
    fired = asyncio.Event()

    @troupe.actor("ticker")
    class Ticker(troupe.Actor):
        @troupe.method
        async def start(self) -> None:
            await self.ctx.set_timer("tick", due="10ms", data={"n": 1})

        async def on_timer(self, name: str, data: Any) -> None:
            contexts["timer"] = trace.get_current_span().get_span_context()
            fired.set()

    app_provider = recording_provider("trace-app", sink)
    async with (
        troupe.Client(daemon.address, timeout=20) as c,
        hosting(daemon.address, Ticker, tracer_provider=app_provider),
    ):
        await c.actor("ticker", "t").start()
        await asyncio.wait_for(fired.wait(), WAIT)
        spans = await sink.wait_for(
            "the timer turn's span", lambda spans: [s for s in spans if s.name == "ticker/on_timer"]
        )
    span = spans[0]
    assert span.kind == SpanKind.SERVER
    assert span.attributes["troupe.turn.kind"] == "timer"
    assert span.attributes["troupe.timer.name"] == "tick"
    assert contexts["timer"].span_id == span.span_id
    # The SetTimer call made from the turn is a child of the turn's span.
    start = _one(sink.spans, "trace-app", "ticker/start", SpanKind.SERVER)
    set_timer = _one(sink.spans, "trace-app", "ticker/SetTimer", SpanKind.CLIENT)
    assert set_timer.parent_id == start.span_id


# ---- the SDK's spans without a daemon ----


def test_turn_continues_the_traceparent_it_carries() -> None:
    provider, exporter = list_provider()
    tracing = Tracing(provider)
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    msg = app_pb2.Turn(
        actor=troupe_common_pb2.ActorRef(type="counter", id="c1"),
        name="incr",
        kind=troupe_common_pb2.TURN_KIND_CALL,
        traceparent=traceparent,
        tracestate="vendor=x",
    )
    with tracing.turn(msg):
        current = trace.get_current_span().get_span_context()
        with tracing.client_call("Invoke", "other", "o1", "get") as md:
            assert md is not None
            headers = dict(md)
    (client, server) = exporter.spans
    assert server.name == "counter/incr"
    assert server.kind == SpanKind.SERVER
    assert server.parent is not None and server.parent.is_remote
    assert server.parent.span_id == 0xB7AD6B7169203331
    assert server.context is not None and current.span_id == server.context.span_id
    assert current.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert server.attributes is not None and server.attributes["troupe.method"] == "incr"
    assert client.kind == SpanKind.CLIENT
    assert client.parent is not None and client.parent.span_id == current.span_id
    assert client.context is not None
    assert headers["traceparent"] == f"00-{current.trace_id:032x}-{client.context.span_id:016x}-01"
    assert headers["tracestate"] == "vendor=x"


def test_without_sdk_and_without_context_nothing_is_sent() -> None:
    tracing = Tracing()  # the API's no-op provider in this process
    with tracing.client_call("Invoke", "counter", "c1", "incr") as md:
        assert md is None
    # Untraced turn: the handler sees no valid span, and calls from it send nothing.
    with tracing.turn(app_pb2.Turn(actor=troupe_common_pb2.ActorRef(type="t", id="i"))):
        assert not trace.get_current_span().get_span_context().is_valid
        with tracing.client_call("Invoke", "counter", "c1", "incr") as md:
            assert md is None


def test_without_sdk_an_untraced_turn_does_not_inherit_the_surrounding_span() -> None:
    # The untraced fast path (no SDK, no traceparent) must still start turns from an
    # empty context when the app runs inside a span of its own.
    tracing = Tracing()
    surrounding = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=0x0AF7651916CD43DD8448EB211C80319C,
            span_id=0xB7AD6B7169203331,
            is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )
    with trace.use_span(surrounding):
        with tracing.turn(app_pb2.Turn(actor=troupe_common_pb2.ActorRef(type="t", id="i"))):
            assert not trace.get_current_span().get_span_context().is_valid
            with tracing.client_call("Invoke", "counter", "c1", "incr") as md:
                assert md is None
        # Outside a turn the surrounding span is what a call carries.
        with tracing.client_call("Invoke", "counter", "c1", "incr") as md:
            assert md is not None and "0af7651916cd43dd8448eb211c80319c" in dict(md)["traceparent"]


def test_without_sdk_incoming_context_passes_through() -> None:
    tracing = Tracing()
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    msg = app_pb2.Turn(actor=troupe_common_pb2.ActorRef(type="t", id="i"), traceparent=traceparent)
    with tracing.turn(msg), tracing.client_call("Invoke", "counter", "c1", "incr") as md:
        assert md is not None
        assert dict(md) == {"traceparent": traceparent}


def test_malformed_traceparent_starts_a_fresh_trace() -> None:
    provider, exporter = list_provider()
    msg = app_pb2.Turn(actor=troupe_common_pb2.ActorRef(type="t", id="i"), traceparent="garbage")
    with Tracing(provider).turn(msg):
        pass
    (span,) = exporter.spans
    assert span.parent is None
