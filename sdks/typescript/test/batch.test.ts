// Unit tests without the daemon: batching on the Attach stream. The App attaches to a
// fake AppHost in the test; it registers with acceptsBatches, runs each message of a
// DaemonBatch as if it came alone, and, once the daemon has sent a batch, sends the
// answers that are ready together in one AppBatch (a single answer alone).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { packAnswers } from "../src/session.js";
import { type AppMessage, type DaemonMessage, Deactivate_Reason, type Turn } from "../src/gen/troupe/v1/app.js";
import { TurnKind } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, API_VERSION, App, type Logger, method } from "../src/index.js";
import { attachedApp, FakeDaemon } from "./fake_daemon.js";

const ran: string[] = [];

@actor("batched")
class Batched extends Actor<{ n: number }> {
  override onActivate(): void {
    ran.push(`activate ${this.id}`);
  }

  @method
  async incr(): Promise<number> {
    ran.push(`incr ${this.id}`);
    const n = this.state.get("n", 0) + 1;
    this.state.set("n", n);
    return n;
  }

  override onDeactivate(): void {
    ran.push(`deactivate ${this.id}`);
  }
}

function ref(id: string): { type: string; id: string } {
  return { type: "batched", id };
}

function activate(callId: bigint, id: string): DaemonMessage {
  return { kind: { $case: "activate", value: { callId, actor: ref(id), state: {}, leaseDeadlineUnixMs: 0n } } };
}

function turn(callId: bigint, id: string): DaemonMessage {
  const value: Turn = {
    callId,
    actor: ref(id),
    kind: TurnKind.TURN_KIND_CALL,
    name: "incr",
    payload: undefined,
    metadata: {},
    chain: undefined,
    traceparent: "",
    tracestate: "",
    deadlineUnixMs: 0n,
    leaseDeadlineUnixMs: 0n,
    expiredKeys: [],
    unanswered: false,
  };
  return { kind: { $case: "turn", value } };
}

function deactivate(callId: bigint, id: string): DaemonMessage {
  return { kind: { $case: "deactivate", value: { callId, actor: ref(id), reason: Deactivate_Reason.REASON_IDLE } } };
}

function batch(...messages: DaemonMessage[]): DaemonMessage {
  return { kind: { $case: "batch", value: { messages } } };
}

/** The answers of `writes`, batches unpacked. */
function answersOf(writes: readonly AppMessage[]): AppMessage[] {
  return writes.flatMap((w) => (w.kind?.$case === "batch" ? w.kind.value.messages : [w]));
}

function callId(msg: AppMessage): bigint {
  const kind = msg.kind;
  switch (kind?.$case) {
    case "activated":
    case "turnResult":
    case "deactivated":
      return kind.value.callId;
    default:
      throw new Error(`not an answer: ${kind?.$case ?? "(empty)"}`);
  }
}

/** A DeactivateResult of about `size` bytes (one change of that many bytes). */
function deactivated(id: number, size = 0): AppMessage {
  const changes = size > 0 ? [{ key: "blob", op: { $case: "set" as const, value: Buffer.alloc(size) } }] : [];
  return { kind: { $case: "deactivated", value: { callId: BigInt(id), changes } } };
}

/** What packAnswers makes of `answers`: per write, the call ids of a batch, or the call id of an answer alone. */
function packed(answers: AppMessage[]): (number | number[])[] {
  return packAnswers(answers).map((w) => {
    if (w.kind?.$case !== "batch") return Number(callId(w));
    assert.ok(w.kind.value.messages.length > 1);
    return w.kind.value.messages.map((m) => Number(callId(m)));
  });
}

