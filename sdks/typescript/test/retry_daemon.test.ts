// Retries and idempotency keys against the real daemon: a call outlives a
// daemon restart, and a key sent twice runs its call once (where the daemon
// honours keys).
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { test } from "node:test";
import { randomUUID } from "node:crypto";
import { Actor, actor, Client, method, Unavailable } from "../src/index.js";
import { host, signal, startDaemon, within } from "./helpers.js";

// Set by whoever runs the suite against a daemon that records and replays keyed
// answers; the daemon this branch was built against accepts keys and ignores them.

@actor("restart_counter")
class Counter extends Actor<{ count: number }> {
  @method
  incr(by = 1): number {
    const count = this.state.get("count", 0) + by;
    this.state.set("count", count);
    return count;
  }
}

/**
 * Listen on the stopped daemon's port and reset every connection: resolves at
 * the first one, which shows a client is trying to reach the daemon (each reset
 * fails that attempt with UNAVAILABLE). `close()` frees the port.
 */
async function resetEveryConnection(port: number): Promise<{ connected: Promise<void>; close: () => Promise<void> }> {
  const connected = signal();
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.resetAndDestroy();
    connected.resolve();
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  const close = (): Promise<void> =>
    new Promise((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => {
        resolve();
      });
    });
  return { connected: connected.promise, close };
}

test("a call rides out a daemon restart", async () => {
  // For 10 s after each start the daemon holds calls to a type no app hosts yet
  // (instead of NOT_FOUND): the retry that reaches it before the app re-attached
  // waits for the app rather than failing.
  const daemon = await startDaemon(["--host-wait", "10s"]);
  // With the default retry budget: a lone call still rides out a restart.
  const client = new Client({ address: daemon.address, timeout: 30 });
  let app = await host(daemon.address, Counter);
  try {
    assert.equal(await client.actor<Counter>("restart_counter", "c").call("incr"), 1);
    // The app goes too, so that the only connections to the port below are the call's.
    await app.close();
    assert.equal(await daemon.stop(), 0, daemon.logTail());
    const call = client.actor<Counter>("restart_counter", "c").call("incr");
    const outcome = call.then(
      (n) => n,
      (e: unknown) => e,
    );
    const port = await resetEveryConnection(daemon.port);
    try {
      await within(10_000, "the call to try the stopped daemon", port.connected);
    } finally {
      await port.close();
    }
    await daemon.start();
    app = await host(daemon.address, Counter);
    assert.equal(await within(30_000, "the retried call", outcome), 2, daemon.logTail());
    assert.deepEqual(await client.getState("restart_counter", "c"), { count: 2 });
  } finally {
    client.close();
    await app.close();
    await daemon.dispose();
  }
});

test("without retries a stopped daemon fails the call at once", async () => {
  const daemon = await startDaemon();
  const client = new Client({ address: daemon.address, timeout: 20, retry: false });
  const app = await host(daemon.address, Counter);
  try {
    assert.equal(await client.actor<Counter>("restart_counter", "c").call("incr"), 1);
    assert.equal(await daemon.stop(), 0, daemon.logTail());
    const started = performance.now();
    await within(
      10_000,
      "the call to fail",
      assert.rejects(client.actor<Counter>("restart_counter", "c").call("incr"), (e: unknown) => e instanceof Unavailable && !e.message.includes("; retried")),
    );
    const elapsed = performance.now() - started;
    assert.ok(elapsed < 5_000, `took ${elapsed} ms of the 20 s timeout`);
  } finally {
    client.close();
    await app.close();
    await daemon.dispose();
  }
});

test("the same key twice runs the call once", async () => {
  const daemon = await startDaemon();
  const client = new Client({ address: daemon.address, timeout: 20 });
  const app = await host(daemon.address, Counter);
  try {
    const key = `node-${randomUUID()}`;
    const first = await client.invoke("restart_counter", "once", "incr", [5], undefined, { idempotencyKey: key });
    const again = await client.invoke("restart_counter", "once", "incr", [5], undefined, { idempotencyKey: key });
    assert.deepEqual([first, again], [5, 5]);
    assert.deepEqual(await client.getState("restart_counter", "once"), { count: 5 });
    // Another key is another call.
    assert.equal(await client.invoke("restart_counter", "once", "incr", [5]), 10);
  } finally {
    client.close();
    await app.close();
    await daemon.dispose();
  }
});

test("a durable tell sent twice with its key is stored once", async () => {
  const marker = signal<number>();
  @actor("keyed_inbox")
  class Inbox extends Actor<{ sum: number }> {
    @method
    add(n: number): void {
      const sum = this.state.get("sum", 0) + n;
      this.state.set("sum", sum);
      if (n === 100) marker.resolve(sum);
    }
  }
  const daemon = await startDaemon();
  const client = new Client({ address: daemon.address, timeout: 20 });
  const app = await host(daemon.address, Inbox);
  try {
    const key = `node-${randomUUID()}`;
    for (let i = 0; i < 2; i++) await client.tell("keyed_inbox", "i", "add", [3], undefined, { durable: true, idempotencyKey: key });
    // Durable tells of one caller are first delivered in order: when this one
    // runs, whatever the two above stored has run.
    await client.tell("keyed_inbox", "i", "add", [100], undefined, { durable: true });
    assert.equal(await within(15_000, "the marker tell to run", marker.promise), 103);
  } finally {
    client.close();
    await app.close();
    await daemon.dispose();
  }
});
