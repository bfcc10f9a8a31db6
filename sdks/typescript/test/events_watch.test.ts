// Watching one actor's events (docs/events.md): `client.watch` on a fake server
// (when watch() resolves, what the stream does with a reader that falls behind
// and with the way the server ends it, and what the call carries, on the native
// core too, where grpc-js carries it), and on the real daemon, with a token too.
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { ContentType } from "../src/gen/troupe/v1/common.js";
import { type ActorEvent, App, Client, InvalidArgument, TroupeError, Unauthenticated, Unavailable } from "../src/index.js";
import { Bus, eventsSuite } from "./events_common.js";
import { endWith, fakeWatchSuite, take, values, WAIT_MS, wireEvent } from "./fake_watch.js";
import { type Daemon, quietLogger, startDaemon, within } from "./helpers.js";

/** Where a cursor is: `<16 hex epoch>-<decimal seq>`. */
function parseCursor(cursor: string): { epoch: string; seq: bigint } {
  const m = /^([0-9a-f]{16})-(\d+)$/.exec(cursor);
  assert.ok(m?.[1] !== undefined && m[2] !== undefined, `cursor ${JSON.stringify(cursor)} is not <16 hex>-<seq>`);
  return { epoch: m[1], seq: BigInt(m[2]) };
}

describe("client.watch on a fake server", () => {
  const fake = fakeWatchSuite({ token: "fake-token" });

  test("resolves once the server sent its headers; the request and the token are sent", async () => {
    let settled = false;
    const watching = fake.client.watch("bus", "b1", { after: "00000000000000ab-7" }).finally(() => {
      settled = true;
    });
    const { rpc, call, cancelled } = await fake.server.next();
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
    const watching = fake.client.watch("bus", "b2", { after: "zz" });
    const { call } = await fake.server.next();
    endWith(call, grpc.status.INVALID_ARGUMENT, "malformed cursor");
    await assert.rejects(watching, (e: unknown) => e instanceof InvalidArgument && /watch bus\/b2: malformed cursor/.test(e.message));
  });

  test("a reader that falls behind gets every event, in order, then the error that ended the watch", async () => {
    const watching = fake.client.watch("bus", "b3");
    const { call } = await fake.server.next();
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
    const watching = fake.client.watch("bus", "b4");
    const { call } = await fake.server.next();
    call.sendMetadata(new grpc.Metadata());
    const stream = await watching;
    call.write(wireEvent("last", 1));
    call.end();
    const seen: unknown[] = [];
    for await (const e of stream) seen.push(e.value);
    assert.deepEqual(seen, ["last"]);
  });

  test("an event that is not JSON ends the watch with an error naming its cursor", async () => {
    const watching = fake.client.watch("bus", "b5");
    const { call, cancelled } = await fake.server.next();
    call.sendMetadata(new grpc.Metadata());
    const stream = await watching;
    call.write({ ...wireEvent(null, 3), payload: { data: Buffer.from("{nope"), contentType: ContentType.CONTENT_TYPE_JSON } });
    await assert.rejects(within(WAIT_MS, "the bad event", stream.next()), (e: unknown) => e instanceof TroupeError && /00000000000000ab-3" is not JSON/.test(e.message));
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });

  test("closing the client before the headers rejects watch()", async () => {
    const own = new Client({ address: fake.server.address });
    const watching = own.watch("bus", "b6");
    const { cancelled } = await fake.server.next();
    own.close();
    await assert.rejects(watching, (e: unknown) => e instanceof TroupeError && /the client was closed/.test(e.message));
    await within(WAIT_MS, "the server to see the client leave", cancelled);
  });
});

describe("client.watch on the daemon", () => {
  const suite = eventsSuite(Bus);

  test("events of several turns, several each, arrive in order with increasing cursors", async () => {
    const { id, call } = suite.bus();
    const stream = await suite.env.client.watch("ev_bus", id);
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
    const { id, call } = suite.bus();
    const stream = await suite.env.client.watch(Bus, id);
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

  test("resume: a watch after a cursor gets exactly the events published since", async () => {
    const { id, call } = suite.bus();
    const first = await suite.env.client.watch("ev_bus", id);
    await call("publishAll", ["a"]);
    const [a] = await take(first, 1);
    assert.ok(a !== undefined);
    first.close();
    assert.deepEqual(await within(WAIT_MS, "the closed watch to end", first.next()), { value: undefined, done: true });
    await call("publishAll", ["b", "c"]);
    const again = await suite.env.client.watch("ev_bus", id, { after: a.cursor });
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
    const { id, call } = suite.bus();
    await assert.rejects(suite.env.client.watch("ev_bus", id, { after: "zz" }), InvalidArgument);
    const probe = await suite.env.client.watch("ev_bus", id);
    await call("publishAll", ["first"]);
    const [known] = await take(probe, 1);
    probe.close();
    assert.ok(known !== undefined);
    const { epoch, seq } = parseCursor(known.cursor);
    // Another epoch: the cursor of an earlier incarnation of the actor's stream.
    const other = (BigInt(`0x${epoch}`) ^ 0xffffn).toString(16).padStart(16, "0");
    const stream = await suite.env.client.watch("ev_bus", id, { after: `${other}-${String(seq)}` });
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

  test("typed values; bytes arrive as a Uint8Array", async () => {
    const { id, call } = suite.bus();
    const stream = await suite.env.client.watch<{ n: number } | Uint8Array>("ev_bus", id);
    try {
      await call("publishAll", [{ n: 1 }]);
      await suite.env.client.invoke("ev_bus", id, "publishBytes", ["raw"]);
      const [json, bytes] = values(await take(stream, 2));
      assert.deepEqual(json, { n: 1 });
      assert.ok(bytes instanceof Uint8Array);
      assert.equal(new TextDecoder().decode(bytes), "raw");
    } finally {
      stream.close();
    }
  });

  test("break ends the watch; an aborted signal or a closed client ends it too", async () => {
    const { id, call } = suite.bus();
    const stream = await suite.env.client.watch("ev_bus", id);
    await call("publishAll", [1, 2]);
    const seen: unknown[] = [];
    for await (const e of stream) {
      seen.push(e.value);
      if (seen.length === 2) break;
    }
    assert.deepEqual(seen, [1, 2]);
    assert.equal(stream.ended, true);

    const abort = new AbortController();
    const aborted = await suite.env.client.watch("ev_bus", id, { signal: abort.signal });
    const read = aborted.next();
    abort.abort();
    await assert.rejects(within(WAIT_MS, "the aborted watch", read), { name: "AbortError" });
    assert.deepEqual(await aborted.next(), { value: undefined, done: true });
    await assert.rejects(suite.env.client.watch("ev_bus", id, { signal: AbortSignal.abort() }), { name: "AbortError" });

    const own = new Client({ address: suite.env.daemon.address });
    const watched = await own.watch("ev_bus", id);
    const waiting = watched.next();
    own.close();
    assert.deepEqual(await within(WAIT_MS, "the watch of a closed client", waiting), { value: undefined, done: true });
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
