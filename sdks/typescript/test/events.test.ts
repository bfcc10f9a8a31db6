// Actor events (docs/events.md): what `ctx.publish` puts in TurnResult.events,
// on a fake daemon (through whichever core TROUPE_SDK_CORE picks, so the native
// core is seen to forward them), and the whole round trip with `client.watch`
// and `client.watchType` on the real daemon.
import * as grpc from "@grpc/grpc-js";
import { context, type SpanContext, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { AppMessage, DaemonMessage, Turn, TurnResult } from "../src/gen/troupe/v1/app.js";
import { ActorClientService } from "../src/gen/troupe/v1/client.js";
import { ContentType, TurnKind } from "../src/gen/troupe/v1/common.js";
import {
  Actor,
  actor,
  ActorError,
  type ActorEvent,
  App,
  Client,
  eventContext,
  InvalidArgument,
  method,
  NotFound,
  TroupeError,
  Unauthenticated,
  Unavailable,
} from "../src/index.js";
import { startTestEnv, type TestEnv } from "../src/testing.js";
import { attachedApp, FakeDaemon } from "./fake_daemon.js";
import { endWith, FakeWatchServer, take, values, WAIT_MS, wireEvent } from "./fake_watch.js";
import { bindLoopback, type Daemon, quietLogger, signal, startDaemon, troupeBin, within } from "./helpers.js";

const HOOK_ERROR = /events can only be published from a turn/;

/** The span of a call that publishes, as a caller's trace would have it. */
const CALLER_SPAN: SpanContext = {
  traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "00f067aa0ba902b7",
  traceFlags: TraceFlags.SAMPLED,
  isRemote: true,
};

/** Where a cursor is: `<16 hex epoch>-<decimal seq>`. */
function parseCursor(cursor: string): { epoch: string; seq: bigint } {
  const m = /^([0-9a-f]{16})-(\d+)$/.exec(cursor);
  assert.ok(m?.[1] !== undefined && m[2] !== undefined, `cursor ${JSON.stringify(cursor)} is not <16 hex>-<seq>`);
  return { epoch: m[1], seq: BigInt(m[2]) };
}

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
// The watching client on a fake server: when watch() resolves, what the stream
// does with a reader that falls behind and with the way the server ends it, and
// what the call carries (on the native core too, where grpc-js carries it).

describe("client.watch on a fake server", () => {
  const server = new FakeWatchServer();
  let client: Client;

  before(async () => {
    await server.start();
    client = new Client({ address: server.address, token: "fake-token" });
  });

  after(() => {
    client.close();
    server.stop();
  });

  test("resolves once the server sent its headers; the request and the token are sent", async () => {
    let settled = false;
    const watching = client.watch("bus", "b1", { after: "00000000000000ab-7" }).finally(() => {
      settled = true;
    });
    const { rpc, call, cancelled } = await server.next();
    assert.equal(rpc, "watch");
    assert.deepEqual(call.request, { actor: { type: "bus", id: "b1" }, after: "00000000000000ab-7" });
    assert.deepEqual(call.metadata.get("authorization"), ["Bearer fake-token"]);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(settled, false, "watch() resolved before the headers");
    call.sendMetadata(new grpc.Metadata());
    const stream = await within(WAIT_MS, "watch() after the headers", watching);
    assert.equal(stream.actor, "bus/b1");
    // A daemon that names no actor: the event is the watched actor's.
    call.write(wireEvent({ n: 1 }, 8, true));
    call.write(wireEvent({ n: 2 }, 9, false, { type: "bus", id: "b1" }));
    const [event, named] = await take(stream, 2);
    const untraced = { traceparent: "", tracestate: "" };
    assert.deepEqual(event, { value: { n: 1 }, actorType: "bus", actorId: "b1", cursor: "00000000000000ab-8", missedBefore: true, publishedAtUnixMs: 1_700_000_000_008, ...untraced });
    assert.deepEqual(named, { value: { n: 2 }, actorType: "bus", actorId: "b1", cursor: "00000000000000ab-9", missedBefore: false, publishedAtUnixMs: 1_700_000_000_009, ...untraced });
    stream.close();
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });

  test("a refusal before the headers rejects watch() with the SDK's error", async () => {
    const watching = client.watch("bus", "b2", { after: "zz" });
    const { call } = await server.next();
    endWith(call, grpc.status.INVALID_ARGUMENT, "malformed cursor");
    await assert.rejects(watching, (e: unknown) => e instanceof InvalidArgument && /watch bus\/b2: malformed cursor/.test(e.message));
  });

  test("a reader that falls behind gets every event, in order, then the error that ended the watch", async () => {
    const watching = client.watch("bus", "b3");
    const { call } = await server.next();
    call.sendMetadata(new grpc.Metadata());
    const stream = await watching;
    const total = 500;
    for (let i = 1; i <= total; i++) call.write(wireEvent(i, i));
    endWith(call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    const got = await take(stream, total);
    assert.deepEqual(
      values(got),
      Array.from({ length: total }, (_, i) => i + 1),
    );
    await assert.rejects(within(WAIT_MS, "the end of the watch", stream.next()), (e: unknown) => e instanceof Unavailable && /shutting down/.test(e.message));
    assert.deepEqual(await stream.next(), { value: undefined, done: true });
  });

  test("a watch the server ends plainly ends the iteration", async () => {
    const watching = client.watch("bus", "b4");
    const { call } = await server.next();
    call.sendMetadata(new grpc.Metadata());
    const stream = await watching;
    call.write(wireEvent("last", 1));
    call.end();
    const seen: unknown[] = [];
    for await (const e of stream) seen.push(e.value);
    assert.deepEqual(seen, ["last"]);
  });

  test("an event that is not JSON ends the watch with an error naming its cursor", async () => {
    const watching = client.watch("bus", "b5");
    const { call, cancelled } = await server.next();
    call.sendMetadata(new grpc.Metadata());
    const stream = await watching;
    call.write({ ...wireEvent(null, 3), payload: { data: Buffer.from("{nope"), contentType: ContentType.CONTENT_TYPE_JSON } });
    await assert.rejects(within(WAIT_MS, "the bad event", stream.next()), (e: unknown) => e instanceof TroupeError && /00000000000000ab-3" is not JSON/.test(e.message));
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });

  test("watchType sends its request and resolves once the server sent its headers; each event names its actor", async () => {
    let settled = false;
    const watching = client.watchType<{ n: number }>("bus", { after: "00000000000000ab-7.00000000000000cd-2" }).finally(() => {
      settled = true;
    });
    const { rpc, call, cancelled } = await server.next();
    assert.equal(rpc, "watchType");
    assert.deepEqual(call.request, { type: "bus", after: "00000000000000ab-7.00000000000000cd-2", idPrefix: "" });
    assert.deepEqual(call.metadata.get("authorization"), ["Bearer fake-token"]);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(settled, false, "watchType() resolved before the headers");
    call.sendMetadata(new grpc.Metadata());
    const stream = await within(WAIT_MS, "watchType() after the headers", watching);
    assert.equal(stream.actor, "bus");
    call.write(wireEvent({ n: 1 }, 1, false, { type: "bus", id: "b1" }));
    call.write(wireEvent({ n: 2 }, 2, true, { type: "bus", id: "b2" }));
    const events = await take(stream, 2);
    assert.deepEqual(events, [
      { value: { n: 1 }, actorType: "bus", actorId: "b1", cursor: "00000000000000ab-1", missedBefore: false, publishedAtUnixMs: 1_700_000_000_001, traceparent: "", tracestate: "" },
      { value: { n: 2 }, actorType: "bus", actorId: "b2", cursor: "00000000000000ab-2", missedBefore: true, publishedAtUnixMs: 1_700_000_000_002, traceparent: "", tracestate: "" },
    ]);
    // An event of a type watch that names no actor cannot be placed: the watch ends saying so.
    call.write(wireEvent({ n: 3 }, 3));
    await assert.rejects(
      within(WAIT_MS, "the event without an actor", stream.next()),
      (e: unknown) => e instanceof TroupeError && /watchType bus: .*"00000000000000ab-3" without the actor that published it/.test(e.message),
    );
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });

  test("an event carries the trace context of the turn that published it; eventContext continues it", async () => {
    const traceparent = `00-${CALLER_SPAN.traceId}-${CALLER_SPAN.spanId}-01`;
    const watching = client.watch("bus", "b9");
    const { call, cancelled } = await server.next();
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

  test("watchType: a refusal before the headers rejects with the SDK's error", async () => {
    const watching = client.watchType("bus", { after: "zz" });
    const { call } = await server.next();
    endWith(call, grpc.status.INVALID_ARGUMENT, "malformed cursor");
    await assert.rejects(watching, (e: unknown) => e instanceof InvalidArgument && /watchType bus: malformed cursor/.test(e.message));
  });

  test("watchType on a server without WatchType says the daemon must be upgraded", async () => {
    const bare = new grpc.Server();
    bare.addService(ActorClientService, {});
    const port = await bindLoopback(bare);
    const own = new Client({ address: `127.0.0.1:${String(port)}` });
    try {
      await assert.rejects(
        within(WAIT_MS, "watchType() on a server without it", own.watchType("bus")),
        (e: unknown) => e instanceof TroupeError && e.code === grpc.status.UNIMPLEMENTED && /no WatchType: run a daemon of the same version/.test(e.message),
      );
    } finally {
      own.close();
      bare.forceShutdown();
    }
  });

  test("closing the client before the headers rejects watch()", async () => {
    const own = new Client({ address: server.address });
    const watching = own.watch("bus", "b6");
    const { cancelled } = await server.next();
    own.close();
    await assert.rejects(watching, (e: unknown) => e instanceof TroupeError && /the client was closed/.test(e.message));
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });
});

// ---------------------------------------------------------------------------
// The round trip on the real daemon.

@actor("ev_bus", { idleTimeout: "30d" })
class Bus extends Actor {
  @method
  publishAll(values: unknown[]): void {
    for (const v of values) this.ctx.publish(v);
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

  /** Events are no state: a read-only method publishes too. */
  @method({ readonly: true })
  peek(tag: string): void {
    this.ctx.publish(tag);
  }

  @method
  async schedule(): Promise<void> {
    await this.ctx.setReminder("r", { due: "1m" });
    await this.ctx.setTimer("t", { due: "2m" });
    await this.ctx.setAlarm("3m", { data: "a" });
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

/** Watched as a type: only the watchType tests publish from it, so a type watch sees only theirs. */
@actor("ev_fleet", { idleTimeout: "30d" })
class Fleet extends Actor {
  @method
  publishAll(values: unknown[]): void {
    for (const v of values) this.ctx.publish(v);
  }
}

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

describe("client.watch and client.watchType on the daemon", () => {
  // The daemon's start-up grace, during which a new watch of a type no app
  // registered waits for one instead of being refused (the default is 10 s).
  const HOST_WAIT_MS = 200;
  let env: TestEnv;
  let servingSince = 0;
  let n = 0;
  const bus = (): { id: string; call: (m: "publishAll" | "publishThenFail", values: unknown[]) => Promise<unknown> } => {
    n += 1;
    const id = `bus${String(n)}`;
    return { id, call: (m, vals) => env.client.invoke("ev_bus", id, m, [vals]) };
  };

  before(async () => {
    env = await startTestEnv({ binary: troupeBin(), extraArgs: ["--host-wait", `${String(HOST_WAIT_MS)}ms`] });
    servingSince = performance.now();
    await env.host(Bus, Hook, Fleet);
  });

  after(async () => {
    await env.close();
  });

  test("events of several turns, several each, arrive in order with increasing cursors", async () => {
    const { id, call } = bus();
    const stream = await env.client.watch("ev_bus", id);
    try {
      await call("publishAll", [1, 2]);
      await call("publishAll", ["three"]);
      await call("publishAll", [{ four: [4] }, null]);
      const events = await take(stream, 5);
      assert.deepEqual(values(events), [1, 2, "three", { four: [4] }, null]);
      const cursors = events.map((e) => parseCursor(e.cursor));
      for (const [i, c] of cursors.entries()) {
        const prev = cursors[i - 1];
        if (prev === undefined) continue;
        assert.equal(c.epoch, prev.epoch);
        assert.ok(c.seq > prev.seq, `cursor ${events[i]?.cursor ?? ""} after ${events[i - 1]?.cursor ?? ""}`);
      }
      assert.ok(events.every((e) => !e.missedBefore));
      const times = events.map((e) => e.publishedAtUnixMs);
      assert.ok(times.every((t, i) => t > 0 && t >= (times[i - 1] ?? 0)), `published at ${times.join(", ")}`);
    } finally {
      stream.close();
    }
  });

  test("each event of a one-actor watch names that actor", async () => {
    const { id, call } = bus();
    const stream = await env.client.watch(Bus, id);
    try {
      await call("publishAll", ["x", "y"]);
      const events = await take(stream, 2);
      assert.deepEqual(
        events.map((e) => [e.actorType, e.actorId, e.value]),
        [
          ["ev_bus", id, "x"],
          ["ev_bus", id, "y"],
        ],
      );
    } finally {
      stream.close();
    }
  });

  test("a watched event carries the trace of the call that published it, in a one-actor and a type watch", async () => {
    // The API follows the active context across awaits only with a context manager.
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    try {
      const caller = trace.setSpanContext(context.active(), CALLER_SPAN);
      const { id, call } = bus();
      const watches = [
        { open: () => env.client.watch(Bus, id), publish: () => call("publishAll", ["traced"]) },
        { open: () => env.client.watchType(Fleet), publish: () => env.client.invoke("ev_fleet", "traced", "publishAll", [["traced"]]) },
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

  test("a turn that publishes then throws delivers nothing; the next one's events arrive", async () => {
    const { id, call } = bus();
    const stream = await env.client.watch("ev_bus", id);
    try {
      await assert.rejects(call("publishThenFail", ["lost1", "lost2"]), (e: unknown) => e instanceof ActorError && /fails after publishing/.test(e.message));
      await call("publishAll", ["kept"]);
      // Had the failed turn's events been sent, they would come first.
      assert.deepEqual(values(await take(stream, 1)), ["kept"]);
    } finally {
      stream.close();
    }
  });

  test("resume: a watch after a cursor gets exactly the events published since", async () => {
    const { id, call } = bus();
    const first = await env.client.watch("ev_bus", id);
    await call("publishAll", ["a"]);
    const [a] = await take(first, 1);
    assert.ok(a !== undefined);
    first.close();
    assert.deepEqual(await within(WAIT_MS, "the closed watch to end", first.next()), { value: undefined, done: true });
    await call("publishAll", ["b", "c"]);
    const again = await env.client.watch("ev_bus", id, { after: a.cursor });
    try {
      const resumed = await take(again, 2);
      assert.deepEqual(values(resumed), ["b", "c"]);
      assert.ok(resumed.every((e) => !e.missedBefore));
      // Then on live.
      await call("publishAll", ["d"]);
      assert.deepEqual(values(await take(again, 1)), ["d"]);
    } finally {
      again.close();
    }
  });

  test("a malformed cursor is InvalidArgument; an unknown one marks the first event missedBefore", async () => {
    const { id, call } = bus();
    await assert.rejects(env.client.watch("ev_bus", id, { after: "zz" }), InvalidArgument);
    const probe = await env.client.watch("ev_bus", id);
    await call("publishAll", ["first"]);
    const [known] = await take(probe, 1);
    probe.close();
    assert.ok(known !== undefined);
    const { epoch, seq } = parseCursor(known.cursor);
    // Another epoch: the cursor of an earlier incarnation of the actor's stream.
    const other = (BigInt(`0x${epoch}`) ^ 0xffffn).toString(16).padStart(16, "0");
    const stream = await env.client.watch("ev_bus", id, { after: `${other}-${String(seq)}` });
    try {
      await call("publishAll", ["x"]);
      const events: ActorEvent[] = await take(stream, 1);
      assert.equal(events[0]?.missedBefore, true, JSON.stringify(events[0]));
      // What the daemon still held may come first; "x" follows.
      while (events.at(-1)?.value !== "x") events.push(...(await take(stream, 1)));
      assert.deepEqual(
        values(events).filter((v) => v !== "first"),
        ["x"],
      );
    } finally {
      stream.close();
    }
  });

  test("reminders, timers and the alarm publish", async () => {
    const { id } = bus();
    const stream = await env.client.watch(Bus, id);
    try {
      await env.client.invoke("ev_bus", id, "schedule");
      await env.advance("4m");
      assert.deepEqual(values(await take(stream, 3)), [{ reminder: "r" }, { timer: "t" }, { alarm: "a" }]);
    } finally {
      stream.close();
    }
  });

  test("typed values; bytes arrive as a Uint8Array", async () => {
    const { id, call } = bus();
    const stream = await env.client.watch<{ n: number } | Uint8Array>("ev_bus", id);
    try {
      await call("publishAll", [{ n: 1 }]);
      await env.client.invoke("ev_bus", id, "publishBytes", ["raw"]);
      const [json, bytes] = values(await take(stream, 2));
      assert.deepEqual(json, { n: 1 });
      assert.ok(bytes instanceof Uint8Array);
      assert.equal(new TextDecoder().decode(bytes), "raw");
    } finally {
      stream.close();
    }
  });

  test("a read-only method publishes", async () => {
    const { id } = bus();
    const stream = await env.client.watch(Bus, id);
    try {
      await env.client.invoke("ev_bus", id, "peek", ["looked"]);
      assert.deepEqual(values(await take(stream, 1)), ["looked"]);
    } finally {
      stream.close();
    }
  });

  test("publishing from onActivate fails the activation visibly", async () => {
    await assert.rejects(
      env.client.invoke("ev_hook", "h1", "ping"),
      (e: unknown) => e instanceof ActorError && e.remoteType === "TroupeError" && HOOK_ERROR.test(e.message) && /ev_hook\/h1 .* from onActivate/.test(e.message),
    );
  });

  test("break ends the watch; an aborted signal or a closed client ends it too", async () => {
    const { id, call } = bus();
    const stream = await env.client.watch("ev_bus", id);
    await call("publishAll", [1, 2]);
    const seen: unknown[] = [];
    for await (const e of stream) {
      seen.push(e.value);
      if (seen.length === 2) break;
    }
    assert.deepEqual(seen, [1, 2]);
    assert.equal(stream.ended, true);

    const abort = new AbortController();
    const aborted = await env.client.watch("ev_bus", id, { signal: abort.signal });
    const read = aborted.next();
    abort.abort();
    await assert.rejects(within(WAIT_MS, "the aborted watch", read), { name: "AbortError" });
    assert.deepEqual(await aborted.next(), { value: undefined, done: true });
    await assert.rejects(env.client.watch("ev_bus", id, { signal: AbortSignal.abort() }), { name: "AbortError" });

    const own = new Client({ address: env.daemon.address });
    const watched = await own.watch("ev_bus", id);
    const waiting = watched.next();
    own.close();
    assert.deepEqual(await within(WAIT_MS, "the watch of a closed client", waiting), { value: undefined, done: true });
  });

  describe("watchType", () => {
    let fleetN = 0;
    const fleetId = (): string => {
      fleetN += 1;
      return `f${String(fleetN)}`;
    };
    const publish = async (id: string, vals: unknown[]): Promise<void> => {
      await env.client.invoke("ev_fleet", id, "publishAll", [vals]);
    };
    /** [actorId, value] of each event, sorted: the order between different actors is not fixed. */
    const placed = (events: readonly ActorEvent[]): [string, unknown][] =>
      events.map((e): [string, unknown] => [e.actorId, e.value]).sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)));

    test("gets every actor's events, each naming its actor, each actor's in the order published", async () => {
      const [a, b] = [fleetId(), fleetId()];
      const stream = await env.client.watchType<string>(Fleet);
      try {
        assert.equal(stream.actor, "ev_fleet");
        // The two actors publish at once, so their events may interleave.
        await Promise.all(
          [a, b].map(async (id) => {
            for (const n of [1, 2, 3]) await publish(id, [`${id}:${String(n)}`]);
          }),
        );
        await publish(a, [`${a}:4`, `${a}:5`]);
        const events = await take(stream, 8);
        assert.ok(
          events.every((e) => e.actorType === "ev_fleet"),
          JSON.stringify(events),
        );
        const byActor = new Map<string, string[]>();
        for (const e of events) byActor.set(e.actorId, [...(byActor.get(e.actorId) ?? []), e.value]);
        assert.deepEqual(
          Object.fromEntries(byActor),
          {
            [a]: [`${a}:1`, `${a}:2`, `${a}:3`, `${a}:4`, `${a}:5`],
            [b]: [`${b}:1`, `${b}:2`, `${b}:3`],
          },
        );
        assert.ok(events.every((e) => !e.missedBefore && e.cursor !== "" && e.publishedAtUnixMs > 0));
      } finally {
        stream.close();
      }
    });

    test("resume: a type watch after a cursor gets exactly the events published since, then goes on live", async () => {
      const [a, b] = [fleetId(), fleetId()];
      const first = await env.client.watchType(Fleet);
      await publish(a, ["r1"]);
      const [r1] = await take(first, 1);
      assert.ok(r1 !== undefined);
      first.close();
      assert.deepEqual(await within(WAIT_MS, "the closed type watch to end", first.next()), { value: undefined, done: true });
      await publish(b, ["r2"]);
      await publish(a, ["r3"]);
      const again = await env.client.watchType(Fleet, { after: r1.cursor });
      try {
        const resumed = await take(again, 2);
        assert.deepEqual(placed(resumed), [
          [a, "r3"],
          [b, "r2"],
        ]);
        assert.ok(resumed.every((e) => !e.missedBefore));
        await publish(b, ["r4"]);
        assert.deepEqual(placed(await take(again, 1)), [[b, "r4"]]);
      } finally {
        again.close();
      }
    });

    test("an idPrefix keeps to the actors whose id starts with it, resumed too", async () => {
      const tenant = `t${String(fleetN)}/`;
      fleetN += 1;
      const [mine, other] = [`${tenant}a`, `x${tenant}b`];
      const stream = await env.client.watchType<string>(Fleet, { idPrefix: tenant });
      let firstCursor = "";
      try {
        await publish(mine, ["m1"]);
        await publish(other, ["o1"]);
        await publish(mine, ["m2"]);
        const events = await take(stream, 2);
        assert.deepEqual(
          events.map((e) => [e.actorId, e.value]),
          [
            [mine, "m1"],
            [mine, "m2"],
          ],
        );
        firstCursor = events[0]?.cursor ?? "";
      } finally {
        stream.close();
      }
      const again = await env.client.watchType<string>(Fleet, { after: firstCursor, idPrefix: tenant });
      try {
        assert.deepEqual(
          (await take(again, 1)).map((e) => e.value),
          ["m2"],
        );
      } finally {
        again.close();
      }
    });

    test("a malformed cursor, an empty type or an idPrefix longer than any id is InvalidArgument", async () => {
      await assert.rejects(env.client.watchType(Fleet, { after: "zz" }), (e: unknown) => e instanceof InvalidArgument && /watchType ev_fleet: /.test(e.message));
      await assert.rejects(env.client.watchType(""), InvalidArgument);
      await assert.rejects(
        env.client.watchType(Fleet, { idPrefix: "p".repeat(300) }),
        (e: unknown) => e instanceof InvalidArgument && /watchType ev_fleet idPrefix="p{64}": .*id prefix/.test(e.message),
      );
    });

    test("a type no app registered is NotFound", async () => {
      const graceLeft = servingSince + HOST_WAIT_MS + 50 - performance.now();
      if (graceLeft > 0) await new Promise((resolve) => setTimeout(resolve, graceLeft));
      await assert.rejects(env.client.watchType("ev_nobody"), (e: unknown) => e instanceof NotFound && /watchType ev_nobody: /.test(e.message));
    });

    test("an aborted signal ends a type watch; so does closing the client", async () => {
      const abort = new AbortController();
      const stream = await env.client.watchType(Fleet, { signal: abort.signal });
      const read = stream.next();
      abort.abort();
      await assert.rejects(within(WAIT_MS, "the aborted type watch", read), { name: "AbortError" });
      assert.equal(stream.ended, true);
      assert.deepEqual(await stream.next(), { value: undefined, done: true });
      await assert.rejects(env.client.watchType(Fleet, { signal: AbortSignal.abort() }), { name: "AbortError" });

      const own = new Client({ address: env.daemon.address });
      const watched = await own.watchType(Fleet);
      const waiting = watched.next();
      own.close();
      assert.deepEqual(await within(WAIT_MS, "the type watch of a closed client", waiting), { value: undefined, done: true });
    });
  });
});

describe("client.watch with tokens", () => {
  const API_TOKEN = "api-events-secret";
  const APP_TOKEN = "app-events-secret";
  let daemon: Daemon;
  let app: App;

  before(async () => {
    daemon = await startDaemon([], { TROUPE_API_TOKEN: API_TOKEN, TROUPE_APP_TOKEN: APP_TOKEN });
    app = new App({ actors: [Bus], address: daemon.address, appName: "events-auth", logger: quietLogger, token: APP_TOKEN });
    await app.start({ timeout: 15 });
  });

  after(async () => {
    await app.close();
    await daemon.dispose();
  });

  test("the watch sends the client's token, as its other calls do", async () => {
    const anonymous = new Client({ address: daemon.address });
    try {
      await assert.rejects(anonymous.watch("ev_bus", "t1"), Unauthenticated);
    } finally {
      anonymous.close();
    }
    const client = new Client({ address: daemon.address, token: API_TOKEN });
    try {
      const stream = await client.watch("ev_bus", "t1");
      await client.invoke("ev_bus", "t1", "publishAll", [["with token"]]);
      assert.deepEqual(values(await take(stream, 1)), ["with token"]);
      stream.close();
    } finally {
      client.close();
    }
  });
});

