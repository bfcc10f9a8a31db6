// W3C trace context through the real daemon (which exports nothing here, so it
// hands the caller's context on with each turn): client span -> handler span ->
// nested call -> handler span, all in one trace.
import { context, type SpanContext, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import { Actor, ActorError, actor, App, Client, method } from "../src/index.js";
import { formatTraceparent, parseTraceparent, turnParent } from "../src/tracing.js";
import { type Daemon, host, quietLogger, signal, startDaemon, within } from "./helpers.js";

function recorder(): { provider: BasicTracerProvider; exporter: InMemorySpanExporter } {
  const exporter = new InMemorySpanExporter();
  return { provider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }), exporter };
}

/** The one finished span with this name and kind. */
function one(spans: readonly ReadableSpan[], name: string, kind: SpanKind): ReadableSpan {
  const found = spans.filter((s) => s.name === name && s.kind === kind);
  assert.equal(found.length, 1, `expected one ${SpanKind[kind]} span ${name}, got ${spans.map((s) => `${SpanKind[s.kind]} ${s.name}`).join(", ")}`);
  return found[0] as ReadableSpan;
}

function parentOf(span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId;
}

// What each handler saw as the active span context (only with a context manager).
const seen = new Map<string, SpanContext | undefined>();

@actor("ts-callee")
class Callee extends Actor {
  @method
  work(): string {
    seen.set(`callee/${this.id}`, trace.getSpanContext(context.active()));
    return "worked";
  }
}

@actor("ts-caller")
class Caller extends Actor {
  @method
  async relay(target: string): Promise<string> {
    seen.set(`caller/${this.id}`, trace.getSpanContext(context.active()));
    const result = await this.ctx.actor<Callee>("ts-callee", target).call("work");
    return `relayed ${result}`;
  }

  @method
  async relayInside(target: string): Promise<string> {
    // A span of the application's own, active through its context manager.
    return trace.getTracer("user").startActiveSpan("user-work", async (span) => {
      try {
        return await this.ctx.actor<Callee>("ts-callee", target).call("work");
      } finally {
        span.end();
      }
    });
  }

  @method
  fail(): never {
    throw new RangeError("nope");
  }
}

