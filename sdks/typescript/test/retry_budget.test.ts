// The client-wide retry budget (gRFC A6 retry throttling), on the core in use
// (TROUPE_SDK_CORE=native or js): against an address nothing listens on, a
// burst of calls stops retrying once the budget is spent, and without a budget
// each call retries until its deadline as before. An App's budget bounds its
// actors' calls the same way.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { Actor, actor, App, Client, method, Overloaded, type RetryBudget, Unavailable } from "../src/index.js";
import { checkRetryBudget, RetryThrottle } from "../src/retry.js";
import { quietLogger, startDaemon, within } from "./helpers.js";

const BUDGET_TEXT = "retry budget was exhausted";

/** 127.0.0.1 with a port just freed: every connection to it is refused. */
async function unreachableAddress(): Promise<string> {
  const server = createServer();
  const port = await new Promise<number>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") reject(new Error("no port"));
      else resolve(address.port);
    });
  });
  await new Promise<void>((resolve) => server.close(() => { resolve(); }));
  return `127.0.0.1:${String(port)}`;
}

/** How often a failed call's message says it was retried (0 when it says nothing). */
function retriesOf(message: string): number {
  const found = /; retried (once|(\d+) times) over/.exec(message);
  if (found === null) return 0;
  return found[1] === "once" ? 1 : Number(found[2]);
}

/** The messages of `calls` invokes made together, each of which must reject Unavailable. */
async function burst(client: Client, calls: number): Promise<string[]> {
  const results = await Promise.allSettled(Array.from({ length: calls }, (_, i) => client.invoke("t", String(i), "m")));
  return results.map((r) => {
    if (r.status === "fulfilled") assert.fail("the call succeeded");
    const reason: unknown = r.reason;
    assert.ok(reason instanceof Unavailable, String(reason));
    return reason.message;
  });
}

test("a burst of calls stops retrying once the retry budget is spent", async () => {
  const client = new Client({ address: await unreachableAddress(), timeout: 10, retryBudget: { maxTokens: 10, tokenRatio: 0.1 } });
  try {
    // Bounded here, not by the calls' 10 s: without a budget they would take that.
    const messages = await within(8_000, "the burst to fail", burst(client, 8));
    // Ten tokens, each refused attempt takes one, a retry only while more than
    // five are left: 4 retries between all the calls, however they interleaved.
    assert.equal(
      messages.reduce((sum, m) => sum + retriesOf(m), 0),
      4,
      messages.join("\n"),
    );
    assert.ok(messages.every((m) => m.includes(BUDGET_TEXT)), messages.join("\n"));
    assert.ok(messages.filter((m) => m.includes("not retried")).length >= 4, messages.join("\n"));
    // Later calls find the budget spent: one attempt each.
    for (const m of await within(8_000, "the later calls to fail", burst(client, 3))) {
      assert.equal(retriesOf(m), 0, m);
      assert.ok(m.includes(`not retried: the client's ${BUDGET_TEXT}`), m);
    }
  } finally {
    client.close();
  }
});

test("a larger retry budget allows more retries", async () => {
  const client = new Client({ address: await unreachableAddress(), timeout: 10, retryBudget: { maxTokens: 16, tokenRatio: 1 } });
  try {
    const messages = await within(15_000, "the calls to fail", burst(client, 2));
    // 16 tokens: retries while more than 8 are left, 7 in all.
    assert.equal(
      messages.reduce((sum, m) => sum + retriesOf(m), 0),
      7,
      messages.join("\n"),
    );
    assert.ok(messages.every((m) => m.includes(BUDGET_TEXT)), messages.join("\n"));
  } finally {
    client.close();
  }
});

test("without a retry budget each call retries until its deadline", async () => {
  const client = new Client({ address: await unreachableAddress(), timeout: 1, retryBudget: false });
  try {
    for (const m of await within(10_000, "the burst to fail", burst(client, 8))) {
      assert.ok(retriesOf(m) >= 2, m);
      assert.ok(!m.includes(BUDGET_TEXT), m);
      assert.match(m, /longer timeout/);
    }
  } finally {
    client.close();
  }
});

