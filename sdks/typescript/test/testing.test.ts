// @troupe/sdk/testing beyond the cart example: steps, the shared daemon's clock, the time it reports.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Actor, actor, type CallFilter, DeadlineExceeded, InvalidArgument, method, NotFound, type TellOptions } from "../src/index.js";
import { clockStepText, startTestEnv, TestDaemon, TestDaemonError, TestEnv } from "../src/testing.js";
import { troupeBin, within } from "./helpers.js";

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

test("a call to a type no app registered is NotFound at once, not after a start-up wait", async () => {
  // The kit's daemon runs with --host-wait 0s. With the daemon's default (10s)
  // the call to the misspelled type would wait that long for an app to
  // register it, and the 5 s bound below would fail the test.
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitFiltered);
    await assert.rejects(within(5_000, "the call to a misspelled type", env.actor("kit_filterd", "k1").call("who")), NotFound);
  } finally {
    await env.close();
  }
});

test("a --host-wait in extraArgs replaces the kit's", async () => {
  // The daemon takes the flag once: were the kit to add its own too, it would not start.
  const env = await startTestEnv({ binary: troupeBin(), extraArgs: ["--host-wait=10s"] });
  try {
    await env.host(KitFiltered);
    assert.equal(await env.actor<KitFiltered>(KitFiltered, "k1").call("who"), "nobody");
  } finally {
    await env.close();
  }
});

test("a TROUPE_HOST_WAIT in the environment replaces the kit's", async () => {
  // Out of the daemon's range: the daemon refuses to start only if the kit leaves the
  // environment's value in force rather than overriding it with its own flag.
  process.env.TROUPE_HOST_WAIT = "25h";
  try {
    await assert.rejects(
      TestDaemon.start({ binary: troupeBin() }),
      (err) => err instanceof TestDaemonError && /host_wait/.test(err.message),
    );
  } finally {
    delete process.env.TROUPE_HOST_WAIT;
  }
});

@actor("kit_standup")
class KitStandup extends Actor<{ held: number }> {
  @method
  async plan(): Promise<void> {
    await this.ctx.setReminder("standup", { cron: "0 9 * * MON-FRI", timeZone: "Asia/Kolkata" });
  }

  override onReminder(): void {
    this.state.set("held", this.state.get("held", 0) + 1);
  }
}

@actor("kit_digest")
class KitDigest extends Actor<{ sent: number }> {
  @method
  async plan(): Promise<void> {
    await this.ctx.setReminder("digest", { cron: "@daily", jitter: "1h" });
  }

  override onReminder(): void {
    this.state.set("sent", this.state.get("sent", 0) + 1);
  }
}

test("jittered reminders set alike fire at their own delay", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitDigest);
    const delays = new Set<number>();
    let first: Date | null = null;
    for (let i = 0; i < 8; i++) {
      await env.actor<KitDigest>(KitDigest, `u${String(i)}`).call("plan");
      const planned = await env.client.getReminder(KitDigest, `u${String(i)}`, "digest");
      assert.ok(planned !== null);
      assert.equal(planned.jitterMs, 3_600_000);
      assert.ok(planned.jitterDelayMs >= 0 && planned.jitterDelayMs < 3_600_000, String(planned.jitterDelayMs));
      // Midnight UTC plus the reminder's own delay.
      assert.equal((planned.nextDue.getTime() - planned.jitterDelayMs) % 86_400_000, 0);
      delays.add(planned.jitterDelayMs);
      first ??= planned.nextDue;
    }
    assert.ok(delays.size > 1, "eight reminders set alike share one delay");
    // Setting it again keeps the delay.
    await env.actor<KitDigest>(KitDigest, "u0").call("plan");
    const again = await env.client.getReminder(KitDigest, "u0", "digest");
    assert.deepEqual(again?.nextDue, first);
  } finally {
    await env.close();
  }
});

