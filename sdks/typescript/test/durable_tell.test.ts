// Durable tells against the real daemon (docs/delivery.md): `{ durable: true }`
// from a client, from a handle and from a turn, and a type's `durableTells`.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { Actor, actor, Client, method } from "../src/index.js";
import { specOf } from "../src/actor.js";
import { type Daemon, host, startDaemon } from "./helpers.js";

interface LedgerState {
  entries: number[];
}

@actor("ledger", { durableTells: true })
class Ledger extends Actor<LedgerState> {
  @method
  add(n: number): void {
    this.state.set("entries", [...this.state.get("entries", []), n]);
  }

  @method
  async relay(to: string, n: number): Promise<void> {
    // From a turn: resolves once stored in the other actor's inbox.
    await this.ctx.actor<Journal>("journal", to, { durable: true }).tell("add", n);
  }
}

@actor("journal")
class Journal extends Ledger {}

/** The actor's entries once there are `want` of them (tells run after they resolve). */
async function entries(client: Client, type: string, id: string, want: number): Promise<unknown[]> {
  for (let i = 0; i < 200; i++) {
    const state = await client.getState(type, id);
    const got = (state.entries ?? []) as unknown[];
    if (got.length >= want) return got;
    await delay(50);
  }
  throw new Error(`${type}/${id} never had ${String(want)} entries`);
}

describe("durable tells", () => {
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

  test("durableTells is part of the type spec", () => {
    assert.equal(specOf(Ledger).proto.durableTells, true);
    assert.equal(specOf(Journal).proto.durableTells, false);
  });

  test("durable tells arrive in order, from a client and a handle", async () => {
    const app = await host(daemon.address, Ledger, Journal);
    try {
      for (let n = 0; n < 20; n++) await client.tell("journal", "j1", "add", [n], undefined, { durable: true });
      assert.deepEqual(await entries(client, "journal", "j1", 20), [...Array(20).keys()]);
      const handle = client.actor<Journal>("journal", "j3", { durable: true });
      for (let n = 0; n < 3; n++) await handle.tell("add", n);
      assert.deepEqual(await entries(client, "journal", "j3", 3), [0, 1, 2]);
      // The type's default makes these durable; best effort still works.
      for (let n = 0; n < 5; n++) await client.tell("ledger", "l1", "add", [n]);
      await client.tell("ledger", "l1", "add", [5], undefined, { durable: false });
      assert.deepEqual(await entries(client, "ledger", "l1", 6), [0, 1, 2, 3, 4, 5]);
    } finally {
      await app.close();
    }
  });

  test("a turn sends a durable tell", async () => {
    const app = await host(daemon.address, Ledger, Journal);
    try {
      await client.actor<Ledger>("ledger", "l2").call("relay", "j2", 7);
      assert.deepEqual(await entries(client, "journal", "j2", 1), [7]);
    } finally {
      await app.close();
    }
  });
});
