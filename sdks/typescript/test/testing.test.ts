// @troupe/sdk/testing beyond the cart example: steps, the shared daemon's clock, the time it reports.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Actor, actor, type CallFilter, InvalidArgument, method } from "../src/index.js";
import { clockStepText, TestDaemon, TestDaemonError, TestEnv } from "../src/testing.js";
import { troupeBin } from "./helpers.js";

let daemon: TestDaemon;
before(async () => {
  daemon = await TestDaemon.start({ binary: troupeBin() });
});
after(() => daemon.stop());

test("steps reach the daemon in its duration grammar", () => {
  assert.equal(clockStepText(30 * 24 * 3600), "2592000000ms");
  assert.equal(clockStepText("P30D"), "2592000000ms");
  assert.throws(() => clockStepText(-1), InvalidArgument);
});

test("a daemon that does not serve is reported", async () => {
  await assert.rejects(TestDaemon.start({ binary: "/bin/false" }), (err) => err instanceof TestDaemonError && /did not start/.test(err.message));
});

test("an env sharing its daemon refuses to move the clock", async () => {
  const env = new TestEnv(daemon, { ownsClock: false });
  try {
    await assert.rejects(env.advance(60), (err) => err instanceof TestDaemonError && /shares its daemon/.test(err.message));
  } finally {
    await env.close();
  }
});

test("the clock moves forward by the step and reports its time", async () => {
  const before = await daemon.now();
  const advanced = await daemon.advance("2h");
  assert.ok(advanced.now.getTime() - before.getTime() >= 2 * 3600 * 1000);
  assert.deepEqual([advanced.remindersFired, advanced.alarmsFired, advanced.timersFired], [0, 0, 0]);
  await assert.rejects(daemon.advance("soon"), InvalidArgument);
});

@actor("kit_filtered")
class KitFiltered extends Actor {
  @method
  who(): string {
    return this.ctx.metadata.user ?? "nobody";
  }
}

test("the env hosts with call filters", async () => {
  const env = new TestEnv(daemon, { ownsClock: false });
  try {
    const filtered: CallFilter = async (_call, next) => `${String(await next())} (filtered)`;
    await env.host({ filters: [filtered] }, KitFiltered);
    assert.equal(await env.actor<KitFiltered>(KitFiltered, TestEnv.uniqueId("k")).call("who"), "nobody (filtered)");
  } finally {
    await env.close();
  }
});