test("a calendar reminder fires at its zone's wall time", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitStandup);
    await env.actor<KitStandup>(KitStandup, "team").call("plan");
    const planned = await env.client.getReminder(KitStandup, "team", "standup");
    assert.ok(planned !== null);
    assert.deepEqual([planned.cron, planned.timeZone, planned.periodMs], ["0 9 * * MON-FRI", "Asia/Kolkata", null]);
    // 09:00 in Kolkata (UTC+05:30 all year) is 03:30 UTC, on a weekday there.
    const due = planned.nextDue;
    assert.deepEqual([due.getUTCHours(), due.getUTCMinutes()], [3, 30]);
    assert.ok(due.getUTCDay() >= 1 && due.getUTCDay() <= 5, due.toISOString());
    // A week holds five weekdays whatever day it starts on.
    const advanced = await env.advance("168h");
    assert.equal(advanced.remindersFired, 5);
    assert.deepEqual(await env.state(KitStandup, "team", "held"), { held: 5 });
  } finally {
    await env.close();
  }
});

@actor("kit_billing")
class KitBilling extends Actor<{ bills: number }> {
  @method
  async plan(): Promise<void> {
    await this.ctx.setReminder("bill", { due: "1h", period: "1h" });
  }

  @method
  async hold(): Promise<boolean> {
    const held = await this.ctx.pauseReminder("bill");
    return held?.paused ?? false;
  }

  override onReminder(): void {
    this.state.set("bills", this.state.get("bills", 0) + 1);
  }
}

test("a paused reminder waits for resume and survives a set", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitBilling);
    const billing = env.actor<KitBilling>(KitBilling, "acme");
    await billing.call("plan");
    assert.equal(await billing.call("hold"), true);
    // Set again, as at each activation: still paused, and nothing fires.
    await billing.call("plan");
    assert.equal((await env.client.getReminder(KitBilling, "acme", "bill"))?.paused, true);
    assert.equal((await env.advance("5h")).remindersFired, 0);
    const resumed = await env.client.resumeReminder(KitBilling, "acme", "bill");
    assert.equal(resumed?.paused, false);
    // Due four hours ago: it fires once for what it missed, then on schedule.
    await env.advance("1s");
    assert.deepEqual(await env.state(KitBilling, "acme", "bills"), { bills: 1 });
    assert.equal(await env.client.pauseReminder(KitBilling, "acme", "nothing"), null);
  } finally {
    await env.close();
  }
});

@actor("kit_cart")
class KitCart extends Actor<{ items: Record<string, number>; note: string }> {
  @method
  add(sku: string): number {
    const items = { ...this.state.get("items", {}) };
    items[sku] = (items[sku] ?? 0) + 1;
    this.state.set("items", items);
    return Object.values(items).reduce((a, b) => a + b, 0);
  }
}

test("setState gives an actor a starting point", async () => {
  const env = new TestEnv(daemon, { ownsClock: false });
  try {
    await env.host(KitCart);
    const id = TestEnv.uniqueId("c");
    await env.setState(KitCart, id, { items: { apple: 2 }, note: "gift" });
    assert.equal(await env.actor<KitCart>(KitCart, id).call("add", "apple"), 3);
    // Active now: the app's copy of the state ends with its activation, and
    // the next turn starts on the new state.
    await env.setState(KitCart, id, { items: {} }, { delete: ["note"] });
    assert.equal(await env.actor<KitCart>(KitCart, id).call("add", "pear"), 1);
    assert.deepEqual(await env.state(KitCart, id), { items: { pear: 1 } });
    await assert.rejects(env.setState(KitCart, id, { bad: 1n }), (err) => err instanceof TypeError && /JSON-serialisable/.test(err.message));
    await assert.rejects(env.setState(KitCart, id, { "": 1 }), (err) => err instanceof InvalidArgument && /state key/.test(err.message));
    await assert.rejects(env.setState(KitCart, id), (err) => err instanceof TypeError && /values to store or keys to delete/.test(err.message));
  } finally {
    await env.close();
  }
});

@actor("kit_login")
class KitLogin extends Actor<{ token: string; scope: string }> {
  /** Holds a session token that lasts an hour. */
  @method
  issue(token: string): void {
    this.state.set("token", token, { ttl: "1h" });
  }

  @method
  token(): string | null {
    return this.state.get("token") ?? null;
  }
}

