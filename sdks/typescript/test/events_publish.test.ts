// Publishing actor events (docs/events.md): what `ctx.publish` puts in
// TurnResult.events, on a fake daemon (through whichever core TROUPE_SDK_CORE
// picks, so the native core is seen to forward them); which turns' events the
// real daemon delivers; and the trace context an event carries from the turn
// that published it. The watches that deliver them: events_watch.test.ts,
// events_watch_type.test.ts.
import * as grpc from "@grpc/grpc-js";
import { context, type SpanContext, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { AppMessage, DaemonMessage, Turn, TurnResult } from "../src/gen/troupe/v1/app.js";
import { ContentType, TurnKind } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, ActorError, App, eventContext, method, TroupeError } from "../src/index.js";
import { Bus, eventsSuite, Fleet } from "./events_common.js";
import { attachedApp, FakeDaemon } from "./fake_daemon.js";
import { fakeWatchSuite, take, values, WAIT_MS, wireEvent } from "./fake_watch.js";
import { quietLogger, signal, within } from "./helpers.js";

const HOOK_ERROR = /events can only be published from a turn/;

// ---------------------------------------------------------------------------
// The app's side on a fake daemon.

/** Turns the fake-daemon tests hold at an await, to run another turn of the actor meanwhile. */
let gate = signal();
/** What publishing from work that outlived its turn threw. */
let lateError = signal<unknown>();

@actor("ev_fake")
class EvFake extends Actor {
  override onActivate(): void {
    if (this.id.startsWith("hook")) this.ctx.publish("from onActivate");
  }

  @method
  publishAll(values: unknown[]): string {
    for (const v of values) this.ctx.publish(v);
    return "ok";
  }

  @method
  publishThenFail(values: unknown[]): void {
    for (const v of values) this.ctx.publish(v);
    throw new Error("fails after publishing");
  }

  @method
  publishBytes(text: string): void {
    this.ctx.publish(new TextEncoder().encode(text));
  }

  /** Publishes, waits for `gate`, publishes again. */
  @method
  async around(tag: string): Promise<void> {
    this.ctx.publish(`${tag}1`);
    await gate.promise;
    this.ctx.publish(`${tag}2`);
  }

  /** What publishing `what` throws, as [name, message]; then publishes "after". */
  @method
  tryPublish(what: "bigint" | "function" | "cycle"): [string, string] | null {
    const cycle: Record<string, unknown> = {};
    cycle["self"] = cycle;
    const value = what === "bigint" ? 10n : what === "function" ? () => 1 : cycle;
    let thrown: [string, string] | null = null;
    try {
      this.ctx.publish(value);
    } catch (e) {
      thrown = e instanceof Error ? [e.name, e.message] : ["?", String(e)];
    }
    this.ctx.publish("after");
    return thrown;
  }

  /** Publishes from a timer callback, after the turn ended. */
  @method
  publishLater(): void {
    setTimeout(() => {
      try {
        this.ctx.publish("too late");
        lateError.resolve(undefined);
      } catch (e) {
        lateError.resolve(e);
      }
    }, 0);
  }

  override onReminder(name: string): void {
    this.ctx.publish({ reminder: name });
  }

  override onTimer(name: string): void {
    this.ctx.publish({ timer: name });
  }

  override onAlarm(data: unknown): void {
    this.ctx.publish({ alarm: data });
  }
}

