// A failed turn undoes its own changes only, whatever ran beside it. Turns of
// one actor can run at once (a reentrant actor called back by a chain it waits
// on). The daemon discards only a failed turn's own changes, so the view must
// too: a key another turn wrote after the failed turn first touched it keeps
// that write, sent or still to be sent by its author. Kept in step with the
// Python SDK's tests/test_state.py.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { StateChange } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, ActorError, method, State } from "../src/index.js";
import { commitState, endTurn, expireState, refuseState, rollbackState } from "../src/state.js";
import { startTestEnv, type TestEnv } from "../src/testing.js";
import type { TurnScope } from "../src/turn.js";
import { signal, troupeBin, within } from "./helpers.js";
import { stored, turnOf } from "./state_turns.js";

type S = { k: number; r: number; d: number; later: number; added: number; list: number[] };

/** The changes as key → JSON text, or null for a delete. */
function sent(changes: StateChange[]): Record<string, string | null> {
  return Object.fromEntries(changes.map((c) => [c.key, c.op?.$case === "set" ? Buffer.from(c.op.value).toString("utf8") : null]));
}

/** Key k stored as 1; an outer turn wrote 2, then a nested turn wrote 3. Both run. */
function outerThenNestedWroteK(): [State<S>, TurnScope, TurnScope] {
  const s = new State<S>(stored({ k: 1 }));
  const [outer, inOuter] = turnOf(s, "outer");
  const [inner, inInner] = turnOf(s, "inner");
  inOuter(() => s.set("k", 2));
  inInner(() => s.set("k", 3));
  return [s, outer, inner];
}

