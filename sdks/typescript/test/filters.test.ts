// Call filters (App's `filters`) and the call's metadata (`this.ctx.metadata`),
// against the real daemon: filters run around every turn in order, see what the
// turn is, may replace the result, answer without the handler or refuse, and a
// turn they fail keeps no state change.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, ActorError, actor, App, type CallFilter, Client, type IncomingCall, method } from "../src/index.js";
import { type Daemon, quietLogger, signal, startDaemon, within } from "./helpers.js";

const seen: unknown[][] = [];
let ticked = signal();

@actor("guarded")
class Guarded extends Actor<{ total: number; note: string; ticked: unknown }> {
  @method
  add(n: number, opts?: { note?: string }): { total: number; metadata: Readonly<Record<string, string>> } {
    this.state.set("note", opts?.note ?? "");
    const total = this.state.get("total", 0) + n;
    this.state.set("total", total);
    return { total, metadata: this.ctx.metadata };
  }

  @method({ readonly: true })
  total(): number {
    return this.state.get("total", 0);
  }

  @method
  async tickSoon(): Promise<void> {
    await this.ctx.setTimer("tick", { due: "10ms", data: { x: 1 } });
  }

  override onTimer(_name: string, data: unknown): void {
    this.state.set("ticked", data);
    ticked.resolve();
  }
}

const note = (call: IncomingCall): unknown => {
  const last = call.args.at(-1);
  return typeof last === "object" && last !== null ? (last as { note?: unknown }).note : undefined;
};

const record: CallFilter = async (call, next) => {
  seen.push([call.actorType, call.actorId, call.method, call.kind, call.args.length, { ...call.metadata }, call.readonly, call.actor.id]);
  return next();
};

const tenantGuard: CallFilter = async (call, next) => {
  if (call.kind === "call" && call.metadata.tenant !== "acme") {
    throw new RangeError(`tenant ${String(call.metadata.tenant)} may not call ${call.method}`);
  }
  if (call.metadata.cached !== undefined) return -1; // answered here: the handler does not run
  const result = await next();
  if (note(call) === "undo") throw new TypeError("refused after the handler ran");
  if (note(call) === "twice") await next();
  return call.method === "add" ? { ...(result as object), filtered: true } : result;
};

describe("call filters", () => {
  let daemon: Daemon;
  let app: App;
  let client: Client;

  before(async () => {
    daemon = await startDaemon();
    app = new App({ actors: [Guarded], address: daemon.address, appName: "node-test", logger: quietLogger, filters: [record, tenantGuard] });
    await app.start({ timeout: 15 });
    client = new Client({ address: daemon.address, timeout: 20 });
  });

  after(async () => {
    client.close();
    await app.close();
    await daemon.stop();
  });

  test("run around every turn, in order, and see what it is", async () => {
    const acme = { metadata: { tenant: "acme" } };
    assert.deepEqual(await client.invoke("guarded", "g1", "add", [2], { note: "x" }, acme), { total: 2, metadata: { tenant: "acme" }, filtered: true });
    assert.deepEqual(seen, [["guarded", "g1", "add", "call", 2, { tenant: "acme" }, false, "g1"]]);

    // Refused before the handler: ActorError with the error's name and message.
    await assert.rejects(client.invoke("guarded", "g1", "add", [5], undefined, { metadata: { tenant: "evil" } }), (e: unknown) => {
      assert.ok(e instanceof ActorError);
      assert.equal(e.remoteType, "RangeError");
      assert.match(e.message, /evil may not call add/);
      return true;
    });
    // Refused after the handler ran: its state change is undone.
    await assert.rejects(client.invoke("guarded", "g1", "add", [5], { note: "undo" }, acme), (e: unknown) => e instanceof ActorError && e.remoteType === "TypeError");
    // A filter may not run the handler twice.
    await assert.rejects(client.invoke("guarded", "g1", "add", [7], { note: "twice" }, acme), (e: unknown) => e instanceof ActorError && /at most once/.test(e.message));
    assert.equal(await client.invoke("guarded", "g1", "total", [], undefined, acme), 2);
    assert.deepEqual(seen.at(-1), ["guarded", "g1", "total", "call", 0, { tenant: "acme" }, true, "g1"]);

    // Answered by the filter: the handler does not run.
    assert.equal(await client.invoke("guarded", "g1", "add", [100], undefined, { metadata: { tenant: "acme", cached: "1" } }), -1);
    assert.equal(await client.invoke("guarded", "g1", "total", [], undefined, acme), 2);

    // Scheduled turns pass through the filters too, without metadata.
    ticked = signal();
    await client.invoke("guarded", "g1", "tickSoon", [], undefined, acme);
    await within(10_000, "the timer's turn", ticked.promise);
    assert.ok(seen.some((s) => JSON.stringify(s) === JSON.stringify(["guarded", "g1", "onTimer", "timer", 2, {}, false, "g1"])), JSON.stringify(seen));
  });

  test("a filter must be a function", () => {
    assert.throws(() => new App({ actors: [Guarded], filters: [42 as unknown as CallFilter] }), /not a function/);
  });
});

describe("call metadata without filters", () => {
  test("the handler reads what the caller sent", async () => {
    const daemon = await startDaemon();
    const app = new App({ actors: [Guarded], address: daemon.address, appName: "node-test", logger: quietLogger });
    const client = new Client({ address: daemon.address, timeout: 20 });
    try {
      await app.start({ timeout: 15 });
      assert.deepEqual(await client.invoke("guarded", "m1", "add", [1], undefined, { metadata: { "request-id": "r-7" } }), { total: 1, metadata: { "request-id": "r-7" } });
      assert.deepEqual(((await client.invoke("guarded", "m1", "add", [1])) as { metadata: object }).metadata, {});
    } finally {
      client.close();
      await app.close();
      await daemon.stop();
    }
  });
});