describe("ctx.publish: TurnResult.events on a fake daemon", () => {
  const daemon = new FakeDaemon();
  let app: App;
  let callId = 100n;

  function turn(id: string, name: string, args: unknown[], kind = TurnKind.TURN_KIND_CALL): DaemonMessage {
    callId += 1n;
    const value: Turn = {
      callId,
      actor: { type: "ev_fake", id },
      kind,
      name,
      payload: { data: Buffer.from(kind === TurnKind.TURN_KIND_CALL ? JSON.stringify({ args, kwargs: {} }) : JSON.stringify(args[0] ?? null)), contentType: ContentType.CONTENT_TYPE_JSON },
      metadata: {},
      chain: undefined,
      traceparent: "",
      tracestate: "",
      deadlineUnixMs: 0n,
      leaseDeadlineUnixMs: 0n,
      expiredKeys: [],
      unanswered: false,
    };
    return { kind: { $case: "turn", value } };
  }

  function activate(id: string): DaemonMessage {
    callId += 1n;
    return { kind: { $case: "activate", value: { callId, actor: { type: "ev_fake", id }, state: {}, leaseDeadlineUnixMs: 0n } } };
  }

  /** The app's next `n` answers, batches unpacked. */
  async function answers(n: number): Promise<AppMessage[]> {
    const writes = await daemon.writes(n);
    return writes.flatMap((w) => (w.kind?.$case === "batch" ? w.kind.value.messages : [w]));
  }

  function result(msg: AppMessage | undefined): TurnResult {
    assert.equal(msg?.kind?.$case, "turnResult");
    return msg.kind.value;
  }

  /** A result's events as their JSON text. */
  const texts = (r: TurnResult): string[] => r.events.map((e) => Buffer.from(e.data).toString("utf8"));

  async function run(msg: DaemonMessage): Promise<TurnResult> {
    daemon.send(msg);
    return result((await answers(1))[0]);
  }

  before(async () => {
    app = await attachedApp(daemon, [EvFake], "events-fake", quietLogger);
    daemon.send(activate("f1"));
    assert.equal((await answers(1))[0]?.kind?.$case, "activated");
  });

  after(async () => {
    await app.close();
    daemon.stop();
  });

  test("a turn's events are sent with its result, in call order, encoded as return values", async () => {
    const r = await run(turn("f1", "publishAll", [[1, "ü", { a: [true, null] }, null]]));
    assert.equal(r.outcome?.$case, "reply");
    assert.deepEqual(texts(r), ["1", '"\\u00fc"', '{"a":[true,null]}', "null"]);
    assert.ok(r.events.every((e) => e.contentType === ContentType.CONTENT_TYPE_JSON));
    // A turn that publishes nothing sends no events.
    assert.deepEqual(texts(await run(turn("f1", "publishAll", [[]]))), []);
  });

  test("a failed turn sends no events", async () => {
    const r = await run(turn("f1", "publishThenFail", [["lost"]]));
    assert.equal(r.outcome?.$case, "error");
    assert.deepEqual(r.events, []);
    assert.deepEqual(texts(await run(turn("f1", "publishAll", [["kept"]]))), ['"kept"']);
  });

  test("reminders, timers and the alarm publish as methods do", async () => {
    assert.deepEqual(texts(await run(turn("f1", "r1", [null], TurnKind.TURN_KIND_REMINDER))), ['{"reminder":"r1"}']);
    assert.deepEqual(texts(await run(turn("f1", "t1", [null], TurnKind.TURN_KIND_TIMER))), ['{"timer":"t1"}']);
    assert.deepEqual(texts(await run(turn("f1", "", ["wake"], TurnKind.TURN_KIND_ALARM))), ['{"alarm":"wake"}']);
  });

  test("turns of one actor run side by side: each sends only the events it published", async () => {
    gate = signal();
    // `around` publishes a1, then waits; `publishAll` runs meanwhile and ends first.
    daemon.send(turn("f1", "around", ["a"]));
    daemon.send(turn("f1", "publishAll", [["b"]]));
    const first = result((await answers(1))[0]);
    gate.resolve();
    const second = result((await answers(1))[0]);
    assert.deepEqual(texts(first), ['"b"']);
    assert.deepEqual(texts(second), ['"a1"', '"a2"']);
  });

  test("a value that cannot be sent throws at publish; the turn goes on", async () => {
    for (const what of ["bigint", "function", "cycle"]) {
      const r = await run(turn("f1", "tryPublish", [what]));
      assert.equal(r.outcome?.$case, "reply");
      const thrown = JSON.parse(Buffer.from(r.outcome.value.data).toString("utf8")) as [string, string];
      assert.equal(thrown[0], "TypeError", what);
      assert.match(thrown[1], /the event ev_fake\/f1 published must be JSON-serialisable or a Uint8Array/, what);
      assert.deepEqual(texts(r), ['"after"'], what);
    }
  });

  test("a Uint8Array is published raw", async () => {
    const r = await run(turn("f1", "publishBytes", ["raw"]));
    const [event, ...more] = r.events;
    assert.ok(event !== undefined && more.length === 0, `one event, got ${String(r.events.length)}`);
    assert.equal(event.contentType, ContentType.CONTENT_TYPE_BYTES);
    assert.equal(Buffer.from(event.data).toString("utf8"), "raw");
  });

  test("publishing from onActivate fails the activation with a clear error", async () => {
    daemon.send(activate("hook1"));
    const answer = (await answers(1))[0];
    assert.equal(answer?.kind?.$case, "activated");
    const error = answer.kind.value.error;
    assert.equal(error?.type, "TroupeError");
    assert.match(error.message, HOOK_ERROR);
    assert.match(error.message, /ev_fake\/hook1 called this\.ctx\.publish from onActivate/);
  });

  test("work that outlives its turn cannot publish", async () => {
    lateError = signal<unknown>();
    const r = await run(turn("f1", "publishLater", []));
    assert.deepEqual(r.events, []);
    const e = await within(WAIT_MS, "the late publish", lateError.promise);
    assert.ok(e instanceof TroupeError, String(e));
    assert.match(e.message, /outside any turn/);
    assert.match(e.message, HOOK_ERROR);
  });
});

// ---------------------------------------------------------------------------
// A turn's events on the real daemon.

@actor("ev_hook")
class Hook extends Actor {
  override onActivate(): void {
    this.ctx.publish("from onActivate");
  }

