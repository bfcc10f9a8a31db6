// Keys that expire while turns of one actor run side by side (a reentrant
// actor's nested turns, concurrent read-only ones): the daemon reports the
// expiry with a later turn (Turn.expired_keys) while earlier ones still run,
// and what those send or undo afterwards must not bring the key back.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type DaemonMessage, Turn } from "../src/gen/troupe/v1/app.js";
import { type StateChange, TurnKind } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, type App, method, State } from "../src/index.js";
import { commitState, endTurn, expireState, refuseState, rollbackState } from "../src/state.js";
import { attachedApp, FakeDaemon } from "./fake_daemon.js";
import { quietLogger, signal } from "./helpers.js";
import { stored, turnOf } from "./state_turns.js";

const HOUR_MS = 3_600_000n;

/** Each change as [key, value or "delete", its ttl_ms or "keep"]. */
function sent(changes: StateChange[]): [string, string, bigint | "keep"][] {
  return changes.map((c) => [c.key, c.op?.$case === "set" ? Buffer.from(c.op.value).toString("utf8") : "delete", c.ttlMs ?? "keep"]);
}

type S = { k: number; other: number; list: number[] };

describe("an expiry while turns run side by side", () => {
  test("a failed turn does not bring back a key that expired while it and another turn both read it", () => {
    const s = new State<S>(stored({ k: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => s.get("k"));
    inInner(() => s.get("k"));
    // A third turn tells of the expiry while both run.
    expireState(s, ["k"]);
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.equal(s.has("k"), false);
    assert.deepEqual(sent(commitState(s, inner)), []);
    endTurn(s, inner);
    // A later turn reading the key finds it gone, and sends nothing.
    const [next, inNext] = turnOf(s, "next");
    assert.equal(
      inNext(() => s.get("k")),
      undefined,
    );
    assert.deepEqual(sent(commitState(s, next)), []);
    endTurn(s, next);
  });

  test("a failed turn's discarded set of an expired key is not sent by the turn still running", () => {
    const s = new State<S>(stored({ k: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    const [inner, inInner] = turnOf(s, "inner");
    inOuter(() => s.set("k", 2));
    inInner(() => s.get("k"));
    // The outer turn's set is unsent, so the expiry keeps it: it would come after.
    expireState(s, ["k"]);
    assert.equal(s.get("k"), 2);
    rollbackState(s, outer);
    endTurn(s, outer);
    // What the key was before the failed turn expired: it is gone, not 1 again.
    assert.equal(s.has("k"), false);
    assert.deepEqual(sent(commitState(s, inner)), []);
    endTurn(s, inner);
  });

  test("a failed turn beside one whose set of the key is unsent keeps that set", () => {
    const s = new State<S>(stored({ k: 1, other: 1 }));
    const [inner, inInner] = turnOf(s, "inner");
    const [outer, inOuter] = turnOf(s, "outer");
    inInner(() => s.set("k", 2, { ttl: "1h" }));
    // Touched after the other turn's set, this one saw 2: not the expired value.
    inOuter(() => {
      s.set("k", 3);
      s.set("other", 2);
    });
    expireState(s, ["k", "other"]);
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { k: 2 });
    assert.deepEqual(sent(commitState(s, inner)), [["k", "2", HOUR_MS]]);
    endTurn(s, inner);
  });

  test("beside the expiry, a turn that succeeds and a read-only one work as before", () => {
    const s = new State<S>(stored({ k: 1, other: 1 }));
    const [reader, inReader] = turnOf(s, "reader", true);
    const [writer, inWriter] = turnOf(s, "writer");
    inReader(() => s.get("k"));
    inWriter(() => {
      s.get("k");
      s.set("other", 2);
    });
    expireState(s, ["k"]);
    assert.equal(s.has("k"), false);
    assert.deepEqual(sent(commitState(s, writer)), [["other", "2", "keep"]]);
    endTurn(s, writer);
    endTurn(s, reader);
    assert.deepEqual(s.toJSON(), { other: 2 });
  });

  test("a read-only turn's in-place change of a key that then expired is refused without bringing the key back", () => {
    const s = new State<S>(stored({ list: [1] }));
    const [reader, inReader] = turnOf(s, "reader", true);
    inReader(() => s.get("list")?.push(2));
    // Another read-only turn tells of the expiry.
    expireState(s, ["list"]);
    // Sent, the change makes the daemon refuse the turn; the view drops it.
    assert.deepEqual(sent(refuseState(s, reader)), [["list", "[1,2]", "keep"]]);
    endTurn(s, reader);
    assert.equal(s.has("list"), false);
    const [next, inNext] = turnOf(s, "next");
    inNext(() => s.get("list"));
    assert.deepEqual(sent(commitState(s, next)), []);
    endTurn(s, next);
  });

  test("an expiry keeps a running turn's unsent set of the key, which comes after it", () => {
    const s = new State<S>(stored({ k: 1, other: 1 }));
    const [outer, inOuter] = turnOf(s, "outer");
    inOuter(() => {
      s.set("k", 1, { ttl: "1h" });
      s.get("other");
    });
    // A nested turn tells of both keys' expiry; the outer one only read `other`.
    expireState(s, ["k", "other"]);
    assert.deepEqual(s.toJSON(), { k: 1 });
    assert.deepEqual(sent(commitState(s, outer)), [["k", "1", HOUR_MS]]);
    endTurn(s, outer);
  });

  test("a key only read outside turns goes with the expiry", () => {
    const s = new State<S>(stored({ k: 0, other: 1 }));
    assert.equal(s.get("other"), 1);
    expireState(s, ["other"]);
    assert.deepEqual(s.toJSON(), { k: 0 });
    const [next] = turnOf(s, "next");
    assert.deepEqual(sent(commitState(s, next)), []);
    endTurn(s, next);
  });
});

// The same through the app's turn loop, on a fake daemon (on whichever core
// TROUPE_SDK_CORE picks): two turns of one actor in flight, a third reporting
// the expiry, then the first failing.

let setDone = signal();
let readDone = signal();
let releaseSet = signal();
let releaseRead = signal();

@actor("ttl_side", { reentrant: true })
class TtlSide extends Actor<{ k: number }> {
  /** Sets k, then fails once released: an outer turn waiting on a chain. */
  @method
  async setThenFail(): Promise<void> {
    this.state.set("k", 2);
    setDone.resolve();
    await releaseSet.promise;
    throw new Error("the outer turn fails");
  }

  /** Reads k and waits: a turn nested in the outer one. */
  @method
  async readAndWait(): Promise<number | null> {
    const k = this.state.get("k") ?? null;
    readDone.resolve();
    await releaseRead.promise;
    return k;
  }

  @method
  keys(): string[] {
    return [...this.state.keys()].sort();
  }
}

describe("an expiry while turns run side by side, on a fake daemon", () => {
  const daemon = new FakeDaemon();
  const ref = { type: "ttl_side", id: "s1" };
  let app: App;
  let callId = 0n;

  function turn(name: string, expiredKeys: string[] = []): DaemonMessage {
    callId += 1n;
    const value = Turn.fromPartial({ callId, actor: ref, kind: TurnKind.TURN_KIND_CALL, name, expiredKeys });
    return { kind: { $case: "turn", value } };
  }

  /** The next turn result: its reply's JSON (or "error: ..."), and its changes. */
  async function result(): Promise<[string, [string, string, bigint | "keep"][]]> {
    const answer = await daemon.next();
    assert.equal(answer.kind?.$case, "turnResult");
    const outcome = answer.kind.value.outcome;
    const shown = outcome?.$case === "reply" ? Buffer.from(outcome.value.data).toString("utf8") : `error: ${outcome?.value.message ?? "?"}`;
    return [shown, sent(answer.kind.value.changes)];
  }

  before(async () => {
    app = await attachedApp(daemon, [TtlSide], "ttl-side", quietLogger);
    daemon.send({ kind: { $case: "activate", value: { callId: 1n, actor: ref, state: stored({ k: 1 }), leaseDeadlineUnixMs: 0n } } });
    assert.equal((await daemon.next()).kind?.$case, "activated");
  });

  after(async () => {
    await app.close();
    daemon.stop();
  });

  test("the failed turn's rollback does not resurrect the key, and the other turn does not send it", async () => {
    setDone = signal();
    readDone = signal();
    releaseSet = signal();
    releaseRead = signal();
    daemon.send(turn("setThenFail"));
    await setDone.promise;
    daemon.send(turn("readAndWait"));
    await readDone.promise;
    // k expires; the outer turn's set of it is unsent, so the view keeps it.
    daemon.send(turn("keys", ["k"]));
    assert.deepEqual(await result(), ['["k"]', []]);
    releaseSet.resolve();
    assert.deepEqual(await result(), ["error: the outer turn fails", []]);
    releaseRead.resolve();
    // It read the outer turn's 2; sending 1 would bring the key back without its expiry.
    assert.deepEqual(await result(), ["2", []]);
    daemon.send(turn("keys"));
    assert.deepEqual(await result(), ["[]", []]);
  });
});
