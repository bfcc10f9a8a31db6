// On the native core a Client, and an actor through its ctx, send every RPC through
// the addon, the rarer ones included (state reads, reminders, alarms, timers): no
// grpc-js call at all; and a bad
// idempotency key is refused by the core with the SDK's words.
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, actor, Client, InvalidArgument, method } from "../src/index.js";
import { coreName } from "../src/core.js";
import { type Daemon, host, startDaemon } from "./helpers.js";

@actor("native_pinger")
class Pinger extends Actor<{ armed: boolean }> {
  @method
  arm(): boolean {
    this.state.set("armed", true);
    return true;
  }

  @method
  async schedule(): Promise<boolean> {
    await this.ctx.setReminder("ring", { due: "1h" });
    const found = (await this.ctx.getReminder("ring"))?.name === "ring";
    await this.ctx.setTimer("tick", { due: "1h" });
    return found && (await this.ctx.deleteTimer("tick")) && (await this.ctx.deleteReminder("ring"));
  }
}

/** Runs `body` while counting the unary grpc-js RPCs made from any stub. */
async function countingGrpcCalls(body: () => Promise<void>): Promise<string[]> {
  const made: string[] = [];
  // Every unary grpc-js RPC, from any stub, goes through this method.
  const proto: object = grpc.Client.prototype;
  const original = Reflect.get(proto, "makeUnaryRequest") as (...args: unknown[]) => unknown;
  Reflect.set(proto, "makeUnaryRequest", function (this: grpc.Client, ...args: unknown[]): unknown {
    made.push(String(args[0]));
    return Reflect.apply(original, this, args);
  });
  try {
    await body();
  } finally {
    Reflect.set(proto, "makeUnaryRequest", original);
  }
  return made;
}

describe("client calls on the native core", { skip: coreName() !== "native" && "the native core is not in use" }, () => {
  let daemon: Daemon;
  let stopApp: () => Promise<void>;
  before(async () => {
    daemon = await startDaemon();
    const app = await host(daemon.address, Pinger);
    stopApp = () => app.close();
  });
  after(async () => {
    await stopApp();
    await daemon.dispose();
  });

  test("the rarer RPCs of a Client make no grpc-js call", async () => {
    const client = new Client({ address: daemon.address, timeout: 10 });
    try {
      const made = await countingGrpcCalls(async () => {
        assert.equal(await client.actor<Pinger>("native_pinger", "p").call("arm"), true);
        assert.deepEqual(await client.getState("native_pinger", "p"), { armed: true });
        const set = await client.setReminder("native_pinger", "p", "wake", { due: "1h" });
        assert.equal(set.name, "wake");
        assert.equal((await client.getReminder("native_pinger", "p", "wake"))?.name, "wake");
        assert.equal(await client.deleteReminder("native_pinger", "p", "wake"), true);
        assert.equal(await client.getReminder("native_pinger", "p", "wake"), null);
      });
      assert.deepEqual(made, []);
    } finally {
      client.close();
    }
  });

  test("an actor's ctx reminders and timers make no grpc-js call", async () => {
    const client = new Client({ address: daemon.address, timeout: 10 });
    try {
      const made = await countingGrpcCalls(async () => {
        assert.equal(await client.actor<Pinger>("native_pinger", "s").call("schedule"), true);
      });
      assert.deepEqual(made, []);
    } finally {
      client.close();
    }
  });

  test("a bad idempotency key is refused before anything is sent", async () => {
    const client = new Client({ address: daemon.address, timeout: 10 });
    try {
      await assert.rejects(
        client.invoke("nobody", "x", "m", [], undefined, { idempotencyKey: "" }),
        (e: unknown) =>
          e instanceof InvalidArgument &&
          e.message === "idempotencyKey is empty; pass 1 to 256 bytes of printable UTF-8, or leave it out to let the SDK make a fresh key",
      );
      await assert.rejects(client.tell("nobody", "x", "m", [], undefined, { idempotencyKey: "k".repeat(257) }), /at most 256 bytes/);
    } finally {
      client.close();
    }
  });
});