test("setState with a ttl expires the keys on the clock", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitLogin);
    const login = env.actor<KitLogin>(KitLogin, "u1");
    await env.setState(KitLogin, "u1", { token: "t-1", scope: "read" }, { ttl: "1h" });
    assert.deepEqual(await env.state(KitLogin, "u1"), { token: "t-1", scope: "read" });
    const now = await env.daemon.now();
    const expiry = await env.client.getStateExpiry("kit_login", "u1");
    assert.deepEqual(Object.keys(expiry).sort(), ["scope", "token"]);
    assert.ok(Math.abs((expiry.token?.getTime() ?? 0) - now.getTime() - 3_600_000) < 5_000, String(expiry.token));

    await env.advance("30m");
    assert.deepEqual(await env.state(KitLogin, "u1"), { token: "t-1", scope: "read" });
    assert.equal(await login.call("token"), "t-1");
    await env.advance("31m");
    assert.deepEqual(await env.state(KitLogin, "u1"), {});
    assert.equal(await login.call("token"), null);
  } finally {
    await env.close();
  }
});

test("setState without a ttl keeps the expiry, and ttl null ends it", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitLogin);
    // Set by a turn, replaced without a ttl: the hour still runs.
    await env.actor<KitLogin>(KitLogin, "kept").call("issue", "t-1");
    await env.setState(KitLogin, "kept", { token: "t-2" });
    // Set by a turn, then ended by the edit: it outlives the hour.
    await env.actor<KitLogin>(KitLogin, "ended").call("issue", "t-1");
    await env.setState(KitLogin, "ended", { token: "t-2" }, { ttl: null });
    assert.deepEqual(await env.client.getStateExpiry("kit_login", "ended"), {});
    // A ttl in seconds replacing an earlier one.
    await env.setState(KitLogin, "renewed", { token: "t-1" }, { ttl: "10m" });
    await env.setState(KitLogin, "renewed", { token: "t-2" }, { ttl: 2 * 3600 });

    await env.advance("61m");
    assert.deepEqual(await env.state(KitLogin, "kept"), {});
    assert.deepEqual(await env.state(KitLogin, "ended"), { token: "t-2" });
    assert.equal(await env.actor<KitLogin>(KitLogin, "ended").call("token"), "t-2");
    assert.deepEqual(await env.state(KitLogin, "renewed"), { token: "t-2" });
    await env.advance("60m");
    assert.deepEqual(await env.state(KitLogin, "renewed"), {});
    assert.deepEqual(await env.state(KitLogin, "ended"), { token: "t-2" });
  } finally {
    await env.close();
  }
});

test("setState refuses a ttl it cannot apply", async () => {
  const env = new TestEnv(daemon, { ownsClock: false });
  try {
    const user = TestEnv.uniqueId("u");
    await assert.rejects(env.setState(KitLogin, user, { token: "t-1" }, { ttl: 0.5 }), (err) => err instanceof RangeError && /at least a second/.test(err.message));
    await assert.rejects(env.setState(KitLogin, user, { token: "t-1" }, { ttl: "soon" }), (err) => err instanceof InvalidArgument && /ttl "soon" is not a duration/.test(err.message));
    await assert.rejects(env.setState(KitLogin, user, {}, { ttl: "1h" }), (err) => err instanceof TypeError && /ttl expires the keys in values/.test(err.message));
    await assert.rejects(env.setState(KitLogin, user, {}, { delete: ["token"], ttl: "1h" }), (err) => err instanceof TypeError && /ttl expires the keys in values/.test(err.message));
    assert.deepEqual(await env.state(KitLogin, user), {});
  } finally {
    await env.close();
  }
});

@actor("kit_trial")
class KitTrial extends Actor<{ active: boolean; reason: string }> {
  /** Starts a trial that ends itself: a delayed tell to the actor's future self. */
  @method
  async start(): Promise<string | null> {
    this.state.set("active", true);
    return this.ctx.tell("kit_trial", this.id, "expire", [], {}, { delay: "14d" });
  }

  @method
  expire(reason = "trial over"): void {
    this.state.set("active", false);
    this.state.set("reason", reason);
  }
}

