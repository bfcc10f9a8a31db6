// State changes only during the actor's turns. A change made elsewhere (work a
// method left running after it returned, a setTimeout callback) throws
// TroupeError and changes nothing; before, the next turn of the actor sent it
// as its own. Reads work anywhere.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, actor, method, State, TroupeError } from "../src/index.js";
import { commitState, endTurn } from "../src/state.js";
import { startTestEnv, type TestEnv } from "../src/testing.js";
import { signal, troupeBin, within } from "./helpers.js";
import { committed, stored, turnOf } from "./state_turns.js";

type S = { count: number; items: string[]; cfg: { deep: { n: number } }; added: number };

const INSTEAD = /an actor's state changes only during its turns .*; the state is unchanged\. Await that work inside the turn, or make the change in a turn: call or tell the actor, or set a timer or reminder whose handler makes it$/;

function refused(where: RegExp): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof TroupeError, String(e));
    assert.match(e.message, where);
    assert.match(e.message, INSTEAD);
    return true;
  };
}

describe("State outside turns", () => {
  const initial = { count: 1, items: ["a"], cfg: { deep: { n: 1 } } };

  test("every change throws TroupeError and leaves the state as it was", () => {
    const s = new State<S>(stored(initial));
    assert.throws(() => s.set("count", 2), refused(/^this\.state cannot set key "count" outside any turn: /));
    assert.throws(() => s.set("count", 2, { ttl: "1h" }), refused(/cannot set key "count"/));
    assert.throws(() => s.delete("count"), refused(/^this\.state cannot delete key "count" outside any turn/));
    assert.throws(() => {
      s.clear();
    }, refused(/cannot delete key/));
    assert.throws(() => s.setDefault("added", 1), refused(/cannot set key "added"/));
    // In place, at any depth, through any way of reading.
    assert.throws(() => s.get("items", []).push("b"), refused(/^this\.state cannot change key "items" in place outside any turn/));
    assert.throws(() => s.setDefault("items", []).splice(0, 1), refused(/change key "items" in place/));
    assert.throws(() => {
      const cfg = s.get("cfg");
      if (cfg !== undefined) cfg.deep.n = 2;
    }, refused(/change key "cfg" in place/));
    assert.throws(() => Reflect.deleteProperty(s.toJSON().cfg ?? {}, "deep"), refused(/change key "cfg" in place/));
    assert.throws(() => {
      for (const [, value] of s) if (Array.isArray(value)) value.length = 0;
    }, refused(/change key "items" in place/));
    assert.deepEqual(s.toJSON(), initial);
    assert.deepEqual(commitState(s), []);
  });

  test("reads work, and a value read there changes as the turn's own change inside a turn", () => {
    const s = new State<S>(stored(initial));
    assert.equal(s.setDefault("count", 5), 1); // present: only a read
    const items = s.get("items");
    assert.ok(Array.isArray(items));
    assert.equal(s.get("items"), items);
    assert.deepEqual(items, ["a"]);
    assert.deepEqual(items.map((x) => x.toUpperCase()), ["A"]);
    assert.equal(JSON.stringify(s.toJSON()), JSON.stringify(initial));
    const changes = committed(s, () => items.push("b"));
    assert.deepEqual(
      changes.map((c) => [c.key, c.op?.$case === "set" ? Buffer.from(c.op.value).toString("utf8") : null]),
      [["items", '["a","b"]']],
    );
    assert.deepEqual(s.get("items"), ["a", "b"]);
  });

  test("the error says whose turn the work came from", () => {
    const s = new State<S>(stored(initial));
    const [ended, inEnded] = turnOf(s, "incr");
    endTurn(s, ended);
    assert.throws(() => inEnded(() => s.set("count", 2)), refused(/cannot set key "count" after its turn ended \(in work that incr of t\/1 started and did not await\)/));
    const other = new State<S>();
    const [, inOther] = turnOf(other, "elsewhere");
    assert.throws(() => inOther(() => s.set("count", 2)), refused(/cannot set key "count" in elsewhere of t\/1, which is not this state's actor/));
    assert.deepEqual(s.toJSON(), initial);
  });
});

// On the daemon: work a method left running writes after the turn ended, while
// another turn of the same actor, and one of another actor, run.

/** Resolves the work LateWriter.leaveWork left behind; the test sets it. */
let go = signal();
/** What each change of that work threw, in order (undefined: it was made). */
let late = signal<unknown[]>();
/** Holds LateWriter.incrWhenReleased until the test resolves it. */
let release = signal();
/** Resolved once two incrWhenReleased turns run. */
let bothRunning = signal();
let running = 0;

@actor("late_writer")
class LateWriter extends Actor<{ count: number; items: number[] }> {
  @method
  leaveWork(): number {
    void go.promise.then(() => {
      const thrown: unknown[] = [];
      for (const change of [() => this.state.set("count", 99), () => this.state.setDefault("items", []).push(99)]) {
        try {
          change();
          thrown.push(undefined);
        } catch (e) {
          thrown.push(e);
        }
      }
      late.resolve(thrown);
    });
    return this.state.get("count", 0);
  }

  /** Waits for `release`, then adds one to count: a turn running while the work does. */
  @method
  async incrWhenReleased(): Promise<number> {
    if (++running === 2) bothRunning.resolve();
    await release.promise;
    const count = this.state.get("count", 0) + 1;
    this.state.set("count", count);
    return count;
  }
}

describe("work that outlived its turn, on the daemon", () => {
  let env: TestEnv;

  before(async () => {
    env = await startTestEnv({ binary: troupeBin() });
    await env.host(LateWriter);
  });

  after(async () => {
    await env.close();
  });

  test("its changes throw, and the turns running meanwhile save only their own", async () => {
    go = signal();
    late = signal();
    release = signal();
    bothRunning = signal();
    running = 0;
    const writer = env.actor<LateWriter>(LateWriter, "w1");
    assert.equal(await writer.call("leaveWork"), 0);
    // A turn of the same actor and one of another are running when the work does.
    const same = writer.call("incrWhenReleased");
    const other = env.actor<LateWriter>(LateWriter, "w2").call("incrWhenReleased");
    await within(10_000, "both turns to run", bothRunning.promise);
    go.resolve();
    const thrown = await within(10_000, "the late work", late.promise);
    assert.equal(thrown.length, 2);
    const [set, push] = thrown;
    assert.ok(set instanceof TroupeError, String(set));
    assert.match(set.message, /^this\.state cannot set key "count" after its turn ended \(in work that leaveWork of late_writer\/w1 started and did not await\)/);
    assert.ok(push instanceof TroupeError, String(push));
    assert.match(push.message, /cannot set key "items"/);
    release.resolve();
    assert.deepEqual(await Promise.all([same, other]), [1, 1]);
    assert.deepEqual(await env.state(LateWriter, "w1"), { count: 1 });
    assert.deepEqual(await env.state(LateWriter, "w2"), { count: 1 });
  });
});
