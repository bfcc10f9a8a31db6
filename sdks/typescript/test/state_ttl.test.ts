// State keys that expire (State.set's `ttl`, docs/state.md): the changes the
// State view sends, the app dropping what the daemon says expired
// (Turn.expired_keys) on a fake daemon, and the whole round trip on the real
// daemon, moved through time by the test clock. An expiry meeting turns that
// run side by side: state_ttl_turns.test.ts.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type DaemonMessage, Turn } from "../src/gen/troupe/v1/app.js";
import { type StateChange, TurnKind } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, ActorError, type App, InvalidArgument, type Logger, method, ReadOnlyStateError, State } from "../src/index.js";
import { commitState, endTurn, expireState, refuseState, rollbackState } from "../src/state.js";
import { startTestEnv, type TestEnv } from "../src/testing.js";
import { currentTurn, TurnScope } from "../src/turn.js";
import { attachedApp, FakeDaemon } from "./fake_daemon.js";
import { troupeBin } from "./helpers.js";
import { committed, stored } from "./state_turns.js";

const HOUR_MS = 3_600_000n;

/** Each change as [key, value or "delete", its ttl_ms or "keep"]. */
function sent(changes: StateChange[]): [string, string, bigint | "keep"][] {
  return changes.map((c) => [
    c.key,
    c.op?.$case === "set" ? Buffer.from(c.op.value).toString("utf8") : "delete",
    c.ttlMs ?? "keep",
  ]);
}


type S = { k: number; other: number; list: number[] };

