// Watching every actor of a type (docs/events.md): `client.watchType` on a fake
// server (its request, its refusals, a daemon without WatchType) and on the real
// daemon (every actor's events, resumed, of an id prefix, its errors).
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ActorClientService } from "../src/gen/troupe/v1/client.js";
import { type ActorEvent, Client, InvalidArgument, NotFound, TroupeError } from "../src/index.js";
import { eventsSuite, Fleet, HOST_WAIT_MS } from "./events_common.js";
import { endWith, fakeWatchSuite, take, WAIT_MS, wireEvent } from "./fake_watch.js";
import { bindLoopback, within } from "./helpers.js";

describe("client.watchType on a fake server", () => {
  const fake = fakeWatchSuite({ token: "fake-token" });

  test("watchType sends its request and resolves once the server sent its headers; each event names its actor", async () => {
    let settled = false;
    const watching = fake.client.watchType<{ n: number }>("bus", { after: "00000000000000ab-7.00000000000000cd-2" }).finally(() => {
      settled = true;
    });
    const { rpc, call, cancelled } = await fake.server.next();
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

  test("watchType: a refusal before the headers rejects with the SDK's error", async () => {
    const watching = fake.client.watchType("bus", { after: "zz" });
    const { call } = await fake.server.next();
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
});

describe("client.watchType on the daemon", () => {
  const suite = eventsSuite(Fleet);

  let fleetN = 0;
  const fleetId = (): string => {
    fleetN += 1;
    return `f${String(fleetN)}`;
  };
  const publish = async (id: string, vals: unknown[]): Promise<void> => {
    await suite.env.client.invoke("ev_fleet", id, "publishAll", [vals]);
  };
  /** [actorId, value] of each event, sorted: the order between different actors is not fixed. */
  const placed = (events: readonly ActorEvent[]): [string, unknown][] =>
    events.map((e): [string, unknown] => [e.actorId, e.value]).sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)));

  test("gets every actor's events, each naming its actor, each actor's in the order published", async () => {
    const [a, b] = [fleetId(), fleetId()];
    const stream = await suite.env.client.watchType<string>(Fleet);
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
    const first = await suite.env.client.watchType(Fleet);
    await publish(a, ["r1"]);
    const [r1] = await take(first, 1);
    assert.ok(r1 !== undefined);
    first.close();
    assert.deepEqual(await within(WAIT_MS, "the closed type watch to end", first.next()), { value: undefined, done: true });
    await publish(b, ["r2"]);
    await publish(a, ["r3"]);
    const again = await suite.env.client.watchType(Fleet, { after: r1.cursor });
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
    const stream = await suite.env.client.watchType<string>(Fleet, { idPrefix: tenant });
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
    const again = await suite.env.client.watchType<string>(Fleet, { after: firstCursor, idPrefix: tenant });
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
    await assert.rejects(suite.env.client.watchType(Fleet, { after: "zz" }), (e: unknown) => e instanceof InvalidArgument && /watchType ev_fleet: /.test(e.message));
    await assert.rejects(suite.env.client.watchType(""), InvalidArgument);
    await assert.rejects(
      suite.env.client.watchType(Fleet, { idPrefix: "p".repeat(300) }),
      (e: unknown) => e instanceof InvalidArgument && /watchType ev_fleet idPrefix="p{64}": .*id prefix/.test(e.message),
    );
  });

  test("a type no app registered is NotFound", async () => {
    const graceLeft = suite.servingSince + HOST_WAIT_MS + 50 - performance.now();
    if (graceLeft > 0) await new Promise((resolve) => setTimeout(resolve, graceLeft));
    await assert.rejects(suite.env.client.watchType("ev_nobody"), (e: unknown) => e instanceof NotFound && /watchType ev_nobody: /.test(e.message));
  });

  test("an aborted signal ends a type watch; so does closing the client", async () => {
    const abort = new AbortController();
    const stream = await suite.env.client.watchType(Fleet, { signal: abort.signal });
    const read = stream.next();
    abort.abort();
    await assert.rejects(within(WAIT_MS, "the aborted type watch", read), { name: "AbortError" });
    assert.equal(stream.ended, true);
    assert.deepEqual(await stream.next(), { value: undefined, done: true });
    await assert.rejects(suite.env.client.watchType(Fleet, { signal: AbortSignal.abort() }), { name: "AbortError" });

    const own = new Client({ address: suite.env.daemon.address });
    const watched = await own.watchType(Fleet);
    const waiting = watched.next();
    own.close();
    assert.deepEqual(await within(WAIT_MS, "the type watch of a closed client", waiting), { value: undefined, done: true });
  });
});