describe("trace context helpers", () => {
  test("traceparent round-trips and malformed ones are refused", () => {
    const header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const sc = parseTraceparent(header, "vendor=x,other=y");
    assert.ok(sc);
    assert.equal(sc.traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.equal(sc.spanId, "b7ad6b7169203331");
    assert.equal(sc.traceFlags, 1);
    assert.equal(sc.isRemote, true);
    assert.equal(sc.traceState?.get("vendor"), "x");
    assert.equal(formatTraceparent(sc), header);
    assert.equal(formatTraceparent({ ...sc, traceFlags: 0 }), header.replace(/01$/, "00"));
    // A later version may append fields; version 00 may not.
    assert.ok(parseTraceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"));
    for (const bad of [
      "",
      "garbage",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
      "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      "00-00000000000000000000000000000000-b7ad6b7169203331-01",
      "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
      "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
    ]) {
      assert.equal(parseTraceparent(bad), undefined, bad);
    }
    assert.equal(trace.getSpan(turnParent({ traceparent: "", tracestate: "" })), undefined);
    assert.equal(trace.getSpanContext(turnParent({ traceparent: header, tracestate: "" }))?.spanId, "b7ad6b7169203331");
  });
});

describe("tracing through the daemon", () => {
  let daemon: Daemon;

  before(async () => {
    // The daemon reads OTEL_EXPORTER_OTLP_ENDPOINT too; these tests need one that
    // exports nothing and so hands the caller's context on unchanged.
    delete process.env["OTEL_EXPORTER_OTLP_ENDPOINT"];
    delete process.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"];
    daemon = await startDaemon();
  });

  after(async () => {
    await daemon.dispose();
  });

  afterEach(() => {
    seen.clear();
    // Tests that register a context manager or provider globally undo it here.
    context.disable();
    trace.disable();
  });

  test("client span -> handler span -> nested call -> handler span, one trace", async () => {
    // No context manager registered: the SDK carries the turn's context itself.
    const { provider, exporter } = recorder();
    const client = new Client({ address: daemon.address, timeout: "20s", tracerProvider: provider });
    const app = await hostTraced(daemon.address, provider);
    try {
      assert.equal(await client.actor<Caller>("ts-caller", "a").call("relay", "b"), "relayed worked");
    } finally {
      client.close();
      await app.close();
    }
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    const call = one(spans, "ts-caller/relay", SpanKind.CLIENT);
    const turnA = one(spans, "ts-caller/relay", SpanKind.SERVER);
    const nested = one(spans, "ts-callee/work", SpanKind.CLIENT);
    const turnB = one(spans, "ts-callee/work", SpanKind.SERVER);
    const traceId = call.spanContext().traceId;
    for (const s of [turnA, nested, turnB]) assert.equal(s.spanContext().traceId, traceId, s.name);
    assert.equal(parentOf(call), undefined);
    assert.equal(parentOf(turnA), call.spanContext().spanId);
    assert.equal(turnA.parentSpanContext?.isRemote, true);
    assert.equal(parentOf(nested), turnA.spanContext().spanId);
    assert.equal(parentOf(turnB), nested.spanContext().spanId);
    assert.equal(call.attributes["rpc.method"], "Invoke");
    assert.equal(call.attributes["troupe.method"], "relay");
    assert.equal(turnA.attributes["troupe.actor.type"], "ts-caller");
    assert.equal(turnA.attributes["troupe.actor.id"], "a");
    assert.equal(turnA.attributes["troupe.turn.kind"], "call");
    assert.equal(turnB.attributes["troupe.actor.id"], "b");
  });

  test("with a context manager the turn's span is active and parents the app's own spans", async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    const { provider, exporter } = recorder();
    trace.setGlobalTracerProvider(provider); // for trace.getTracer("user") in the handler
    const client = new Client({ address: daemon.address, timeout: "20s" });
    const app = await host(daemon.address, Caller, Callee);
    try {
      await provider.getTracer("test").startActiveSpan("test-root", async (root) => {
        try {
          assert.equal(await client.actor<Caller>("ts-caller", "a").call("relay", "b"), "relayed worked");
          assert.equal(await client.actor<Caller>("ts-caller", "a").call("relayInside", "c"), "worked");
        } finally {
          root.end();
        }
      });
    } finally {
      client.close();
      await app.close();
    }
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    const root = one(spans, "test-root", SpanKind.INTERNAL);
    const relay = spans.find((s) => s.name === "ts-caller/relay" && s.kind === SpanKind.CLIENT);
    assert.ok(relay);
    assert.equal(parentOf(relay), root.spanContext().spanId);
    const turnA = spans.find((s) => s.name === "ts-caller/relay" && s.kind === SpanKind.SERVER);
    assert.ok(turnA);
    assert.equal(seen.get("caller/a")?.spanId, turnA.spanContext().spanId);
    const turnB = spans.find((s) => s.name === "ts-callee/work" && s.kind === SpanKind.SERVER && s.attributes["troupe.actor.id"] === "b");
    assert.equal(seen.get("callee/b")?.spanId, turnB?.spanContext().spanId);
    // The nested call made inside the user's span is that span's child.
    const userWork = one(spans, "user-work", SpanKind.INTERNAL);
    const inside = spans.filter((s) => s.name === "ts-callee/work" && s.kind === SpanKind.CLIENT && parentOf(s) === userWork.spanContext().spanId);
    assert.equal(inside.length, 1);
    assert.equal(parentOf(userWork), one(spans, "ts-caller/relayInside", SpanKind.SERVER).spanContext().spanId);
    for (const s of spans) assert.equal(s.spanContext().traceId, root.spanContext().traceId, s.name);
  });

  test("an app without an OpenTelemetry SDK passes the trace on", async () => {
    // A context manager, so the handlers can look, but no provider for the app:
    // its spans are the API's non-recording ones.
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    const { provider, exporter } = recorder();
    const client = new Client({ address: daemon.address, timeout: "20s", tracerProvider: provider });
    const app = await host(daemon.address, Caller, Callee);
    try {
      assert.equal(await client.actor<Caller>("ts-caller", "a").call("relay", "b"), "relayed worked");
    } finally {
      client.close();
      await app.close();
    }
    const call = one(exporter.getFinishedSpans(), "ts-caller/relay", SpanKind.CLIENT);
    for (const who of ["caller/a", "callee/b"]) {
      const sc = seen.get(who);
      assert.ok(sc, who);
      assert.equal(sc.traceId, call.spanContext().traceId, who);
      assert.equal(sc.spanId, call.spanContext().spanId, who);
    }
  });

  test("a call without a trace starts a fresh one, and a throwing handler marks its span", async () => {
    const { provider, exporter } = recorder();
    const client = new Client({ address: daemon.address, timeout: "20s" }); // no-op tracing: no headers
    const app = await hostTraced(daemon.address, provider);
    try {
      assert.equal(await client.actor<Callee>("ts-callee", "fresh").call("work"), "worked");
      await assert.rejects(client.actor<Caller>("ts-caller", "x").call("fail"), (e: unknown) => e instanceof ActorError && e.remoteType === "RangeError");
    } finally {
      client.close();
      await app.close();
    }
    const spans = exporter.getFinishedSpans();
    const turn = one(spans, "ts-callee/work", SpanKind.SERVER);
    assert.equal(turn.parentSpanContext, undefined);
    const failed = one(spans, "ts-caller/fail", SpanKind.SERVER);
    assert.equal(failed.status.code, SpanStatusCode.ERROR);
    assert.notEqual(failed.spanContext().traceId, turn.spanContext().traceId);
    assert.ok(failed.events.some((e) => e.name === "exception"));
  });

  test("a timer's turn has its span, and calls from a turn are its children", async () => {
    const fired = signal();
    const ended = signal<ReadableSpan>();
    @actor("ts-ticker")
    class Ticker extends Actor {
      @method
      async start(): Promise<void> {
        await this.ctx.setTimer("tick", { due: "10ms", data: { n: 1 } });
      }

      override onTimer(): void {
        fired.resolve();
      }
    }
    const exporter = new InMemorySpanExporter();
    // The timer's span ends after its handler returns: wait for that span by event.
    const provider = new BasicTracerProvider({
      spanProcessors: [
        new SimpleSpanProcessor(exporter),
        {
          onStart: () => undefined,
          onEnd: (span: ReadableSpan) => {
            if (span.name === "ts-ticker/onTimer") ended.resolve(span);
          },
          forceFlush: () => Promise.resolve(),
          shutdown: () => Promise.resolve(),
        },
      ],
    });
    const client = new Client({ address: daemon.address, timeout: "20s" });
    const app = new App({ actors: [Ticker], address: daemon.address, appName: "node-test", logger: quietLogger, tracerProvider: provider });
    await app.start({ timeout: 15 });
    let span: ReadableSpan;
    try {
      await client.actor<Ticker>("ts-ticker", "t").call("start");
      await within(20_000, "the timer to fire", fired.promise);
      span = await within(20_000, "the timer turn's span", ended.promise);
    } finally {
      client.close();
      await app.close();
    }
    assert.equal(span.kind, SpanKind.SERVER);
    assert.equal(span.attributes["troupe.turn.kind"], "timer");
    assert.equal(span.attributes["troupe.timer.name"], "tick");
    const spans = exporter.getFinishedSpans();
    const setTimer = one(spans, "ts-ticker/SetTimer", SpanKind.CLIENT);
    assert.equal(parentOf(setTimer), one(spans, "ts-ticker/start", SpanKind.SERVER).spanContext().spanId);
    assert.equal(setTimer.attributes["rpc.method"], "SetTimer");
  });
});

/** Caller and Callee hosted by an App that records its turns to `provider`. */
async function hostTraced(address: string, provider: BasicTracerProvider): Promise<App> {
  const app = new App({ actors: [Caller, Callee], address, appName: "node-test", logger: quietLogger, tracerProvider: provider });
  await app.start({ timeout: 15 });
  return app;
}