  @method
  ping(): string {
    return "pong";
  }
}

describe("a turn's events on the daemon", () => {
  const suite = eventsSuite(Bus, Hook);

  test("a turn that publishes then throws delivers nothing; the next one's events arrive", async () => {
    const { id, call } = suite.bus();
    const stream = await suite.env.client.watch("ev_bus", id);
    try {
      await assert.rejects(call("publishThenFail", ["lost1", "lost2"]), (e: unknown) => e instanceof ActorError && /fails after publishing/.test(e.message));
      await call("publishAll", ["kept"]);
      // Had the failed turn's events been sent, they would come first.
      assert.deepEqual(values(await take(stream, 1)), ["kept"]);
    } finally {
      stream.close();
    }
  });

  test("reminders, timers and the alarm publish", async () => {
    const { id } = suite.bus();
    const stream = await suite.env.client.watch(Bus, id);
    try {
      await suite.env.client.invoke("ev_bus", id, "schedule");
      await suite.env.advance("4m");
      assert.deepEqual(values(await take(stream, 3)), [{ reminder: "r" }, { timer: "t" }, { alarm: "a" }]);
    } finally {
      stream.close();
    }
  });

  test("a read-only method publishes", async () => {
    const { id } = suite.bus();
    const stream = await suite.env.client.watch(Bus, id);
    try {
      await suite.env.client.invoke("ev_bus", id, "peek", ["looked"]);
      assert.deepEqual(values(await take(stream, 1)), ["looked"]);
    } finally {
      stream.close();
    }
  });

  test("publishing from onActivate fails the activation visibly", async () => {
    await assert.rejects(
      suite.env.client.invoke("ev_hook", "h1", "ping"),
      (e: unknown) => e instanceof ActorError && e.remoteType === "TroupeError" && HOOK_ERROR.test(e.message) && /ev_hook\/h1 .* from onActivate/.test(e.message),
    );
  });
});

// ---------------------------------------------------------------------------
// An event's trace context: on a fake server, what the client makes of the one
// the daemon sends; on the real daemon, that of the call whose turn published it.

/** The span of a call that publishes, as a caller's trace would have it. */
const CALLER_SPAN: SpanContext = {
  traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "00f067aa0ba902b7",
  traceFlags: TraceFlags.SAMPLED,
  isRemote: true,
};

describe("an event's trace context", () => {
  const fake = fakeWatchSuite({ token: "fake-token" });
  const suite = eventsSuite(Bus, Fleet);

  test("an event carries the trace context of the turn that published it; eventContext continues it", async () => {
    const traceparent = `00-${CALLER_SPAN.traceId}-${CALLER_SPAN.spanId}-01`;
    const watching = fake.client.watch("bus", "b9");
    const { call, cancelled } = await fake.server.next();
    call.sendMetadata(new grpc.Metadata());
    const stream = await within(WAIT_MS, "watch() after the headers", watching);
    call.write({ ...wireEvent("traced", 1), traceparent, tracestate: "vendor=x" });
    call.write(wireEvent("untraced", 2));
    const [traced, untraced] = await take(stream, 2);
    stream.close();
    assert.ok(traced !== undefined && untraced !== undefined);
    assert.deepEqual([traced.traceparent, traced.tracestate], [traceparent, "vendor=x"]);
    const parent = trace.getSpanContext(eventContext(traced));
    assert.deepEqual(
      parent && { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.traceFlags, isRemote: parent.isRemote, vendor: parent.traceState?.get("vendor") },
      { ...CALLER_SPAN, vendor: "x" },
    );
    assert.deepEqual([untraced.traceparent, untraced.tracestate], ["", ""]);
    assert.equal(trace.getSpanContext(eventContext(untraced)), undefined);
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });

  test("a watched event carries the trace of the call that published it, in a one-actor and a type watch", async () => {
    // The API follows the active context across awaits only with a context manager.
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    try {
      const caller = trace.setSpanContext(context.active(), CALLER_SPAN);
      const { id, call } = suite.bus();
      const watches = [
        { open: () => suite.env.client.watch(Bus, id), publish: () => call("publishAll", ["traced"]) },
        { open: () => suite.env.client.watchType(Fleet), publish: () => suite.env.client.invoke("ev_fleet", "traced", "publishAll", [["traced"]]) },
      ];
      for (const { open, publish } of watches) {
        const stream = await open();
        try {
          await context.with(caller, publish);
          const [event] = await take(stream, 1);
          assert.ok(event !== undefined);
          // The daemon's turn span when it exports traces, else the caller's span: the caller's trace either way.
          assert.equal(event.traceparent.split("-")[1], CALLER_SPAN.traceId, `${stream.actor}: ${event.traceparent}`);
          assert.equal(trace.getSpanContext(eventContext(event))?.traceId, CALLER_SPAN.traceId);
        } finally {
          stream.close();
        }
      }
    } finally {
      context.disable();
    }
  });
});