describe("batching on the app stream", () => {
  const daemon = new FakeDaemon();
  const warnings: string[] = [];
  const logger: Logger = {
    warn: (m) => {
      warnings.push(m);
    },
    info: () => undefined,
    debug: () => undefined,
  };
  let app: App;

  before(async () => {
    app = await attachedApp(daemon, [Batched], "batch-test", logger);
  });

  after(async () => {
    await app.close();
    daemon.stop();
  });

  test("Register sets acceptsBatches", () => {
    assert.equal(daemon.register?.acceptsBatches, true);
  });

  test("answers ready together go out in one AppBatch", async () => {
    daemon.send(batch(activate(1n, "a"), activate(2n, "b"), activate(3n, "c")));
    const writes = await daemon.writes(3);
    assert.equal(writes.length, 1);
    const [only] = writes;
    assert.equal(only?.kind?.$case, "batch");
    assert.deepEqual(answersOf(writes).map(callId), [1n, 2n, 3n]);
    for (const a of answersOf(writes)) {
      assert.equal(a.kind?.$case, "activated");
      assert.equal(a.kind.value.error, undefined);
    }
    assert.deepEqual(ran, ["activate a", "activate b", "activate c"]);
  });

  test("each message of a DaemonBatch runs and is answered as if it came alone", async () => {
    ran.length = 0;
    // Turns of different actors, one of an actor not active here, then a deactivation.
    daemon.send(batch(turn(10n, "b"), turn(11n, "a"), turn(12n, "zz"), turn(13n, "c"), deactivate(14n, "a")));
    const answers = new Map(answersOf(await daemon.writes(5)).map((a) => [callId(a), a]));
    assert.deepEqual([...answers.keys()].sort(), [10n, 11n, 12n, 13n, 14n]);
    for (const id of [10n, 11n, 13n]) {
      const kind = answers.get(id)?.kind;
      assert.equal(kind?.$case, "turnResult");
      assert.equal(kind.value.outcome?.$case, "reply");
      assert.equal(Buffer.from(kind.value.outcome.value.data).toString(), "1");
      assert.deepEqual(
        kind.value.changes.map((c) => c.key),
        ["n"],
      );
    }
    const missing = answers.get(12n)?.kind;
    assert.equal(missing?.$case, "turnResult");
    assert.equal(missing.value.outcome?.$case, "error");
    assert.equal(missing.value.outcome.value.type, "LookupError");
    assert.equal(answers.get(14n)?.kind?.$case, "deactivated");
    assert.deepEqual(ran, ["incr b", "incr a", "incr c", "deactivate a"]);
    // "a" is gone: a turn finds no instance.
    daemon.send(turn(15n, "a"));
    const [again] = answersOf(await daemon.writes(1));
    assert.equal(again?.kind?.$case === "turnResult" ? again.kind.value.outcome?.$case : undefined, "error");
  });

  test("a burst is answered in few full batches", async () => {
    const n = 5_000;
    for (let start = 0; start < n; start += 256) {
      const ids = Array.from({ length: Math.min(256, n - start) }, (_, i) => start + i);
      daemon.send(batch(...ids.map((i) => activate(BigInt(1_000 + i), `burst${String(i)}`))));
    }
    const writes = await daemon.writes(n);
    const ids = answersOf(writes).map((a) => Number(callId(a)) - 1_000);
    assert.deepEqual(
      ids.sort((a, b) => a - b),
      Array.from({ length: n }, (_, i) => i),
    );
    assert.ok(writes.length <= 2 * (Math.floor(n / 256) + 1), `${String(writes.length)} writes`);
    for (const w of writes) assert.ok(w.kind?.$case !== "batch" || w.kind.value.messages.length <= 256);
  });

  test("a single answer goes alone", async () => {
    daemon.send(turn(20n, "b"));
    const [alone] = await daemon.writes(1);
    assert.equal(alone?.kind?.$case, "turnResult");
    daemon.send(batch(turn(21n, "c")));
    const [fromBatch] = await daemon.writes(1);
    assert.equal(fromBatch?.kind?.$case, "turnResult");
    assert.equal(callId(fromBatch), 21n);
  });

  test("unexpected messages in a batch are skipped with a warning", async () => {
    warnings.length = 0;
    const registered: DaemonMessage = {
      kind: { $case: "registered", value: { types: [], daemonVersion: "x", acceptsBatches: true, apiVersion: API_VERSION, acceptsParts: false } },
    };
    daemon.send(batch(registered, batch(activate(30n, "x")), activate(31n, "d")));
    assert.deepEqual(answersOf(await daemon.writes(1)).map(callId), [31n]);
    assert.deepEqual(warnings, ["troupe: ignoring unexpected daemon message registered in a batch", "troupe: ignoring unexpected daemon message batch in a batch"]);
  });
});

describe("packAnswers", () => {
  test("one answer is written as itself, none as nothing", () => {
    assert.deepEqual(packed([deactivated(1)]), [1]);
    assert.deepEqual(packed([]), []);
  });

  test("a batch holds at most 256 answers", () => {
    const all = Array.from({ length: 300 }, (_, i) => i);
    assert.deepEqual(packed(all.map((i) => deactivated(i))), [all.slice(0, 256), all.slice(256)]);
  });

  test("a batch stays under 1 MiB", () => {
    // 17 answers of 60 KiB fit in 1 MiB, 18 do not.
    const all = Array.from({ length: 40 }, (_, i) => i);
    assert.deepEqual(packed(all.map((i) => deactivated(i, 60 * 1024))), [all.slice(0, 17), all.slice(17, 34), all.slice(34)]);
  });

  test("an answer larger than 64 KiB goes alone, in order", () => {
    const big = 64 * 1024 + 1;
    const answers = [deactivated(1), deactivated(2), deactivated(3, big), deactivated(4), deactivated(5), deactivated(6, big), deactivated(7, big)];
    assert.deepEqual(packed(answers), [[1, 2], 3, [4, 5], 6, 7]);
  });
});
