// Unit tests without the daemon: a large message in pieces (MessagePart) on the app
// stream, on whichever core loads (the suite runs on both). The App registers with
// acceptsParts, runs a small turn that comes between the pieces of a large one at
// once, and the large one when its last piece is in.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Pieces } from "../src/grpc_wire.js";
import { type AppMessage, DaemonMessage, type Turn } from "../src/gen/troupe/v1/app.js";
import { ContentType, TurnKind } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, App, type Logger, method } from "../src/index.js";
import { attachedApp, FakeDaemon } from "./fake_daemon.js";

const PIECE = 128 * 1024;

@actor("pieces")
class Measure extends Actor {
  @method
  async size(value: string): Promise<number> {
    return Promise.resolve(value.length);
  }
}

function ref(id: string): { type: string; id: string } {
  return { type: "pieces", id };
}

function turn(callId: bigint, id: string, value: string): DaemonMessage {
  const turn: Turn = {
    callId,
    actor: ref(id),
    kind: TurnKind.TURN_KIND_CALL,
    name: "size",
    payload: { data: Buffer.from(JSON.stringify({ args: [value] })), contentType: ContentType.CONTENT_TYPE_UNSPECIFIED },
    metadata: {},
    chain: undefined,
    traceparent: "",
    tracestate: "",
    deadlineUnixMs: 0n,
    leaseDeadlineUnixMs: 0n,
    expiredKeys: [],
    unanswered: false,
  };
  return { kind: { $case: "turn", value: turn } };
}

/** `msg` cut as the daemon cuts it: the whole's size on the first piece. */
function pieces(msg: DaemonMessage): DaemonMessage[] {
  const data = Buffer.from(DaemonMessage.encode(msg).finish());
  const out: DaemonMessage[] = [];
  for (let at = 0; at < data.length; at += PIECE) {
    const end = Math.min(at + PIECE, data.length);
    out.push({
      kind: {
        $case: "part",
        value: { data: data.subarray(at, end), last: end === data.length, wholeBytes: at === 0 ? BigInt(data.length) : 0n },
      },
    });
  }
  return out;
}

function replyOf(writes: readonly AppMessage[], callId: bigint): unknown {
  for (const w of writes.flatMap((m) => (m.kind?.$case === "batch" ? m.kind.value.messages : [m]))) {
    if (w.kind?.$case === "turnResult" && w.kind.value.callId === callId && w.kind.value.outcome?.$case === "reply") {
      return JSON.parse(Buffer.from(w.kind.value.outcome.value.data).toString()) as unknown;
    }
  }
  return undefined;
}

describe("large messages in pieces on the app stream", () => {
  const daemon = new FakeDaemon();
  const logger: Logger = { warn: () => undefined, info: () => undefined, debug: () => undefined };
  let app: App;

  before(async () => {
    app = await attachedApp(daemon, [Measure], "parts-test", logger);
  });

  after(async () => {
    await app.close();
    daemon.stop();
  });

  test("Register sets acceptsParts", () => {
    assert.equal(daemon.register?.acceptsParts, true);
  });

  test("a small turn between the pieces of a large one runs at once", async () => {
    for (const [i, id] of ["large", "small"].entries()) {
      daemon.send({ kind: { $case: "activate", value: { callId: BigInt(i + 1), actor: ref(id), state: {}, leaseDeadlineUnixMs: 0n } } });
    }
    await daemon.writes(2);
    const large = pieces(turn(10n, "large", "x".repeat(3 * PIECE)));
    assert.ok(large.length > 2);
    const [first, ...rest] = large;
    if (first === undefined) throw new Error("no pieces");
    daemon.send(first);
    daemon.send(turn(11n, "small", "abc"));
    const smallFirst = await daemon.writes(1);
    assert.equal(replyOf(smallFirst, 11n), 3);
    for (const piece of rest) daemon.send(piece);
    assert.equal(replyOf(await daemon.writes(1), 10n), 3 * PIECE);
  });
});

test("pieces over the app's limit are refused", () => {
  const whole = pieces(turn(1n, "large", "x".repeat(3 * PIECE)));
  const parts = whole.map((m) => {
    if (m.kind?.$case !== "part") throw new Error("not a piece");
    return m.kind.value;
  });
  const [first] = parts;
  if (first === undefined) throw new Error("no pieces");
  assert.throws(() => new Pieces(64 * 1024).push(first), /maxReceiveBytes=65536/);
  // Pieces that do not say the whole's size are refused once they add up to more.
  const bounded = new Pieces(2 * PIECE);
  assert.throws(() => {
    for (const p of parts) bounded.push({ ...p, wholeBytes: 0n });
  }, RangeError);
  const unbounded = new Pieces(undefined);
  const results = parts.map((p) => unbounded.push(p));
  assert.ok(results.slice(0, -1).every((r) => r === undefined));
  assert.equal(results.at(-1)?.kind?.$case, "turn");
});

test("an absurd announced size is not allocated ahead", () => {
  const data = Buffer.from(DaemonMessage.encode(turn(5n, "small", "abc")).finish());
  const unbounded = new Pieces(undefined);
  assert.equal(unbounded.push({ data: data.subarray(0, 4), last: false, wholeBytes: 1n << 60n }), undefined);
  const whole = unbounded.push({ data: data.subarray(4), last: true, wholeBytes: 0n });
  assert.equal(whole?.kind?.$case === "turn" ? whole.kind.value.callId : undefined, 5n);
});