test("a delayed tell arrives when its time comes", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitTrial);
    const reminder = await env.actor<KitTrial>(KitTrial, "t1").call("start");
    assert.ok(typeof reminder === "string" && reminder.startsWith("$tell:"), String(reminder));
    assert.equal((await env.client.getReminder(KitTrial, "t1", reminder))?.tellMethod, "expire");
    await env.advance("312h");
    assert.deepEqual(await env.state(KitTrial, "t1", "active"), { active: true });
    // The advance returns once the tell that came due has run.
    await env.advance("48h");
    assert.deepEqual(await env.state(KitTrial, "t1", "active"), { active: false });
    assert.equal(await env.client.getReminder(KitTrial, "t1", reminder), null);

    // From a client, with a key; deleting its reminder cancels it.
    const named = await env.client.tell("kit_trial", "t2", "expire", { reason: "cancelled?" }, undefined, { delay: "1h", idempotencyKey: "k2" });
    assert.equal(named, "$tell:k2");
    assert.equal(await env.client.deleteReminder(KitTrial, "t2", "$tell:k2"), true);
    await env.advance("2h");
    assert.deepEqual(await env.state(KitTrial, "t2", "reason"), {});
    // A plain tell resolves to null; a delayed one cannot be best effort.
    assert.equal(await env.client.tell("kit_trial", "t3", "expire"), null);
    await assert.rejects(env.client.tell("kit_trial", "t3", "expire", [], {}, { delay: "1h", durable: false }), (err) => err instanceof InvalidArgument && /cannot be best effort/.test(err.message));
    await assert.rejects(env.client.tell("kit_trial", "t3", "expire", [], {}, { delay: 0 }), (err) => err instanceof InvalidArgument && /delay/.test(err.message));
  } finally {
    await env.close();
  }
});

test("a tell at a time is read against the daemon's clock", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitTrial);
    // The kit's clock runs 30 days ahead of the wall clock from here on: a delay
    // computed by the caller from its own clock would be 30 days too long.
    await env.advance("720h");
    const at = new Date((await env.daemon.now()).getTime() + 2 * 3_600_000);
    const named = await env.client.tell("kit_trial", "t4", "expire", ["at two"], undefined, { at });
    assert.ok(named !== null && named.startsWith("$tell:"), String(named));
    const waiting = await env.client.getReminder(KitTrial, "t4", named);
    assert.ok(waiting !== null && Math.abs(waiting.nextDue.getTime() - at.getTime()) < 5_000, String(waiting?.nextDue));
    await env.advance("1h");
    assert.deepEqual(await env.state(KitTrial, "t4", "reason"), {});
    await env.advance("2h");
    assert.deepEqual(await env.state(KitTrial, "t4", "reason"), { reason: "at two" });

    // A time the daemon's clock has passed (an hour from now on the wall clock, a
    // month ago on the kit's) is delivered at once, still as a stored tell.
    const wall = new Date(Date.now() + 3_600_000).toISOString();
    const past = await env.client.tell("kit_trial", "t5", "expire", ["late"], undefined, { at: wall });
    assert.ok(past?.startsWith("$tell:"), String(past));
    await env.advance("1s");
    assert.deepEqual(await env.state(KitTrial, "t5", "reason"), { reason: "late" });

    const refused = (options: TellOptions, pattern: RegExp) =>
      assert.rejects(env.client.tell("kit_trial", "t6", "expire", [], {}, options), (err) => err instanceof InvalidArgument && pattern.test(err.message));
    await refused({ at: "10m" }, /not a time/);
    await refused({ at: new Date(Number.NaN) }, /invalid Date/);
    await refused({ at, delay: "1h" }, /not both/);
    await refused({ at, durable: false }, /cannot be best effort/);
    await refused({ at: "2026-13-01T00:00:00Z" }, /deliver_at/);
    await assert.rejects(async () => env.client.actor(KitTrial, "t6", { at } as object), (err) => err instanceof InvalidArgument && /handle/.test(err.message));
  } finally {
    await env.close();
  }
});

