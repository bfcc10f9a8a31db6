// Watches that reconnect by themselves (`{ reconnect: true }`, docs/events.md):
// on a fake server, what each re-open asks for and which errors end the watch
// anyway; with a test's clock, the waits between attempts and a close during
// one; on the real daemon, a watch and a type watch that go on across a restart.
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { openWatch, type WatchClock } from "../src/events.js";
import { ActorClientClient } from "../src/gen/troupe/v1/client.js";
import { Actor, actor, type ActorEvent, type ActorEventStream, Client, InvalidArgument, method, NotFound, TroupeError, Unauthenticated, Unavailable } from "../src/index.js";
import { endWith, type FakeWatch, FakeWatchServer, take, values, WAIT_MS, wireEvent } from "./fake_watch.js";
import { host, startDaemon, within } from "./helpers.js";

const DONE = { value: undefined, done: true };

/** How the next read of `stream` settles: its result, or what it threw. */
function settled<T>(stream: ActorEventStream<T>, what: string): Promise<IteratorResult<ActorEvent<T>> | Error> {
  return within(
    WAIT_MS,
    what,
    stream.next().then(
      (r) => r,
      (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
    ),
  );
}

/** What a read settled with, for an assertion's message. */
function shown(r: IteratorResult<unknown> | Error): string {
  return r instanceof Error ? `${r.name}: ${r.message}` : JSON.stringify(r);
}

// ---------------------------------------------------------------------------
// On a fake server, with the client's own timers.

describe("a reconnecting watch on a fake server", () => {
  const server = new FakeWatchServer();
  let client: Client;

  before(async () => {
    await server.start();
    client = new Client({ address: server.address });
  });

  after(() => {
    client.close();
    server.stop();
  });

  /** Opens a watch the server begins (it sends its headers). */
  async function begun<T>(watching: Promise<ActorEventStream<T>>): Promise<{ stream: ActorEventStream<T>; first: FakeWatch }> {
    const first = await server.next();
    first.call.sendMetadata(new grpc.Metadata());
    return { stream: await within(WAIT_MS, "the watch to begin", watching), first };
  }

  test("a stream that fails with UNAVAILABLE is opened again after the last event's cursor; an INVALID_ARGUMENT of a re-open is thrown", async () => {
    const { stream, first } = await begun(client.watch("bus", "r1", { reconnect: true }));
    first.call.write(wireEvent("a", 1));
    first.call.write(wireEvent("b", 2));
    endWith(first.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    assert.deepEqual(values(await take(stream, 2)), ["a", "b"]);

    const second = await server.next();
    assert.equal(second.rpc, "watch");
    assert.deepEqual(second.call.request, { actor: { type: "bus", id: "r1" }, after: "00000000000000ab-2" });
    second.call.sendMetadata(new grpc.Metadata());
    second.call.write(wireEvent("c", 3));
    // The daemon's missedBefore is passed on as it says.
    second.call.write(wireEvent("d", 4, true));
    assert.deepEqual(
      (await take(stream, 2)).map((e) => [e.value, e.missedBefore]),
      [
        ["c", false],
        ["d", true],
      ],
    );
    assert.equal(stream.ended, false);

    endWith(second.call, grpc.status.UNAVAILABLE, "Connection dropped");
    const third = await server.next();
    assert.deepEqual(third.call.request, { actor: { type: "bus", id: "r1" }, after: "00000000000000ab-4" });
    endWith(third.call, grpc.status.INVALID_ARGUMENT, "malformed cursor");
    const end = await settled(stream, "the refused re-open");
    assert.ok(end instanceof InvalidArgument && /watch bus\/r1: malformed cursor/.test(end.message), shown(end));
    assert.equal(stream.ended, true);
    assert.deepEqual(await stream.next(), DONE);
  });

  test("a reader that fell behind gets every event, in order, across a re-open", async () => {
    const { stream, first } = await begun(client.watch<number>("bus", "r2", { reconnect: true }));
    // More than the stream holds before it stops reading (events.ts: PAUSE_AT), unread when the call fails.
    for (let i = 1; i <= 100; i++) first.call.write(wireEvent(i, i));
    endWith(first.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    const second = await server.next();
    // The re-open resumes after the last event the stream took in (queued for
    // the reader). grpc-js passes a failure on at once, dropping the messages
    // it still held for a paused reader, so that may be before the 100th: the
    // server sends again what follows it.
    const { after: resumeAt } = second.call.request;
    const seq = resumeAt === "" ? 0 : Number(/^00000000000000ab-(\d+)$/.exec(resumeAt)?.[1]);
    assert.ok(Number.isInteger(seq) && seq <= 100, `the re-open resumes after ${JSON.stringify(resumeAt)}`);
    second.call.sendMetadata(new grpc.Metadata());
    for (let i = seq + 1; i <= 200; i++) second.call.write(wireEvent(i, i));
    assert.deepEqual(
      values(await take(stream, 200)),
      Array.from({ length: 200 }, (_, i) => i + 1),
    );
    stream.close();
    await within(WAIT_MS, "the server to see the client leave", second.cancelled);
  });

  test("watchType: a stream the daemon ends is opened again with its idPrefix and the after it was given", async () => {
    const after = "00000000000000ab-5.00000000000000cd-2";
    const { stream, first } = await begun(client.watchType<string>("bus", { reconnect: true, idPrefix: "t1/", after }));
    assert.equal(first.rpc, "watchType");
    first.call.end(); // a daemon that shut down, plainly
    const second = await server.next();
    assert.equal(second.rpc, "watchType");
    assert.deepEqual(second.call.request, { type: "bus", after, idPrefix: "t1/" });
    second.call.sendMetadata(new grpc.Metadata());
    second.call.write(wireEvent("x", 6, false, { type: "bus", id: "t1/a" }));
    const [x] = await take(stream, 1);
    // It had a cursor: whether events were missed is the daemon's to say.
    assert.deepEqual([x?.actorId, x?.value, x?.missedBefore], ["t1/a", "x", false]);
    second.call.end();
    const third = await server.next();
    assert.deepEqual(third.call.request, { type: "bus", after: "00000000000000ab-6", idPrefix: "t1/" });
    stream.close();
    await within(WAIT_MS, "the server to see the client leave", third.cancelled);
  });

  test("a watch with no cursor yet re-opens from then on and marks its next event missedBefore", async () => {
    const { stream, first } = await begun(client.watch<string>("bus", "r3", { reconnect: true }));
    endWith(first.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    const second = await server.next();
    assert.deepEqual(second.call.request, { actor: { type: "bus", id: "r3" }, after: "" });
    // Refused before it began: still no cursor, still marked.
    endWith(second.call, grpc.status.UNAVAILABLE, "Connection refused");
    const third = await server.next();
    assert.deepEqual(third.call.request, { actor: { type: "bus", id: "r3" }, after: "" });
    third.call.sendMetadata(new grpc.Metadata());
    third.call.write(wireEvent("e1", 1));
    third.call.write(wireEvent("e2", 2));
    assert.deepEqual(
      (await take(stream, 2)).map((e) => [e.value, e.missedBefore]),
      [
        ["e1", true],
        ["e2", false],
      ],
    );
    stream.close();
    await within(WAIT_MS, "the server to see the client leave", third.cancelled);
  });

  test("other errors of a watch under way are thrown, not retried", async () => {
    const { stream, first } = await begun(client.watch<string>("bus", "r4", { reconnect: true }));
    first.call.write(wireEvent("last", 1));
    endWith(first.call, grpc.status.NOT_FOUND, "the actor type bus is not registered");
    assert.deepEqual(values(await take(stream, 1)), ["last"]);
    const end = await settled(stream, "the end of the watch");
    assert.ok(end instanceof NotFound && /watch bus\/r4: the actor type bus is not registered/.test(end.message), shown(end));
    assert.equal(stream.ended, true);

    // A re-open's refusal too (a token the restarted daemon no longer accepts).
    const typeWatch = await begun(client.watchType("bus", { reconnect: true }));
    endWith(typeWatch.first.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    endWith((await server.next()).call, grpc.status.UNAUTHENTICATED, "a client API token is required");
    const refused = await settled(typeWatch.stream, "the refused re-open of a type watch");
    assert.ok(refused instanceof Unauthenticated, shown(refused));
  });

  test("the first open is not retried: watch() rejects as without reconnect", async () => {
    const watching = client.watch("bus", "r5", { reconnect: true });
    endWith((await server.next()).call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    await assert.rejects(within(WAIT_MS, "watch()", watching), Unavailable);
    const plainEnd = client.watchType("bus", { reconnect: true });
    (await server.next()).call.end();
    await assert.rejects(within(WAIT_MS, "watchType()", plainEnd), (e: unknown) => e instanceof TroupeError && /ended the watch before it began/.test(e.message));
  });

  test("reconnect must be a boolean", async () => {
    const bad = { reconnect: "yes" } as unknown as { reconnect: boolean };
    await assert.rejects(client.watch("bus", "r6", bad), (e: unknown) => e instanceof TypeError && /watch bus\/r6: reconnect must be true or false/.test(e.message));
    await assert.rejects(client.watchType("bus", bad), TypeError);
  });
});

// ---------------------------------------------------------------------------
// The waits between attempts, on a clock the test runs.

interface Wait {
  ms: number;
  fire: () => void;
  cancelled: boolean;
}

/** A WatchClock whose waits end only when the test fires them. */
class TestClock implements WatchClock {
  /** What random() returns. */
  draw = 0;
  readonly #waits: Wait[] = [];
  readonly #waiting: ((w: Wait) => void)[] = [];

  after(ms: number, callback: () => void): () => void {
    const wait: Wait = { ms, fire: callback, cancelled: false };
    const waiter = this.#waiting.shift();
    if (waiter === undefined) this.#waits.push(wait);
    else waiter(wait);
    return () => {
      wait.cancelled = true;
    };
  }

  random(): number {
    return this.draw;
  }

  /** What now() returns first, and how much later each next call says it is. */
  nowMs = 0;
  step = 0;

  now(): number {
    const now = this.nowMs;
    this.nowMs += this.step;
    return now;
  }

  /** The next wait the watch begins. */
  next(): Promise<Wait> {
    const w = this.#waits.shift();
    if (w !== undefined) return Promise.resolve(w);
    return within(WAIT_MS, "the watch to wait before a re-open", new Promise<Wait>((resolve) => this.#waiting.push(resolve)));
  }
}

describe("a reconnecting watch's waits", () => {
  const server = new FakeWatchServer();
  let stub: ActorClientClient;

  before(async () => {
    await server.start();
    stub = new ActorClientClient(server.address, grpc.credentials.createInsecure());
  });

  after(() => {
    stub.close();
    server.stop();
  });

  /** A reconnecting watch of bus/`id` on `clock`, begun, whose stream then failed: it waits. */
  async function waiting(id: string, clock: TestClock, watches: Set<() => void>, signal?: AbortSignal): Promise<{ stream: ActorEventStream; wait: Wait; read: Promise<IteratorResult<ActorEvent>> }> {
    const opening = openWatch(stub, { type: "bus", id }, { reconnect: true, signal }, watches, clock);
    const first = await server.next();
    first.call.sendMetadata(new grpc.Metadata());
    const stream = await within(WAIT_MS, "the watch to begin", opening);
    const read = stream.next();
    endWith(first.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    return { stream, wait: await clock.next(), read };
  }

  test("100 ms doubling to 5 s, jittered by a factor in [0.5, 1]", async () => {
    const clock = new TestClock(); // random() 0: half of each step
    const { stream, wait } = await waiting("w1", clock, new Set());
    const waits = [wait.ms];
    let current = wait;
    // Each re-open is refused before it begins: the daemon is still down.
    while (waits.length < 8) {
      current.fire();
      endWith((await server.next()).call, grpc.status.UNAVAILABLE, "Connection refused");
      current = await clock.next();
      waits.push(current.ms);
    }
    assert.deepEqual(waits, [50, 100, 200, 400, 800, 1600, 2500, 2500]);
    stream.close();
    assert.equal(current.cancelled, true);
  });

  test("a re-open that began and broke at once keeps the wait doubling; an event, or a stream open 5 s, sets it back to 100 ms", async () => {
    const clock = new TestClock();
    clock.draw = 0.999;
    const { stream, wait, read } = await waiting("w2", clock, new Set());
    const about = (w: Wait, ms: number): void => {
      assert.ok(Math.abs(w.ms - ms) < 1e-9, `${w.ms} is not ${ms}`);
    };
    about(wait, 99.95);
    wait.fire();
    // The headers, then the status at once: the daemon answered, but does not
    // watch; the wait goes on doubling.
    const dropped = await server.next();
    dropped.call.sendMetadata(new grpc.Metadata());
    endWith(dropped.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    const longer = await clock.next();
    about(longer, 199.9);
    longer.fire();
    const heard = await server.next();
    heard.call.sendMetadata(new grpc.Metadata());
    heard.call.write(wireEvent("a", 1));
    const first = await within(WAIT_MS, "the event", read);
    assert.equal(first.done, false);
    endWith(heard.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    const afterEvent = await clock.next();
    about(afterEvent, 99.95);
    // No event, but the stream stayed open the longest wait (the clock says
    // 5 s passed between its headers and its end): the daemon watched.
    clock.step = 5000;
    afterEvent.fire();
    const lasted = await server.next();
    lasted.call.sendMetadata(new grpc.Metadata());
    endWith(lasted.call, grpc.status.UNAVAILABLE, "the daemon is shutting down");
    about(await clock.next(), 99.95);
    stream.close();
  });

  test("closing the watch while it waits ends it at once; so do an aborted signal and the client's close", async () => {
    const clock = new TestClock();
    const watches = new Set<() => void>();

    const closed = await waiting("c1", clock, watches);
    closed.stream.close();
    assert.equal(closed.wait.cancelled, true, "the wait was cancelled");
    assert.deepEqual(await within(WAIT_MS, "the read of the closed watch", closed.read), DONE);
    assert.equal(watches.size, 0);

    const abort = new AbortController();
    const aborted = await waiting("c2", clock, watches, abort.signal);
    abort.abort();
    assert.equal(aborted.wait.cancelled, true, "the wait was cancelled");
    await assert.rejects(within(WAIT_MS, "the read of the aborted watch", aborted.read), { name: "AbortError" });
    assert.equal(aborted.stream.ended, true);
    assert.equal(watches.size, 0);

    // The client's close() calls what the watch put in its set.
    const withClient = await waiting("c3", clock, watches);
    assert.equal(watches.size, 1);
    for (const end of [...watches]) end();
    assert.equal(withClient.wait.cancelled, true, "the wait was cancelled");
    assert.deepEqual(await within(WAIT_MS, "the read of the watch of a closed client", withClient.read), DONE);
    assert.equal(watches.size, 0);
  });
});

// ---------------------------------------------------------------------------
// On the real daemon, restarted on the same port and data dir.

@actor("rc_beacon", { idleTimeout: "30d" })
class Beacon extends Actor {
  @method
  publish(value: string): void {
    this.ctx.publish(value);
  }
}

/** A Watch or WatchType call this process opened, and whether the daemon began it (sent its headers). */
interface OpenedWatch {
  method: string;
  request: unknown;
  began: boolean;
}

/**
 * Records every Watch and WatchType the process opens (grpc-js's
 * makeServerStreamRequest), so that a test can await a re-open that began:
 * events published before it are not the watch's to see.
 */
class WatchSpy {
  readonly opened: OpenedWatch[] = [];
  /** grpc-js's Client.prototype, seen as a holder of the method replaced. */
  readonly #proto = grpc.Client.prototype as unknown as { makeServerStreamRequest: (...args: unknown[]) => unknown };
  readonly #original = this.#proto.makeServerStreamRequest;
  readonly #waiters: { match: (w: OpenedWatch) => boolean; resolve: (w: OpenedWatch) => void }[] = [];

  constructor() {
    const original = this.#original;
    const began = (w: OpenedWatch): void => {
      w.began = true;
      for (const waiter of [...this.#waiters]) {
        if (!waiter.match(w)) continue;
        this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
        waiter.resolve(w);
      }
    };
    const opened = this.opened;
    this.#proto.makeServerStreamRequest = function (this: unknown, ...args: unknown[]): unknown {
      const call = Reflect.apply(original, this, args) as grpc.ClientReadableStream<unknown>;
      const w: OpenedWatch = { method: String(args[0]), request: args[3], began: false };
      opened.push(w);
      call.once("metadata", () => {
        began(w);
      });
      return call;
    };
  }

  /** The first call from `from` on (an index into `opened`) of `rpc` that began. */
  began(rpc: "Watch" | "WatchType", from: number): Promise<OpenedWatch> {
    const match = (w: OpenedWatch): boolean => w.method === `/troupe.v1.ActorClient/${rpc}` && this.opened.indexOf(w) >= from;
    const found = this.opened.find((w) => w.began && match(w));
    if (found !== undefined) return Promise.resolve(found);
    return within(30_000, `a ${rpc} opened after the restart to begin`, new Promise<OpenedWatch>((resolve) => this.#waiters.push({ match, resolve })));
  }

  restore(): void {
    this.#proto.makeServerStreamRequest = this.#original;
  }
}

describe("a reconnecting watch on a restarted daemon", () => {
  test("watch and watchType go on across a daemon restart, the first event after it marked missedBefore; a plain watch ends", async () => {
    // A long start-up grace: a re-open that reaches the restarted daemon before
    // the app re-registered waits for it instead of being refused NOT_FOUND.
    const daemon = await startDaemon(["--host-wait", "10s"]);
    const client = new Client({ address: daemon.address, timeout: 20 });
    const app = await host(daemon.address, Beacon);
    const spy = new WatchSpy();
    try {
      const typeWatch = await client.watchType<string>(Beacon, { reconnect: true, idPrefix: "b" });
      const oneWatch = await client.watch<string>(Beacon, "b1", { reconnect: true });
      const plain = await client.watch<string>(Beacon, "b1");
      await client.invoke("rc_beacon", "b1", "publish", ["before"]);
      const [t1] = await take(typeWatch, 1);
      const [o1] = await take(oneWatch, 1);
      assert.deepEqual(values(await take(plain, 1)), ["before"]);
      assert.ok(t1 !== undefined && o1 !== undefined);
      assert.deepEqual([t1.value, t1.actorId, o1.value], ["before", "b1", "before"]);

      const sessions = app.sessions;
      const openedBefore = spy.opened.length;
      assert.equal(await daemon.stop(), 0, daemon.logTail());
      // Without reconnect, the watch ends as it did: Unavailable (the daemon
      // shutting down, or the connection gone), or a plain end.
      const end = await settled(plain, "the end of the plain watch");
      assert.ok(end instanceof Unavailable || (!(end instanceof Error) && end.done === true), shown(end));
      assert.equal(typeWatch.ended, false);
      assert.equal(oneWatch.ended, false);

      await daemon.start(); // same port, same data dir
      await app.waitRegistered({ sessions: sessions + 1, timeout: 15 });
      const typeAgain = await spy.began("WatchType", openedBefore);
      const oneAgain = await spy.began("Watch", openedBefore);
      assert.deepEqual(typeAgain.request, { type: "rc_beacon", after: t1.cursor, idPrefix: "b" });
      assert.deepEqual(oneAgain.request, { actor: { type: "rc_beacon", id: "b1" }, after: o1.cursor });

      await client.invoke("rc_beacon", "b1", "publish", ["after"]);
      const [t2] = await take(typeWatch, 1);
      const [o2] = await take(oneWatch, 1);
      // The restarted daemon's streams have new epochs: it cannot tell what was missed, and says so.
      assert.deepEqual([t2?.value, t2?.actorId, t2?.missedBefore], ["after", "b1", true]);
      assert.deepEqual([o2?.value, o2?.missedBefore], ["after", true]);
      typeWatch.close();
      oneWatch.close();
      assert.deepEqual(await typeWatch.next(), DONE);
    } finally {
      spy.restore();
      await app.close();
      client.close();
      await daemon.dispose();
    }
  });
});
