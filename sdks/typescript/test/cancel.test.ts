// A turn whose caller stopped waiting is cancelled: the daemon sends CancelTurn, the
// turn's ctx.signal aborts, a handler that throws its reason has its state changes
// discarded, and the actor's next call runs at once instead of after the turn timeout.
// A call's own signal (CallOptions.signal) stops it the same way, and a cancelled
// turn's calls end with it, so the turns they wait on are cancelled too.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, actor, Client, DeadlineExceeded, method, TurnCancelled } from "../src/index.js";
import { type Daemon, host, signal, startDaemon, within } from "./helpers.js";

const started = signal();
const stopped: unknown[] = [];

/** Per actor id: resolved when its waitUntilCancelled turn started, and with its signal's reason once cancelled. */
interface Wait {
  started: { promise: Promise<void>; resolve: () => void };
  cancelled: { promise: Promise<unknown>; resolve: (reason: unknown) => void };
}
const waits = new Map<string, Wait>();
function waitOf(id: string): Wait {
  let w = waits.get(id);
  if (w === undefined) {
    w = { started: signal(), cancelled: signal<unknown>() };
    waits.set(id, w);
  }
  return w;
}

@actor("canceled-inner")
class Inner extends Actor {
  @method
  async waitUntilCancelled(): Promise<void> {
    const w = waitOf(this.id);
    const aborted = this.ctx.signal;
    w.started.resolve();
    await new Promise((_, reject) => {
      aborted.addEventListener("abort", () => {
        w.cancelled.resolve(aborted.reason);
        reject(aborted.reason as Error);
      });
    });
  }

  @method
  ping(): string {
    return "pong";
  }
}

const outerSaw: unknown[] = [];

@actor("canceled-outer")
class Outer extends Actor {
  /** Waits on an Inner turn that ends only when cancelled. */
  @method
  async callInner(id: string): Promise<void> {
    try {
      await this.ctx.actor(Inner, id).call("waitUntilCancelled");
    } catch (e) {
      outerSaw.push(e);
      throw e;
    }
  }
}

@actor("waiter")
class Waiter extends Actor<{ touched: boolean }> {
  @method
  async waitForever(): Promise<void> {
    this.state.set("touched", true);
    const aborted = this.ctx.signal;
    started.resolve();
    await new Promise((_, reject) => {
      aborted.addEventListener("abort", () => {
        stopped.push(aborted.reason);
        reject(aborted.reason as Error);
      });
    });
  }

  @method
  touched(): boolean {
    return this.state.get("touched", false);
  }
}

describe("turn cancellation", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await startDaemon();
    client = new Client({ address: daemon.address, timeout: 20 });
  });
  after(async () => {
    client.close();
    await daemon.dispose();
  });

  test("a call whose caller left aborts its turn's signal", async () => {
    const app = await host(daemon.address, Waiter);
    try {
      await assert.rejects(client.invoke("waiter", "w1", "waitForever", [], undefined, { timeout: 0.5 }), DeadlineExceeded);
      await started.promise;
      // The type's turn timeout is a minute: this runs once the cancelled turn ended.
      assert.equal(await within(10_000, "the next turn", client.invoke("waiter", "w1", "touched")), false);
      assert.equal(stopped.length, 1);
      assert.ok(stopped[0] instanceof TurnCancelled, String(stopped[0]));
    } finally {
      await app.close();
    }
  });

  test("a call's signal ends it and cancels the turn it started", async () => {
    const app = await host(daemon.address, Inner);
    try {
      const abort = new AbortController();
      const w = waitOf("s1");
      const call = client.invoke("canceled-inner", "s1", "waitUntilCancelled", [], undefined, { signal: abort.signal });
      await within(10_000, "the turn to start", w.started.promise);
      abort.abort();
      const err = await call.then(
        () => assert.fail("the aborted call answered"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof Error && err.name === "AbortError", String(err));
      assert.ok((await within(10_000, "the inner turn's cancel", w.cancelled.promise)) instanceof TurnCancelled);
      assert.equal(await within(10_000, "the next turn", client.invoke("canceled-inner", "s1", "ping")), "pong");
      // Aborted already: nothing is sent.
      await assert.rejects(client.invoke("canceled-inner", "s1", "ping", [], undefined, { signal: abort.signal }), { name: "AbortError" });
      await assert.rejects(client.getState("canceled-inner", "s1", [], { signal: abort.signal }), { name: "AbortError" });
    } finally {
      await app.close();
    }
  });

  test("a cancelled turn's calls end with it, cancelling the turns they wait on", async () => {
    const app = await host(daemon.address, Outer, Inner);
    try {
      const w = waitOf("n1");
      // No deadline anywhere: only the cascade of cancels can end the inner turn
      // before its turn timeout (a minute).
      const abort = new AbortController();
      const call = client.invoke("canceled-outer", "o1", "callInner", ["n1"], undefined, { signal: abort.signal });
      await within(10_000, "the inner turn to start", w.started.promise);
      abort.abort();
      await assert.rejects(call, { name: "AbortError" });
      assert.ok((await within(10_000, "the inner turn's cancel", w.cancelled.promise)) instanceof TurnCancelled);
      assert.equal(await within(10_000, "the inner actor's next turn", client.invoke("canceled-inner", "n1", "ping")), "pong");
      assert.equal(outerSaw.length, 1);
      assert.ok(outerSaw[0] instanceof TurnCancelled, String(outerSaw[0]));
    } finally {
      await app.close();
    }
  });
});
