// Unit tests without the daemon: the App attaches to a fake AppHost in the test, which
// sends it Activate and Turn messages carrying a placement lease. Past the lease the
// App answers leaseExpired and runs no user code.
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import { type Activate, type DaemonMessage, Deactivate_Reason, type Turn } from "../src/gen/troupe/v1/app.js";
import { TurnKind } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, App, type Logger, method } from "../src/index.js";
import { FakeDaemon } from "./fake_daemon.js";

const ran: string[] = [];

@actor("leased")
class Leased extends Actor<{ n: number; activated: boolean }> {
  readonly created = ran.push("constructor");

  override async onActivate(): Promise<void> {
    ran.push("onActivate");
    this.state.set("activated", true);
  }

  @method
  async incr(): Promise<number> {
    ran.push("incr");
    const n = this.state.get("n", 0) + 1;
    this.state.set("n", n);
    return n;
  }

  override onAlarm(): void {
    ran.push("onAlarm");
  }
}

const now = (): bigint => BigInt(Date.now());
const ref = { type: "leased", id: "a1" };

function activate(leaseDeadlineUnixMs: bigint): DaemonMessage {
  const value: Activate = { callId: 3n, actor: ref, state: {}, leaseDeadlineUnixMs };
  return { kind: { $case: "activate", value } };
}

function turn(leaseDeadlineUnixMs: bigint, kind = TurnKind.TURN_KIND_CALL, name = "incr"): DaemonMessage {
  const value: Turn = {
    callId: 7n,
    actor: ref,
    kind,
    name,
    payload: undefined,
    metadata: {},
    chain: undefined,
    traceparent: "",
    tracestate: "",
    deadlineUnixMs: 0n,
    leaseDeadlineUnixMs,
    expiredKeys: [],
    unanswered: false,
  };
  return { kind: { $case: "turn", value } };
}

function deactivate(): DaemonMessage {
  return { kind: { $case: "deactivate", value: { callId: 99n, actor: ref, reason: Deactivate_Reason.REASON_ADMIN } } };
}

describe("placement lease", () => {
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
    await daemon.start();
    app = new App({ actors: [Leased], address: `127.0.0.1:${daemon.port}`, appName: "lease-test", logger });
    await app.start({ timeout: 10 });
  });

  afterEach(async () => {
    // Drop the instance a test may have left, so each starts unactivated.
    daemon.send(deactivate());
    const answer = await daemon.next();
    assert.equal(answer.kind?.$case, "deactivated");
    ran.length = 0;
    warnings.length = 0;
  });

  after(async () => {
    await app.close();
    daemon.stop();
  });

  test("an Activate past its lease creates no instance and runs no hook", async () => {
    daemon.send(activate(now() - 2_000n));
    const answer = await daemon.next();
    assert.deepEqual(answer.kind, { $case: "activated", value: { callId: 3n, error: undefined, changes: [], leaseExpired: true } });
    assert.deepEqual(ran, []);
    assert.equal(warnings.length, 1);
    const m = /leased\/a1: .* ended (\d+) ms .*leaseExpired/.exec(warnings[0] ?? "");
    assert.ok(m, warnings[0]);
    const late = Number(m[1]);
    assert.ok(late >= 2_000 && late < 60_000, `late by ${String(late)} ms`);
    // Not activated: a turn finds no instance.
    daemon.send(turn(0n));
    const result = await daemon.next();
    assert.equal(result.kind?.$case === "turnResult" ? result.kind.value.outcome?.$case : undefined, "error");
  });

  test("a Turn past its lease runs no handler and answers no outcome and no changes", async () => {
    daemon.send(activate(0n));
    assert.equal((await daemon.next()).kind?.$case, "activated");
    ran.length = 0;
    for (const [kind, name, label] of [
      [TurnKind.TURN_KIND_CALL, "incr", "call incr"],
      [TurnKind.TURN_KIND_ALARM, "", "alarm"],
    ] as const) {
      daemon.send(turn(now() - 500n, kind, name));
      const answer = await daemon.next();
      assert.deepEqual(answer.kind, { $case: "turnResult", value: { callId: 7n, outcome: undefined, changes: [], leaseExpired: true, events: [] } });
      assert.match(warnings.at(-1) ?? "", new RegExp(`not running ${label} of leased/a1: .* ended \\d+ ms`));
    }
    assert.deepEqual(ran, []);
    assert.equal(warnings.length, 2);
  });

  for (const [what, deadline] of [
    ["without a lease (0)", () => 0n],
    ["within the lease", () => now() + 60_000n],
  ] as const) {
    test(`${what} the activation and the turn run`, async () => {
      daemon.send(activate(deadline()));
      const activated = await daemon.next();
      assert.equal(activated.kind?.$case, "activated");
      assert.equal(activated.kind.value.leaseExpired, false);
      assert.equal(activated.kind.value.error, undefined);
      assert.deepEqual(
        activated.kind.value.changes.map((c) => c.key),
        ["activated"],
      );
      daemon.send(turn(deadline()));
      const result = await daemon.next();
      assert.equal(result.kind?.$case, "turnResult");
      assert.equal(result.kind.value.leaseExpired, false);
      assert.equal(result.kind.value.outcome?.$case, "reply");
      assert.equal(Buffer.from(result.kind.value.outcome.value.data).toString(), "1");
      assert.deepEqual(ran, ["constructor", "onActivate", "incr"]);
      assert.deepEqual(warnings, []);
    });
  }
});
