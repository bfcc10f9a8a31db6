// End-to-end tests of reminders, alarms and timers against the real daemon binary.
// Actors report to the test through in-process event logs (the app runs in this
// process); every wait is bounded. Fixed waits appear only where a test checks
// that something does NOT happen any more.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, actor, Client, FailedPrecondition, InvalidArgument, method, type Reminder } from "../src/index.js";
import { type Daemon, host, startDaemon, within } from "./helpers.js";

const WAIT_MS = 15_000;

/** An append-only log of what actors did, with bounded waits for the n-th entry. */
class Events<T> {
  readonly items: T[] = [];
  #waiters: { count: number; resolve: () => void }[] = [];

  push(item: T): void {
    this.items.push(item);
    this.#waiters = this.#waiters.filter((w) => {
      if (this.items.length < w.count) return true;
      w.resolve();
      return false;
    });
  }

  get length(): number {
    return this.items.length;
  }

  /** Resolve with the entries once there are at least `count`. */
  async atLeast(count: number, what: string, ms = WAIT_MS): Promise<T[]> {
    if (this.items.length < count) {
      await within(
        ms,
        `${what} (have ${this.items.length} of ${count})`,
        new Promise<void>((resolve) => {
          this.#waiters.push({ count, resolve });
        }),
      );
    }
    return [...this.items];
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Poll `check` (an RPC, so no event exists to await) every 25 ms until it returns true; bounded. */
async function eventually(what: string, check: () => Promise<boolean>, ms = WAIT_MS): Promise<void> {
  const end = performance.now() + ms;
  for (;;) {
    if (await check()) return;
    if (performance.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}

interface Firing {
  id: string;
  name: string;
  data: unknown;
  at: number;
}

describe("reminders, alarms and timers", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await startDaemon();
    client = new Client({ address: daemon.address, timeout: 20 });
  });
  after(async () => {
    client.close();
    await daemon.dispose();
  });

  test("a reminder set from the client activates an inactive actor and fires onReminder", async () => {
    const fired = new Events<Firing>();
    const activated = new Events<string>();
    @actor("rem-basic")
    class Basic extends Actor<{ seen: number }> {
      override onActivate(): void {
        activated.push(this.id);
      }

      override onReminder(name: string, data: unknown): void {
        this.state.set("seen", this.state.get("seen", 0) + 1);
        fired.push({ id: this.id, name, data, at: performance.now() });
      }

      @method
      seen(): number {
        return this.state.get("seen", 0);
      }
    }
    const app = await host(daemon.address, Basic);
    try {
      const set = performance.now();
      const r = await client.setReminder("rem-basic", "b1", "hello", { due: "150ms", data: { x: 1, s: "ü" } });
      assert.equal(r.actorType, "rem-basic");
      assert.equal(r.actorId, "b1");
      assert.equal(r.name, "hello");
      assert.equal(r.periodMs, null);
      assert.equal(r.alarm, false);
      assert.deepEqual(r.data, { x: 1, s: "ü" });
      assert.ok(r.nextDue.getTime() > Date.now() - 1000 && r.nextDue.getTime() < Date.now() + 5000, `nextDue ${r.nextDue.toISOString()}`);
      const got = await client.getReminder(Basic, "b1", "hello");
      assert.equal(got?.name, "hello");
      assert.equal(activated.length, 0, "setting a reminder does not activate the actor");

      const [first] = await fired.atLeast(1, "the reminder to fire");
      assert.deepEqual(first && { id: first.id, name: first.name, data: first.data }, { id: "b1", name: "hello", data: { x: 1, s: "ü" } });
      assert.ok(first !== undefined && first.at - set >= 100, `fired ${(first?.at ?? 0) - set} ms after set, due 150 ms`);
      assert.deepEqual(activated.items, ["b1"], "the firing activated the actor");
      // The firing is a turn: its state change is kept.
      assert.equal(await client.actor<Basic>("rem-basic", "b1").call("seen"), 1);
      // A one-shot reminder is gone after it fired.
      await eventually("the one-shot reminder to be removed", async () => (await client.getReminder("rem-basic", "b1", "hello")) === null);
      assert.equal(await client.deleteReminder("rem-basic", "b1", "hello"), false);
      assert.equal(fired.length, 1);

      // Raw bytes travel as they are (CONTENT_TYPE_BYTES) to the handler.
      const raw = await client.setReminder(Basic, "b1", "raw", { due: 0, data: new Uint8Array([0, 1, 255]) });
      assert.deepEqual(raw.data, new Uint8Array([0, 1, 255]));
      const [, second] = await fired.atLeast(2, "the raw reminder to fire");
      assert.deepEqual(second && [second.name, second.data], ["raw", new Uint8Array([0, 1, 255])]);
    } finally {
      await app.close();
    }
  });

  test("bad durations and times are InvalidArgument; unknown reminders are null/false", async () => {
    @actor("rem-bad")
    class Bad extends Actor {
      @method
      noop(): null {
        return null;
      }
    }
    const app = await host(daemon.address, Bad);
    try {
      await assert.rejects(client.setReminder("rem-bad", "x", "r", { due: "soon" }), InvalidArgument);
    await assert.rejects(client.setReminder("rem-bad", "x", "r", { period: "every day" }), InvalidArgument);
    await assert.rejects(client.setReminder("rem-bad", "x", "r", { until: "2026-13-45T99:00:00Z" }), InvalidArgument);
    await assert.rejects(client.setAlarm("rem-bad", "x", "tomorrow"), InvalidArgument);
    await assert.rejects(client.setReminder("rem-bad", "x", "$reserved", { due: "1h" }), InvalidArgument);
    assert.equal(await client.getReminder("rem-bad", "x", "nope"), null);
    assert.equal(await client.getAlarm("rem-bad", "x"), null);
    assert.equal(await client.deleteReminder("rem-bad", "x", "nope"), false);
    assert.equal(await client.deleteAlarm("rem-bad", "x"), false);
    } finally {
      await app.close();
    }
  });

  test("a periodic reminder (period 200ms, repeat 3) fires exactly 3 times", async () => {
    const fired = new Events<Firing>();
    @actor("rem-periodic")
    class Periodic extends Actor {
      override onReminder(name: string, data: unknown): void {
        fired.push({ id: this.id, name, data, at: performance.now() });
      }

      @method
      noop(): null {
        return null;
      }
    }
    const app = await host(daemon.address, Periodic);
    try {
      const set = performance.now();
      const r = await client.setReminder("rem-periodic", "p1", "tick", { due: "50ms", period: "200ms", repeat: 3, data: "d" });
      assert.equal(r.periodMs, 200);
      assert.equal(r.remaining, 3);
      const three = await fired.atLeast(3, "three firings");
      assert.deepEqual(
        three.map((f) => [f.name, f.data]),
        [
          ["tick", "d"],
          ["tick", "d"],
          ["tick", "d"],
        ],
      );
      // Firings are never early: the third is due 50 + 2 * 200 ms after the reminder was set.
      const third = (three[2]?.at ?? 0) - set;
      assert.ok(third >= 420, `third firing ${third} ms after set, due at 450 ms`);
      await eventually("the finished reminder to be removed", async () => (await client.getReminder("rem-periodic", "p1", "tick")) === null);
      // Two more periods: a fourth firing would have come by now.
      await sleep(500);
      assert.equal(fired.length, 3);
    } finally {
      await app.close();
    }
  });

  test("a reminder set inside a turn with this.ctx fires, and the turn can read it back", async () => {
    const fired = new Events<Firing>();
    @actor("rem-ctx")
    class SelfScheduling extends Actor<{ fired: string[] }> {
      @method
      async schedule(name: string, data: unknown): Promise<{ set: string; got: string | null; listed: string[] }> {
        const r = await this.ctx.setReminder(name, { due: 0.1, data });
        const got = await this.ctx.getReminder(name);
        const listed = await this.ctx.listReminders();
        return { set: `${r.actorType}/${r.actorId}/${r.name}`, got: got?.name ?? null, listed: listed.map((x) => x.name) };
      }

      @method
      firedNames(): string[] {
        return this.state.get("fired", []);
      }

      @method
      async unschedule(name: string): Promise<boolean> {
        return this.ctx.deleteReminder(name);
      }

      override async onReminder(name: string, data: unknown): Promise<void> {
        await Promise.resolve();
        this.state.set("fired", [...this.state.get("fired", []), name]);
        fired.push({ id: this.id, name, data, at: performance.now() });
      }
    }
    const app = await host(daemon.address, SelfScheduling);
    try {
      const proxy = client.actor<SelfScheduling>("rem-ctx", "s1");
      assert.deepEqual(await proxy.call("schedule", "wake", [1, 2]), { set: "rem-ctx/s1/wake", got: "wake", listed: ["wake"] });
      const [f] = await fired.atLeast(1, "the self-set reminder to fire");
      assert.deepEqual(f && [f.id, f.name, f.data], ["s1", "wake", [1, 2]]);
      // The firing was a turn whose state change was kept (a call queues behind it).
      assert.deepEqual(await proxy.call("firedNames"), ["wake"]);
      // Set and deleted within turns: never fires.
      await proxy.call("schedule", "never", null);
      assert.equal(await proxy.call("unschedule", "never"), true);
      assert.equal(await proxy.call("unschedule", "never"), false);
      await sleep(300);
      assert.deepEqual(
        fired.items.map((x) => x.name),
        ["wake"],
      );
    } finally {
      await app.close();
    }
  });

  test("deleting a periodic reminder stops it", async () => {
    const fired = new Events<Firing>();
    @actor("rem-delete")
    class Ticker extends Actor {
      override onReminder(name: string, data: unknown): void {
        fired.push({ id: this.id, name, data, at: performance.now() });
      }

      @method
      noop(): null {
        return null;
      }
    }
    const app = await host(daemon.address, Ticker);
    try {
      await client.setReminder("rem-delete", "d1", "forever", { due: "50ms", period: "100ms" });
      await fired.atLeast(2, "two firings");
      assert.equal(await client.deleteReminder("rem-delete", "d1", "forever"), true);
      const atDelete = fired.length;
      assert.equal(await client.getReminder("rem-delete", "d1", "forever"), null);
      assert.equal(await client.deleteReminder("rem-delete", "d1", "forever"), false);
      // Five periods: at most a firing already on its way when it was deleted.
      await sleep(500);
      assert.ok(fired.length <= atDelete + 1, `fired ${fired.length} times, ${atDelete} when deleted`);
      const settled = fired.length;
      await sleep(300);
      assert.equal(fired.length, settled);
    } finally {
      await app.close();
    }
  });

  test("a failing onReminder is retried per its policy (3 attempts) and then dropped", async () => {
    const attempts = new Events<Firing>();
    @actor("rem-retry")
    class Flaky extends Actor<{ touched: boolean }> {
      override onReminder(name: string, data: unknown): void {
        this.state.set("touched", true);
        attempts.push({ id: this.id, name, data, at: performance.now() });
        throw new RangeError(`attempt ${attempts.length} failed`);
      }

      @method
      noop(): null {
        return null;
      }
    }
    const app = await host(daemon.address, Flaky);
    try {
      const r = await client.setReminder("rem-retry", "f1", "flaky", { due: "50ms", data: "x", retry: { maxAttempts: 3, initialBackoffMs: 50 } });
      assert.equal(r.retry.maxAttempts, 3);
      assert.equal(r.retry.initialBackoffMs, 50);
      assert.ok(r.retry.maxBackoffMs > 0, "defaults are filled in");
      const three = await attempts.atLeast(3, "three attempts");
      const gaps = three.slice(1).map((f, i) => f.at - (three[i]?.at ?? 0));
      for (const gap of gaps) assert.ok(gap >= 30, `attempts ${gaps.join(", ")} ms apart, initial backoff 50 ms`);
      await eventually("the dropped firing's reminder to be removed", async () => (await client.getReminder("rem-retry", "f1", "flaky")) === null);
      // A fourth attempt would come after 200 ms of backoff.
      await sleep(600);
      assert.equal(attempts.length, 3);
      // Failed turns keep no state changes.
      assert.deepEqual(await client.getState("rem-retry", "f1"), {});
    } finally {
      await app.close();
    }
  });

  test("an alarm replaced by a second setAlarm fires once, with the second data", async () => {
    const fired = new Events<Firing>();
    @actor("rem-alarm")
    class Alarmed extends Actor {
      override onAlarm(data: unknown): void {
        fired.push({ id: this.id, name: "", data, at: performance.now() });
      }

      @method
      async arm(at: number, data: unknown): Promise<boolean> {
        const r = await this.ctx.setAlarm(at, { data });
        return r.alarm;
      }

      @method
      async disarm(): Promise<boolean> {
        const had = (await this.ctx.getAlarm()) !== null;
        return (await this.ctx.deleteAlarm()) && had;
      }
    }
    const app = await host(daemon.address, Alarmed);
    try {
      const start = performance.now();
      const first = await client.setAlarm("rem-alarm", "a1", "200ms", { data: "first" });
      assert.equal(first.alarm, true);
      const second: Reminder = await client.setAlarm(Alarmed, "a1", new Date(Date.now() + 400), { data: { v: "second" } });
      assert.equal(second.alarm, true);
      assert.deepEqual((await client.getAlarm("rem-alarm", "a1"))?.data, { v: "second" });
      const listed = await client.listReminders({ actorType: "rem-alarm", actorId: "a1" });
      assert.deepEqual(
        listed.map((r) => [r.alarm, r.data]),
        [[true, { v: "second" }]],
      );
      const [f] = await fired.atLeast(1, "the alarm to fire");
      assert.ok(f !== undefined);
      assert.deepEqual(f.data, { v: "second" });
      assert.ok(f.at - start >= 300, `alarm fired after ${f.at - start} ms, the second one was due at 400 ms`);
      await eventually("the fired alarm to be removed", async () => (await client.getAlarm("rem-alarm", "a1")) === null);
      await sleep(300);
      assert.equal(fired.length, 1);

      // Set and deleted from inside turns: never fires.
      assert.equal(await client.actor<Alarmed>("rem-alarm", "a2").call("arm", 300, "x"), true);
      assert.equal(await client.actor<Alarmed>("rem-alarm", "a2").call("disarm"), true);
      assert.equal(await client.actor<Alarmed>("rem-alarm", "a2").call("disarm"), false);
      await sleep(500);
      assert.equal(fired.length, 1);
    } finally {
      await app.close();
    }
  });

  test("a timer set inside a turn fires onTimer and is gone after the actor deactivates", async () => {
    const ticks = new Events<Firing>();
    const deactivated = new Events<string>();
    const activated = new Events<string>();
    @actor("rem-timer", { idleTimeout: "400ms" })
    class Timed extends Actor<{ ticks: number }> {
      override onActivate(): void {
        activated.push(this.id);
      }

      override onDeactivate(): void {
        deactivated.push(this.id);
      }

      @method
      noop(): null {
        return null;
      }

      @method
      async start(): Promise<null> {
        await this.ctx.setTimer("tick", { due: 0.05, period: 0.1, data: { k: 1 } });
        await this.ctx.setTimer("once", { due: "20ms", data: "one" });
        return null;
      }

      override onTimer(name: string, data: unknown): void {
        if (name === "tick") this.state.set("ticks", this.state.get("ticks", 0) + 1);
        ticks.push({ id: this.id, name, data, at: performance.now() });
      }
    }
    const app = await host(daemon.address, Timed);
    try {
      // Timers belong to an activation: an inactive actor cannot get one.
      await assert.rejects(client.setTimer("rem-timer", "t1", "early", { due: "1s" }), FailedPrecondition);
      await client.actor<Timed>("rem-timer", "t1").call("start");
      await ticks.atLeast(3, "timer firings");
      const once = ticks.items.find((t) => t.name === "once");
      assert.deepEqual(once && [once.id, once.data], ["t1", "one"]);
      assert.deepEqual(ticks.items.find((t) => t.name === "tick")?.data, { k: 1 });
      // The timer does not keep the actor alive (keepAlive defaults to false).
      await deactivated.atLeast(1, "t1 to idle out");
      assert.deepEqual(deactivated.items, ["t1"]);
      const atDeactivation = ticks.length;
      const tickCount = ticks.items.filter((t) => t.name === "tick").length;
      // Each firing was a turn whose state change was kept.
      assert.deepEqual(await client.getState("rem-timer", "t1"), { ticks: tickCount });
      // Four periods later: no firing, no re-activation.
      await sleep(400);
      assert.equal(ticks.length, atDeactivation);
      assert.deepEqual(activated.items, ["t1"]);
      assert.ok(ticks.items.filter((t) => t.name === "once").length === 1, "a one-shot timer fires once");
    } finally {
      await app.close();
    }
  });

  test("a timer is deleted with deleteTimer, and keepAlive keeps the actor active", async () => {
    const ticks = new Events<Firing>();
    const deactivated = new Events<string>();
    @actor("rem-timer-keep", { idleTimeout: "300ms" })
    class Kept extends Actor {
      override onDeactivate(): void {
        deactivated.push(this.id);
      }

      @method
      noop(): null {
        return null;
      }

      @method
      async start(): Promise<null> {
        await this.ctx.setTimer("beat", { due: "100ms", period: "100ms", keepAlive: true });
        return null;
      }

      @method
      async stop(): Promise<boolean> {
        return this.ctx.deleteTimer("beat");
      }

      override onTimer(name: string, data: unknown): void {
        ticks.push({ id: this.id, name, data, at: performance.now() });
      }
    }
    const app = await host(daemon.address, Kept);
    try {
      const proxy = client.actor<Kept>("rem-timer-keep", "k1");
      await proxy.call("start");
      // Eight periods: more than twice the idle timeout with no call.
      await ticks.atLeast(8, "eight heartbeats");
      assert.deepEqual(deactivated.items, [], "keepAlive firings kept the actor active");
      assert.equal(ticks.items[0]?.data, null);
      assert.equal(await client.deleteTimer("rem-timer-keep", "k1", "beat"), true);
      const atDelete = ticks.length;
      await deactivated.atLeast(1, "k1 to idle out once the timer is gone");
      assert.deepEqual(deactivated.items, ["k1"]);
      assert.ok(ticks.length <= atDelete + 1, `${ticks.length} firings, ${atDelete} at delete`);
    } finally {
      await app.close();
    }
  });

  test("listReminders shows what was set, per actor, per type and across pages", async () => {
    @actor("rem-list")
    class Listed extends Actor {
      @method
      async mine(): Promise<string[]> {
        return (await this.ctx.listReminders()).map((r) => (r.alarm ? "(alarm)" : r.name)).sort();
      }
    }
    const app = await host(daemon.address, Listed);
    try {
      const before = Date.now();
      await client.setReminder("rem-list", "l1", "r1", { due: "1h", data: 1 });
      await client.setReminder("rem-list", "l1", "r2", { due: "PT2H", period: "10m", until: "2099-01-01T00:00:00Z", retry: { maxAttempts: 7 }, missed: "skip" });
      await client.setReminder("rem-list", "l2", "r1", { due: new Date(before + 3_600_000), period: "R4/PT1H" });
      await client.setAlarm("rem-list", "l1", "3h", { data: "wake" });

      const l1 = await client.listReminders({ actorType: "rem-list", actorId: "l1" });
      assert.deepEqual(l1.map((r) => (r.alarm ? "(alarm)" : r.name)).sort(), ["(alarm)", "r1", "r2"]);
      const r2 = l1.find((r) => r.name === "r2");
      assert.ok(r2 !== undefined);
      assert.equal(r2.periodMs, 600_000);
      assert.deepEqual(r2.until, new Date("2099-01-01T00:00:00Z"));
      assert.equal(r2.retry.maxAttempts, 7);
      assert.equal(r2.missed, "skip");
      assert.equal(r2.remaining, null);
      assert.equal(r2.fired, 0);
      assert.equal(r2.attempts, 0);
      assert.ok(Math.abs(r2.nextDue.getTime() - (before + 7_200_000)) < 10_000, `r2 due ${r2.nextDue.toISOString()}`);
      assert.equal(l1.find((r) => r.name === "r1")?.data, 1);

      const l2 = await client.getReminder("rem-list", "l2", "r1");
      assert.ok(l2 !== null);
      assert.equal(l2.periodMs, 3_600_000);
      assert.equal(l2.remaining, 4);

      const all = await client.listReminders({ actorType: "rem-list" });
      assert.deepEqual(all.map((r) => `${r.actorId}/${r.alarm ? "(alarm)" : r.name}`).sort(), ["l1/(alarm)", "l1/r1", "l1/r2", "l2/r1"]);
      const paged = await client.listReminders({ actorType: "rem-list", pageSize: 1 });
      assert.deepEqual(
        paged.map((r) => `${r.actorId}/${r.name}`).sort(),
        all.map((r) => `${r.actorId}/${r.name}`).sort(),
      );
      const everything = await client.listReminders();
      assert.ok(everything.filter((r) => r.actorType === "rem-list").length === 4);

      assert.deepEqual(await client.actor<Listed>("rem-list", "l1").call("mine"), ["(alarm)", "r1", "r2"]);

      for (const [id, name] of [
        ["l1", "r1"],
        ["l1", "r2"],
        ["l2", "r1"],
      ] as const) {
        assert.equal(await client.deleteReminder("rem-list", id, name), true);
      }
      assert.equal(await client.deleteAlarm("rem-list", "l1"), true);
      assert.deepEqual(await client.listReminders({ actorType: "rem-list" }), []);
    } finally {
      await app.close();
    }
  });
});