describe("State ttl, the changes it sends", () => {
  test("a ttl is sent as ttl_ms; null as 0; a plain set or in-place change leaves it unset", () => {
    const s = new State<S>(stored({ list: [1] }));
    const first = committed(s, () => {
      s.set("k", 1, { ttl: "1h" });
      s.set("other", 2, { ttl: null });
      s.get("list", []).push(2);
    });
    assert.deepEqual(sent(first), [
      ["k", "1", HOUR_MS],
      ["list", "[1,2]", "keep"],
      ["other", "2", 0n],
    ]);
    const second = committed(s, () => {
      s.set("k", 2);
      s.set("other", 3, { ttl: undefined });
      s.set("list", [3], {});
    });
    assert.deepEqual(sent(second), [
      ["k", "2", "keep"],
      ["list", "[3]", "keep"],
      ["other", "3", "keep"],
    ]);
    // A number is seconds, as in every duration option.
    assert.deepEqual(sent(committed(s, () => s.set("k", 3, { ttl: 90 }))), [["k", "3", 90_000n]]);
    // Plain changes never repeat an expiry already sent.
    assert.deepEqual(sent(committed(s, () => s.set("k", 4))), [["k", "4", "keep"]]);
  });

  test("a set with a ttl is sent even with the stored value: it renews the expiry", () => {
    const s = new State<S>(stored({ k: 1 }));
    assert.deepEqual(sent(committed(s, () => s.set("k", 1))), []);
    assert.deepEqual(sent(committed(s, () => s.set("k", 1, { ttl: "30m" }))), [["k", "1", 1_800_000n]]);
    assert.deepEqual(sent(committed(s, () => s.set("k", 1, { ttl: null }))), [["k", "1", 0n]]);
  });

  test("in one turn: the last ttl given wins and a later plain set keeps it", () => {
    const s = new State<S>();
    const changes = committed(s, () => {
      s.set("k", 1, { ttl: "1h" });
      s.set("k", 2, { ttl: "2h" });
      s.set("k", 3);
    });
    assert.deepEqual(sent(changes), [["k", "3", 2n * HOUR_MS]]);
  });

  test("a deletion ends the expiry: deleted and set again, the key does not expire", () => {
    const s = new State<S>(stored({ k: 1, other: 1 }));
    const changes = committed(s, () => {
      s.delete("k");
      s.set("k", 1);
      s.clear();
      s.set("other", 5);
    });
    // Unchanged in value, k must still be sent: the daemon would keep its old expiry.
    assert.deepEqual(sent(changes), [
      ["k", "delete", "keep"],
      ["other", "5", 0n],
    ]);
    const setThenDeleted = committed(s, () => {
      s.set("k", 2, { ttl: "1h" });
      s.delete("k");
    });
    assert.deepEqual(sent(setThenDeleted), []);
    const deletedThenSet = committed(s, () => {
      s.set("k", 3);
      s.delete("k");
      s.set("k", 3);
    });
    assert.deepEqual(sent(deletedThenSet), [["k", "3", 0n]]);
  });

  test("a ttl under a second, or not a duration, throws and changes nothing", () => {
    const s = new State<S>(stored({ k: 1 }));
    for (const ttl of [0.5, "500ms", 0, "0s"]) {
      assert.throws(
        () => s.set("k", 2, { ttl }),
        (e: unknown) => e instanceof RangeError && /ttl must be at least a second, got .* a bare number is seconds/.test(e.message),
      );
    }
    assert.throws(() => s.set("k", 2, { ttl: "soon" }), InvalidArgument);
    assert.throws(() => s.set("k", 2, { ttl: -5 }), InvalidArgument);
    assert.throws(() => s.set("k", 2, "1h" as unknown as { ttl: string }), (e: unknown) => e instanceof TypeError && /options, e\.g\. \{ ttl: "1h" \}/.test(e.message));
    assert.equal(s.get("k"), 1);
    assert.deepEqual(sent(commitState(s)), []);
    // The daemon keeps the expiry times under this key.
    assert.throws(() => (s as unknown as State<Record<string, number>>).set("$expires", 1), /daemon's/);
  });

  test("a read-only turn cannot set a ttl", () => {
    const s = new State<S>(stored({ k: 1 }));
    const scope = new TurnScope(s, "t/1", "peek", true);
    assert.throws(() => currentTurn.run(scope, () => s.set("k", 1, { ttl: "1h" })), ReadOnlyStateError);
    assert.deepEqual(refuseState(s, scope), []);
    endTurn(s, scope);
    assert.deepEqual(sent(commitState(s)), []);
  });

  test("a failed turn's ttl is forgotten with its changes", () => {
    const s = new State<S>(stored({ k: 1 }));
    const failed = new TurnScope(s, "t/1", "fails");
    currentTurn.run(failed, () => s.set("k", 1, { ttl: "1h" }));
    rollbackState(s, failed);
    endTurn(s, failed);
    const next = new TurnScope(s, "t/1", "next");
    currentTurn.run(next, () => s.set("k", 2));
    assert.deepEqual(sent(commitState(s, next)), [["k", "2", "keep"]]);
    endTurn(s, next);
  });

  test("turns side by side: each sends only its own ttls", () => {
    const s = new State<S>(stored({ k: 0, other: 0 }));
    const outer = new TurnScope(s, "t/1", "outer");
    const inner = new TurnScope(s, "t/1", "inner");
    currentTurn.run(outer, () => s.set("k", 0, { ttl: "1h" }));
    currentTurn.run(inner, () => s.set("other", s.get("k", 0) + 1));
    assert.deepEqual(sent(commitState(s, inner)), [["other", "1", "keep"]]);
    endTurn(s, inner);
    assert.deepEqual(sent(commitState(s, outer)), [["k", "0", HOUR_MS]]);
    endTurn(s, outer);
  });

  test("expired keys leave the view and the baseline; nothing is sent for them", () => {
    const s = new State<S>(stored({ k: 1, other: 2 }));
    expireState(s, ["k", "list"]);
    assert.equal(s.has("k"), false);
    assert.deepEqual(s.toJSON(), { other: 2 });
    assert.deepEqual(sent(commitState(s)), []);
    // Set again to its old value, it is a new key to send.
    assert.deepEqual(sent(committed(s, () => s.set("k", 1))), [["k", "1", "keep"]]);
  });
});

// The app's side on a fake daemon: a Turn naming expired keys reaches the handler
// without them, on whichever core TROUPE_SDK_CORE picks.

@actor("ttl_fake")
class TtlFake extends Actor<{ a: number; b: number }> {
  @method
  keys(): string[] {
    return [...this.state.keys()].sort();
  }

  @method
  bump(): number {
    const a = this.state.get("a", 0) + 1;
    this.state.set("a", a);
    return a;
  }

  override onReminder(): void {
    this.state.set("b", this.state.has("a") ? 1 : 0);
  }
}

describe("Turn.expired_keys on a fake daemon", () => {
  const daemon = new FakeDaemon();
  const quiet: Logger = { warn: () => undefined, info: () => undefined, debug: () => undefined };
  const ref = { type: "ttl_fake", id: "f1" };
  let app: App;
  let callId = 0n;

  function turn(name: string, expiredKeys: string[], kind = TurnKind.TURN_KIND_CALL): DaemonMessage {
    callId += 1n;
    const value = Turn.fromPartial({ callId, actor: ref, kind, name, expiredKeys });
    return { kind: { $case: "turn", value } };
  }

  /** Runs one turn and returns its reply's JSON and its changes. */
  async function run(msg: DaemonMessage): Promise<[string, [string, string, bigint | "keep"][]]> {
    daemon.send(msg);
    const answer = await daemon.next();
    assert.equal(answer.kind?.$case, "turnResult");
    const outcome = answer.kind.value.outcome;
    assert.equal(outcome?.$case, "reply", JSON.stringify(outcome));
    return [Buffer.from(outcome.value.data).toString("utf8"), sent(answer.kind.value.changes)];
  }

  before(async () => {
    app = await attachedApp(daemon, [TtlFake], "ttl-fake", quiet);
    daemon.send({ kind: { $case: "activate", value: { callId: 1n, actor: ref, state: stored({ a: 5, b: 7 }), leaseDeadlineUnixMs: 0n } } });
    assert.equal((await daemon.next()).kind?.$case, "activated");
  });

  after(async () => {
    await app.close();
    daemon.stop();
  });

  test("the handler runs without the expired keys, and the next change starts afresh", async () => {
    assert.deepEqual(await run(turn("keys", ["a", "nope"])), ['["b"]', []]);
    // Without the expiry, a would count on from 5; and it was not sent as a deletion.
    assert.deepEqual(await run(turn("bump", [])), ["1", [["a", "1", "keep"]]]);
  });

  test("a reminder's turn too", async () => {
    assert.deepEqual(await run(turn("r", ["a"], TurnKind.TURN_KIND_REMINDER)), ["null", [["b", "0", "keep"]]]);
  });
});

// The round trip on the real daemon: its test clock moves the time.

// Kept active across the clock's moves, so that what a turn sees comes from
// Turn.expired_keys, not from a new activation's state.
@actor("ttl_box", { idleTimeout: "30d" })
class TtlBox extends Actor<Record<string, unknown>> {
  @method
  put(key: string, value: unknown): void {
    this.state.set(key, value);
  }

  @method
  putFor(key: string, value: unknown, ttl: string | null): void {
    this.state.set(key, value, { ttl });
  }

  @method
  append(key: string, item: number): void {
    const list = this.state.get(key) as number[];
    list.push(item);
  }

  @method
  remove(key: string): void {
    this.state.delete(key);
  }

  /** Deleted and set again in one turn. */
  @method
  replace(key: string, value: unknown): void {
    this.state.delete(key);
    this.state.set(key, value);
  }

  @method
  read(key: string): unknown {
    return this.state.get(key) ?? null;
  }

  @method
  keys(): string[] {
    return [...this.state.keys()].sort();
  }

  @method
  count(key: string): number {
    const n = (this.state.get(key, 0) as number) + 1;
    this.state.set(key, n);
    return n;
  }

  @method
  putForThenFail(key: string, value: unknown, ttl: string): void {
    this.state.set(key, value, { ttl });
    throw new Error("the turn fails after its set");
  }

  /** What a set with this ttl throws, as [name, message]; the state is not changed. */
  @method
  tryTtl(key: string, ttl: number | string): [string, string] | null {
    try {
      this.state.set(key, 1, { ttl });
      return null;
    } catch (e) {
      return e instanceof Error ? [e.name, e.message] : ["?", String(e)];
    }
  }

  @method
  async remindAt(due: string): Promise<void> {
    await this.ctx.setReminder("look", { due });
  }

  override onReminder(): void {
    this.state.set("seenByReminder", this.state.has("k"));
  }
}

describe("keys that expire, on the daemon", () => {
  let env: TestEnv;
  let n = 0;
  const box = () => {
    n += 1;
    const id = `b${String(n)}`;
    return { id, handle: env.actor<TtlBox>(TtlBox, id) };
  };

  before(async () => {
    env = await startTestEnv({ binary: troupeBin() });
    await env.host(TtlBox);
  });

  after(async () => {
    await env.close();
  });

  test("a key set with a ttl is there until it expires, then gone everywhere", async () => {
    const { id, handle } = box();
    const before = await env.daemon.now();
    await handle.call("putFor", "k", 1, "1h");
    const after = await env.daemon.now();
    await handle.call("count", "n");
    // Only k expires, an hour after its turn by the daemon's clock.
    const expiry = await env.client.getStateExpiry("ttl_box", id);
    assert.deepEqual(Object.keys(expiry), ["k"]);
    const at = expiry["k"]?.getTime() ?? 0;
    assert.ok(at >= before.getTime() + 3_600_000 && at <= after.getTime() + 3_600_000, `k expires at ${String(expiry["k"])}`);
    await env.advance("59m");
    assert.deepEqual(await env.state(TtlBox, id), { k: 1, n: 1 });
    assert.equal(await handle.call("read", "k"), 1);
    await env.advance("2m");
    assert.deepEqual(await env.state(TtlBox, id), { n: 1 });
    assert.deepEqual(await env.client.getStateExpiry("ttl_box", id, ["k", "n"]), {});
    assert.deepEqual(await handle.call("keys"), ["n"]);
    assert.equal(await handle.call("read", "k"), null);
    // A counter whose key expired starts again (from the app's stale copy it would say 6).
    await handle.call("putFor", "c", 5, "1h");
    await env.advance("61m");
    assert.equal(await handle.call("count", "c"), 1);
    assert.deepEqual(await env.state(TtlBox, id), { n: 1, c: 1 });
  });

  test("changing the value, plainly or in place, keeps the expiry", async () => {
    const { id, handle } = box();
    await handle.call("putFor", "k", 1, "1h");
    await handle.call("putFor", "list", [1], "1h");
    await env.advance("30m");
    await handle.call("put", "k", 2);
    await handle.call("append", "list", 2);
    assert.deepEqual(await env.state(TtlBox, id), { k: 2, list: [1, 2] });
    await env.advance("31m");
    assert.deepEqual(await env.state(TtlBox, id), {});
    assert.deepEqual(await handle.call("keys"), []);
  });

  test("a ttl of null ends the expiry, even with the same value", async () => {
    const { id, handle } = box();
    await handle.call("putFor", "k", 1, "1h");
    await handle.call("putFor", "k", 1, null);
    assert.deepEqual(await env.client.getStateExpiry("ttl_box", id), {});
    await env.advance("2h");
    assert.deepEqual(await env.state(TtlBox, id), { k: 1 });
    assert.equal(await handle.call("read", "k"), 1);
  });

  test("setting the same value with a ttl renews the expiry", async () => {
    const { id, handle } = box();
    await handle.call("putFor", "k", 1, "1h");
    const first = (await env.client.getStateExpiry("ttl_box", id))["k"]?.getTime() ?? 0;
    await env.advance("50m");
    await handle.call("putFor", "k", 1, "1h");
    const renewed = (await env.client.getStateExpiry("ttl_box", id))["k"]?.getTime() ?? 0;
    assert.ok(renewed - first >= 50 * 60_000, `renewed from ${String(first)} to ${String(renewed)}`);
    await env.advance("50m");
    assert.deepEqual(await env.state(TtlBox, id), { k: 1 });
    await env.advance("11m");
    assert.deepEqual(await env.state(TtlBox, id), {});
    assert.equal(await handle.call("read", "k"), null);
  });

  test("a key deleted and set again without a ttl does not expire", async () => {
    const { id, handle } = box();
    await handle.call("putFor", "apart", 1, "1h");
    await handle.call("remove", "apart");
    await handle.call("put", "apart", 1);
    // In one turn the daemon sees only the set: the SDK must end the expiry.
    await handle.call("putFor", "together", 1, "1h");
    await handle.call("replace", "together", 1);
    await env.advance("2h");
    assert.deepEqual(await env.state(TtlBox, id), { apart: 1, together: 1 });
  });

  test("a ttl under a second throws in the handler", async () => {
    const { id, handle } = box();
    // Half a second as a bare number (seconds), and as a string.
    for (const thrown of [await handle.call("tryTtl", "k", 0.5), await handle.call("tryTtl", "k", "999ms")]) {
      assert.equal(thrown?.[0], "RangeError");
      assert.match(thrown[1], /ttl must be at least a second/);
    }
    assert.deepEqual(await env.state(TtlBox, id), {});
  });

  test("a failed turn's ttl is not applied", async () => {
    const { id, handle } = box();
    await handle.call("put", "k", 1);
    await assert.rejects(handle.call("putForThenFail", "k", 1, "1h"), (e: unknown) => e instanceof ActorError && /after its set/.test(e.message));
    // The next writing turn must not carry it either.
    await handle.call("put", "other", 1);
    await env.advance("2h");
    assert.deepEqual(await env.state(TtlBox, id), { k: 1, other: 1 });
    assert.equal(await handle.call("read", "k"), 1);
  });

  test("an expired key stays gone after a new activation, and a reminder's turn does not see it", async () => {
    const { id, handle } = box();
    await handle.call("putFor", "k", 1, "1h");
    await handle.call("put", "keep", 1);
    await handle.call("remindAt", "61m");
    await env.advance("62m");
    assert.deepEqual(await env.state(TtlBox, id), { keep: 1, seenByReminder: false });
    assert.equal(await env.deactivate(TtlBox, id), true);
    assert.equal(await handle.call("read", "k"), null);
    assert.deepEqual(await handle.call("keys"), ["keep", "seenByReminder"]);

    // Expired while not active: the new activation's state leaves it out.
    const other = box();
    await other.handle.call("putFor", "k", 1, "1h");
    assert.equal(await env.deactivate(TtlBox, other.id), true);
    await env.advance("61m");
    assert.equal(await other.handle.call("read", "k"), null);
    assert.deepEqual(await env.state(TtlBox, other.id), {});
  });
});
