// A turn whose caller stopped waiting is cancelled: the daemon sends CancelTurn, the
// turn's ctx.signal aborts, a handler that throws its reason has its state changes
// discarded, and the actor's next call runs at once instead of after the turn timeout.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, actor, Client, DeadlineExceeded, method, TurnCancelled } from "../src/index.js";
import { type Daemon, host, signal, startDaemon, within } from "./helpers.js";

const started = signal();
const stopped: unknown[] = [];

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
});