test("a retry budget out of gRFC A6's range is refused", () => {
  for (const [given, says] of [
    [{ maxTokens: 0 }, /1 to 1000/],
    [{ maxTokens: 1001 }, /1 to 1000/],
    [{ maxTokens: 2.5 }, /integer/],
    [{ tokenRatio: 0 }, /at least 0\.001/],
    [{ tokenRatio: 0.0004 }, /at least 0\.001/],
    [{ tokenRatio: Number.NaN }, /at least 0\.001/],
    [true, /retryBudget must be/],
    [null, /retryBudget must be/],
  ] as const) {
    assert.throws(() => new Client({ address: "127.0.0.1:1", retryBudget: given as unknown as false }), says, JSON.stringify(given));
  }
  assert.deepEqual(new Client({ address: "127.0.0.1:1" }).retryBudget, { maxTokens: 100, tokenRatio: 0.1 });
  assert.deepEqual(new Client({ address: "127.0.0.1:1", retryBudget: { maxTokens: 3 } }).retryBudget, { maxTokens: 3, tokenRatio: 0.1 });
  assert.equal(new Client({ address: "127.0.0.1:1", retryBudget: false }).retryBudget, false);
});

@actor("budget_forwarder")
class Forwarder extends Actor {
  /**
   * Calls another actor while this turn holds the daemon's one place for a
   * call (--max-pending-calls 1): every attempt is refused as overloaded, with
   * a retry pushback, so the call is retried until its 2 s or the app's budget
   * end.
   */
  @method
  async forward(): Promise<string> {
    try {
      await this.ctx.invoke("budget_forwarder", "other", "forward", undefined, undefined, { timeout: 2 });
    } catch (e) {
      if (e instanceof Overloaded) return e.message;
      throw e;
    }
    return "the call went through";
  }
}

/** The messages of the actor's failed calls, in order, with the app's `retryBudget`, on a daemon that takes one call at a time. */
async function forwarded(retryBudget: RetryBudget | false, calls: number): Promise<string[]> {
  const daemon = await startDaemon(["--max-pending-calls", "1", "--max-pending-per-type", "1"]);
  const app = new App({ actors: [Forwarder], address: daemon.address, appName: "node-test", logger: quietLogger, retryBudget });
  const client = new Client({ address: daemon.address, timeout: 10 });
  try {
    await app.start({ timeout: 15 });
    const messages: string[] = [];
    for (let i = 0; i < calls; i++) {
      messages.push((await within(8_000, "the forward to end", client.invoke("budget_forwarder", "a", "forward"))) as string);
    }
    return messages;
  } finally {
    client.close();
    await app.close();
    await daemon.dispose();
  }
}

test("an app's retry budget bounds its actors' calls", async () => {
  const [first = "", later = ""] = await forwarded({ maxTokens: 10 }, 2);
  // Ten tokens: 4 retries, then the budget ends them (the default's 100 would go
  // on until the call's 2 s); the app's next calls find it spent.
  assert.equal(retriesOf(first), 4, first);
  assert.ok(first.includes(BUDGET_TEXT), first);
  assert.ok(first.includes("the App, for its actors' calls"), first);
  assert.equal(retriesOf(later), 0, later);
  assert.ok(later.includes(`not retried: the client's ${BUDGET_TEXT}`), later);
});

test("an app without a retry budget retries its actors' calls until their deadline", async () => {
  const [message = ""] = await forwarded(false, 1);
  assert.ok(retriesOf(message) >= 2, message);
  assert.ok(!message.includes(BUDGET_TEXT), message);
});

test("an app's retry budget is checked as a client's", () => {
  for (const [given, says] of [
    [{ maxTokens: 0 }, /1 to 1000/],
    [{ tokenRatio: 0 }, /at least 0\.001/],
    [null, /retryBudget must be/],
  ] as const) {
    assert.throws(() => new App({ actors: [Forwarder], address: "127.0.0.1:1", retryBudget: given as unknown as false }), says, JSON.stringify(given));
  }
  assert.deepEqual(new App({ actors: [Forwarder], address: "127.0.0.1:1" }).retryBudget, { maxTokens: 100, tokenRatio: 0.1 });
  assert.equal(new App({ actors: [Forwarder], address: "127.0.0.1:1", retryBudget: false }).retryBudget, false);
});

test("the grpc-js core's throttle counts as gRFC A6 says", () => {
  const budget = checkRetryBudget({ maxTokens: 10 });
  assert.ok(budget !== false);
  const throttle = new RetryThrottle(budget);
  assert.deepEqual(
    Array.from({ length: 6 }, () => throttle.onFailure()),
    [true, true, true, true, false, false],
  );
  assert.equal(throttle.tokens, 4);
  for (let i = 0; i < 10; i++) throttle.onFailure();
  assert.equal(throttle.tokens, 0);
  for (let i = 0; i < 51; i++) throttle.onSuccess();
  // 5.1 exactly: thousandths, no float drift.
  assert.equal(throttle.tokens, 5.1);
  assert.equal(throttle.onFailure(), false);
  for (let i = 0; i < 100; i++) throttle.onSuccess();
  assert.equal(throttle.tokens, 10);
});