describe("a failed turn beside others undoes only its own changes", () => {
  test("a failed outer turn keeps what a nested turn committed", () => {
    const [s, outer, inner] = outerThenNestedWroteK();
    assert.deepEqual(sent(commitState(s, inner)), { k: "3" });
    endTurn(s, inner);
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { k: 3 }); // what the daemon holds
    assert.deepEqual(sent(commitState(s)), {});
  });

  test("a nested turn's committed write stays while a third turn that read the key runs", () => {
    const s = new State<S>(stored({ k: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [reader, inReader] = turnOf(s, "reader");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => s.set("k", 2));
    inReader(() => s.get("k"));
    inInner(() => s.set("k", 3));
    assert.deepEqual(sent(commitState(s, inner)), { k: "3" });
    endTurn(s, inner);
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { k: 3 });
    assert.deepEqual(sent(commitState(s, reader)), {});
    endTurn(s, reader);
  });

  test("a failed outer turn keeps a running nested turn's write", () => {
    const s = new State<S>(stored({ k: 1, r: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => {
      s.set("k", 2);
      s.get("r"); // only read by the outer turn
    });
    inInner(() => {
      s.set("k", 3);
      s.set("r", 3);
    });
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { k: 3, r: 3 });
    assert.deepEqual(sent(commitState(s, inner)), { k: "3", r: "3" });
    endTurn(s, inner);
  });

  test("a turn ending first does not send a running turn's write of a key it only read", () => {
    const s = new State<S>(stored({ k: 1, r: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => {
      s.set("k", 2);
      s.get("r");
    });
    inInner(() => s.set("r", 3));
    assert.deepEqual(sent(commitState(s, outer)), { k: "2" });
    endTurn(s, outer);
    // The nested turn then fails: the daemon never got its write, and the view drops it.
    rollbackState(s, inner);
    endTurn(s, inner);
    assert.deepEqual(s.toJSON(), { k: 2, r: 1 });
    assert.deepEqual(sent(commitState(s)), {});
  });

  test("a turn ending first sends its own write under a running turn's later one", () => {
    const [s, outer, inner] = outerThenNestedWroteK();
    assert.deepEqual(sent(commitState(s, outer)), { k: "2" });
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { k: 3 }); // the nested turn's write, still to be sent
    rollbackState(s, inner);
    endTurn(s, inner);
    assert.deepEqual(s.toJSON(), { k: 2 });
    assert.deepEqual(sent(commitState(s)), {});
  });

  test("a turn that found an earlier write of a failed turn goes back beneath it", () => {
    const s = new State<S>(stored({ list: [1] }));
    const [first, inFirst] = turnOf(s, "first");
    const [second, inSecond] = turnOf(s, "second");
    inFirst(() => s.set("list", [3]));
    inSecond(() => s.delete("list")); // found the first turn's [3]
    inFirst(() => s.set("list", [4]));
    rollbackState(s, first);
    endTurn(s, first);
    assert.deepEqual(s.toJSON(), {}); // the second turn's delete stands
    rollbackState(s, second);
    endTurn(s, second);
    assert.deepEqual(s.toJSON(), { list: [1] });
    assert.deepEqual(sent(commitState(s)), {});
  });

  test("a turn's write that a committed one replaced does not outlive its expiry", () => {
    const [s, outer, inner] = outerThenNestedWroteK();
    assert.deepEqual(sent(commitState(s, inner)), { k: "3" });
    endTurn(s, inner);
    expireState(s, ["k"]); // the daemon let the nested turn's 3 expire
    assert.deepEqual(s.toJSON(), {});
    assert.deepEqual(sent(commitState(s, outer)), {}); // not 3 again, as a key that never expires
    endTurn(s, outer);
  });

  test("a read-only turn ending first is not refused for a running turn's write", () => {
    const s = new State<S>(stored({ r: 1 }));
    const [reader, inReader] = turnOf(s, "peek", true);
    const [inner, inInner] = turnOf(s, "inner");
    inReader(() => s.get("r"));
    inInner(() => s.set("r", 3));
    assert.deepEqual(sent(refuseState(s, reader)), {});
    endTurn(s, reader);
    assert.deepEqual(s.toJSON(), { r: 3 });
    assert.deepEqual(sent(commitState(s, inner)), { r: "3" });
    endTurn(s, inner);
  });

  test("a failed nested turn that read the outer turn's change goes back to it", () => {
    const s = new State<S>(stored({ k: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => s.set("k", 2));
    inInner(() => s.get("k"));
    rollbackState(s, inner);
    endTurn(s, inner);
    assert.deepEqual(s.toJSON(), { k: 2 });
    assert.deepEqual(sent(commitState(s, outer)), { k: "2" });
    endTurn(s, outer);
  });

  test("a failed turn alone goes back to the stored value", () => {
    const s = new State<S>(stored({ k: 1, d: 1 }));
    const [turn, inTurn] = turnOf(s, "turn");
    inTurn(() => {
      s.set("k", 2);
      s.delete("d");
      s.set("added", 1);
    });
    rollbackState(s, turn);
    endTurn(s, turn);
    assert.deepEqual(s.toJSON(), { k: 1, d: 1 });
    assert.deepEqual(sent(commitState(s)), {});
  });

  for (const [failed, kept, left] of [
    ["outer", "inner", 3],
    ["inner", "outer", 4],
  ] as const) {
    test(`a failed turn that wrote last goes back to the write it replaced (${failed} fails)`, () => {
      const s = new State<S>(stored({ k: 1 }));
      const turns = { outer: turnOf(s, "outer"), inner: turnOf(s, "inner") };
      turns.outer[1](() => s.set("k", 2));
      turns.inner[1](() => s.set("k", 3));
      // The outer turn writes again (from work of its own) after the nested turn's write.
      turns.outer[1](() => s.set("k", 4));
      rollbackState(s, turns[failed][0]);
      endTurn(s, turns[failed][0]);
      assert.deepEqual(s.toJSON(), { k: left });
      assert.deepEqual(sent(commitState(s, turns[kept][0])), { k: String(left) });
      endTurn(s, turns[kept][0]);
    });
  }

  test("a failed turn's change in place of a value another turn committed is undone", () => {
    const s = new State<S>(stored({ list: [1] }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => s.get("list"));
    inInner(() => s.set("list", [2]));
    assert.deepEqual(sent(commitState(s, inner)), { list: "[2]" });
    endTurn(s, inner);
    inOuter(() => s.get("list")?.push(3)); // the committed value, changed in place
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { list: [2] }); // what the daemon holds
    assert.deepEqual(sent(commitState(s)), {});
  });

  test("a failed turn does not bring back what an earlier failed turn discarded", () => {
    const s = new State<S>(stored({ k: 1 }));
    const [first, inFirst] = turnOf(s, "first");
    const [second, inSecond] = turnOf(s, "second");
    const [third, inThird] = turnOf(s, "third");
    inFirst(() => s.set("k", 2));
    inSecond(() => s.get("k")); // saw the first turn's unsent 2
    inThird(() => s.get("k"));
    rollbackState(s, first);
    endTurn(s, first);
    assert.deepEqual(s.toJSON(), { k: 1 });
    rollbackState(s, second);
    endTurn(s, second);
    assert.deepEqual(s.toJSON(), { k: 1 });
    assert.deepEqual(sent(commitState(s, third)), {});
    endTurn(s, third);
  });
});

// On the daemon: an outer turn fails while the turn nested in it (its chain
// called back into the actor) still runs, which the daemon allows; the nested
// turn's write is then applied.

let nestedSet = signal();
let release = signal();
let call: Promise<void> | undefined;

@actor("ledger", { reentrant: true })
class Ledger extends Actor<{ k: number }> {
  @method
  async outerFails(): Promise<never> {
    this.state.set("k", 2);
    // The peer calls back into setAndWait, nested in this turn; the call is
    // left running when this turn fails.
    call = this.ctx.actor<LedgerPeer>("ledger_peer", "p").call("callBack", this.id);
    await nestedSet.promise;
    throw new Error("the outer turn fails");
  }

  @method
  async setAndWait(): Promise<void> {
    this.state.set("k", 3);
    nestedSet.resolve();
    await release.promise;
  }

  @method({ readonly: true })
  peek(): Partial<{ k: number }> {
    return this.state.toJSON();
  }

  @method({ readonly: true })
  async peekBesideANestedWrite(): Promise<Partial<{ k: number }>> {
    const seen = this.state.toJSON();
    // The nested turn writes a key this turn read, and is still running when
    // this turn ends: the write is its own, not a change this turn made.
    call = this.ctx.actor<LedgerPeer>("ledger_peer", "p").call("callBack", this.id);
    await nestedSet.promise;
    return seen;
  }
}

@actor("ledger_peer")
class LedgerPeer extends Actor {
  @method
  async callBack(ledgerId: string): Promise<void> {
    await this.ctx.actor<Ledger>("ledger", ledgerId).call("setAndWait");
  }
}

describe("a failed outer turn beside a nested one, on the daemon", () => {
  let env: TestEnv;

  before(async () => {
    env = await startTestEnv({ binary: troupeBin() });
    await env.host(Ledger, LedgerPeer);
  });

  after(async () => {
    await env.close();
  });

  test("a failed outer turn keeps the write of a nested turn still running", async () => {
    nestedSet = signal();
    release = signal();
    const ledger = env.actor<Ledger>(Ledger, "l1");
    await assert.rejects(ledger.call("outerFails"), (e: unknown) => e instanceof ActorError && e.message === "the outer turn fails");
    release.resolve();
    await within(10_000, "the nested turn to end", call ?? Promise.reject(new Error("no call")));
    assert.deepEqual(await env.state(Ledger, "l1"), { k: 3 });
    assert.deepEqual(await ledger.call("peek"), { k: 3 });
  });

  test("a read-only turn ending before a nested turn that writes succeeds", async () => {
    nestedSet = signal();
    release = signal();
    await env.setState(Ledger, "l2", { k: 1 });
    const ledger = env.actor<Ledger>(Ledger, "l2");
    assert.deepEqual(await ledger.call("peekBesideANestedWrite"), { k: 1 });
    release.resolve();
    await within(10_000, "the nested turn to end", call ?? Promise.reject(new Error("no call")));
    assert.deepEqual(await env.state(Ledger, "l2"), { k: 3 });
    assert.deepEqual(await ledger.call("peek"), { k: 3 });
  });
});