/** The ids whose onDeactivate ran. */
const sessionsEnded: string[] = [];

@actor("kit_session", { retention: "1h" })
class KitSession extends Actor<{ seen: number }> {
  /** A session nobody keeps: erased an hour after its last activation ends. */
  @method
  touch(): number {
    const seen = this.state.get("seen", 0) + 1;
    this.state.set("seen", seen);
    return seen;
  }

  override onDeactivate(): void {
    sessionsEnded.push(this.id);
  }
}

test("an actor nothing reached for its retention is erased", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitSession);
    const session = env.actor<KitSession>(KitSession, "s1");
    assert.equal(await session.call("touch"), 1);
    assert.equal(await env.deactivate(KitSession, "s1"), true);
    assert.deepEqual(sessionsEnded, ["s1"]);
    assert.equal(await env.deactivate(KitSession, "s1"), false);
    // The daemon's reminder it waits as, due an hour after the end.
    assert.notEqual(await env.client.getReminder(KitSession, "s1", "$retain"), null);

    await env.advance("59m");
    assert.deepEqual(await env.state(KitSession, "s1"), { seen: 1 });
    await env.advance("2m");
    assert.deepEqual(await env.state(KitSession, "s1"), {});
    // Called again, it starts afresh.
    assert.equal(await session.call("touch"), 1);
  } finally {
    await env.close();
  }
});

test("a retention under a minute is refused at the decorator", () => {
  assert.throws(() => actor("kit_short", { retention: 30 }), (err) => err instanceof TypeError && /at least a minute/.test(err.message));
});

@actor("kit_ticker")
class KitTicker extends Actor<{ ticks: number }> {
  /** Sets its timer as Orleans and Dapr users do: when it activates. */
  override async onActivate(): Promise<void> {
    await this.ctx.setTimer("tick", { due: "1m", period: "1m" });
  }

  override onTimer(): void {
    this.state.set("ticks", this.state.get("ticks", 0) + 1);
  }

  @method({ readonly: true })
  ticks(): number {
    return this.state.get("ticks", 0);
  }
}

test("a timer set by the activation hook fires as the clock moves", async () => {
  const env = await startTestEnv({ binary: troupeBin() });
  try {
    await env.host(KitTicker);
    const ticker = env.actor<KitTicker>(KitTicker, "t1");
    // A daemon that refused timers until the activation was done ("actor ... is
    // not active") failed the hook, and so this first call.
    assert.equal(await ticker.call("ticks"), 0);
    assert.equal((await env.advance("3m")).timersFired, 3);
    assert.equal(await ticker.call("ticks"), 3);
  } finally {
    await env.close();
  }
});

/** Releases the reminder turn KitStuck holds; set by the test that starts one. */
let releaseStuck: (() => void) | undefined;

@actor("kit_stuck")
class KitStuck extends Actor {
  @method
  async arm(): Promise<void> {
    // A reminder, not a timer: a timer's firing stops waiting for its turn
    // after the call timeout too, racing the advance's own wait; a reminder
    // stays due until its turn ends (the turn timeout, 60 s).
    await this.ctx.setReminder("stuck", { due: "1m" });
  }

  override async onReminder(): Promise<void> {
    await new Promise<void>((resolve) => {
      releaseStuck = resolve;
    });
  }
}

test("the kit's errors read as the daemon wrote them, question marks included", async () => {
  // grpc-js leaves `?` and `#` of a percent-encoded grpc-message encoded: this
  // error read "...or its app gone%3F (DEADLINE_EXCEEDED)".
  const env = await startTestEnv({ binary: troupeBin(), extraArgs: ["--call-timeout", "1s"] });
  try {
    await env.host(KitStuck);
    await env.actor<KitStuck>(KitStuck, "s1").call("arm");
    await assert.rejects(env.advance("1m"), (err: unknown) => {
      assert.ok(err instanceof DeadlineExceeded, String(err));
      assert.match(err.message, /is an actor's turn stuck, or its app gone\? \(DEADLINE_EXCEEDED\)$/);
      return true;
    });
  } finally {
    releaseStuck?.();
    await env.close();
  }
});
