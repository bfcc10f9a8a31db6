// Unit tests of the scheduling conversions (options -> ActorClient messages -> Reminder) and the default hooks.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ContentType } from "../src/gen/troupe/v1/common.js";
import { MissedFirings } from "../src/gen/troupe/v1/client.js";
import { Actor, actor, Client, InvalidArgument, method, type Reminder } from "../src/index.js";
import {
  decodeData,
  encodeData,
  missedToProto,
  reminderFromProto,
  retryToProto,
  setAlarmRequest,
  setReminderRequest,
  setTimerRequest,
  toWirePeriod,
  toWireTime,
} from "../src/schedule.js";

const text = (b: Uint8Array | undefined): string => Buffer.from(b ?? new Uint8Array()).toString("utf8");

describe("schedule conversions", () => {
  test("due/until: durations from now (numbers are seconds) go out as milliseconds, RFC 3339 strings as given, Dates as RFC 3339", () => {
    assert.equal(toWireTime(undefined, "due"), "");
    assert.equal(toWireTime(1.5, "due"), "1500ms");
    assert.equal(toWireTime(0, "due"), "0ms");
    assert.equal(toWireTime(0.0004, "due"), "1ms");
    assert.equal(toWireTime("90s", "due"), "90000ms");
    assert.equal(toWireTime(" 1h30m ", "due"), "5400000ms");
    assert.equal(toWireTime("PT1M30S", "due"), "90000ms");
    assert.throws(() => toWireTime("tomorrow", "due"), /^InvalidArgument: due "tomorrow" is not a duration/);
    assert.equal(toWireTime("2026-12-01T00:00:00Z", "until"), "2026-12-01T00:00:00Z");
    assert.equal(toWireTime(new Date(Date.UTC(2026, 11, 1, 0, 0, 0, 250)), "until"), "2026-12-01T00:00:00.250Z");
    assert.throws(() => toWireTime(-1, "due"), InvalidArgument);
    assert.throws(() => toWireTime(Number.NaN, "due"), InvalidArgument);
    assert.throws(() => toWireTime(new Date("nope"), "until"), /invalid Date/);
  });

  test("period: numbers are seconds, strings (durations, ISO 8601, R<n>/) are read and sent as milliseconds", () => {
    assert.equal(toWirePeriod(undefined), "");
    assert.equal(toWirePeriod(0.2), "200ms");
    assert.equal(toWirePeriod("10s"), "10000ms");
    assert.equal(toWirePeriod("R5/PT10S"), "R5/10000ms");
    assert.throws(() => toWirePeriod("R5/PT10S", "period", false), /repetition count; a timer fires until/);
    assert.throws(() => toWirePeriod(0), /period must be longer than zero/);
    assert.throws(() => toWirePeriod(-5), InvalidArgument);
    assert.equal(toWirePeriod(0.0002), "1ms");
    assert.equal(toWirePeriod(0.0016), "2ms");
    assert.throws(() => toWirePeriod(Number.POSITIVE_INFINITY), InvalidArgument);
  });

  test("retry and missed-firings policies", () => {
    assert.equal(retryToProto(undefined), undefined);
    assert.deepEqual(retryToProto({}), { maxAttempts: 0, initialBackoffMs: 0n, maxBackoffMs: 0n });
    assert.deepEqual(retryToProto({ maxAttempts: 3, initialBackoffMs: 50, maxBackoffMs: 1000 }), {
      maxAttempts: 3,
      initialBackoffMs: 50n,
      maxBackoffMs: 1000n,
    });
    assert.throws(() => retryToProto({ maxAttempts: 1.5 }), /retry.maxAttempts must be an integer/);
    assert.throws(() => retryToProto({ initialBackoffMs: -1 }), InvalidArgument);
    assert.deepEqual(retryToProto({ initialBackoff: "500ms", maxBackoff: "PT1M" }), {
      maxAttempts: 0,
      initialBackoffMs: 500n,
      maxBackoffMs: 60_000n,
    });
    assert.throws(() => retryToProto({ maxBackoff: "a minute" }), /^InvalidArgument: retry.maxBackoff "a minute" is not a duration/);
    assert.throws(() => retryToProto({ initialBackoff: "1s", initialBackoffMs: 1000 }), /same setting; give one of them/);
    assert.equal(missedToProto(undefined), MissedFirings.MISSED_FIRINGS_UNSPECIFIED);
    assert.equal(missedToProto("fire_once"), MissedFirings.MISSED_FIRINGS_FIRE_ONCE);
    assert.equal(missedToProto("skip"), MissedFirings.MISSED_FIRINGS_SKIP);
    // @ts-expect-error: not a policy
    assert.throws(() => missedToProto("later"), /missed must be "fire_once" or "skip"/);
  });

  test("data travels like a method result: JSON, or raw bytes", () => {
    assert.equal(encodeData(undefined), undefined);
    const json = encodeData({ n: 1, s: "ü" });
    assert.equal(json?.contentType, ContentType.CONTENT_TYPE_JSON);
    assert.equal(text(json.data), '{"n":1,"s":"\\u00fc"}');
    assert.equal(text(encodeData(null)?.data), "null");
    const raw = encodeData(new Uint8Array([1, 2]));
    assert.equal(raw?.contentType, ContentType.CONTENT_TYPE_BYTES);
    assert.deepEqual([...raw.data], [1, 2]);
    assert.throws(() => encodeData(() => 1), /data must be JSON-serialisable/);
    assert.throws(() => encodeData(10n), /data must be JSON-serialisable/);
    // The handler gets the JSON value itself (not an args/kwargs object).
    assert.deepEqual(decodeData({ data: Buffer.from('{"args":[1]}'), contentType: ContentType.CONTENT_TYPE_JSON }), { args: [1] });
    assert.deepEqual(decodeData({ data: Buffer.from("[1,2]"), contentType: ContentType.CONTENT_TYPE_UNSPECIFIED }), [1, 2]);
    assert.equal(decodeData({ data: Buffer.alloc(0), contentType: ContentType.CONTENT_TYPE_JSON }), null);
    assert.equal(decodeData(undefined), null);
    assert.deepEqual(decodeData({ data: Buffer.from([9]), contentType: ContentType.CONTENT_TYPE_BYTES }), new Uint8Array([9]));
  });

  test("request messages", () => {
    assert.deepEqual(setReminderRequest("t", "i", "r", {}), {
      actor: { type: "t", id: "i" },
      name: "r",
      due: "10000ms",
      period: "",
      repeat: 0,
      until: "",
      payload: undefined,
      retry: undefined,
      missed: MissedFirings.MISSED_FIRINGS_UNSPECIFIED,
      cron: "",
      timeZone: "",
      jitter: "",
    });
    const calendar = setReminderRequest("t", "i", "r", { cron: "0 9 * * MON-FRI", timeZone: " Europe/Berlin " });
    assert.equal(setReminderRequest("t", "i", "r", { cron: "@daily", jitter: "10m" }).jitter, "600000ms");
    assert.throws(() => setReminderRequest("t", "i", "r", { cron: "@daily", jitter: 0 }), /jitter/);
    assert.deepEqual([calendar.cron, calendar.timeZone, calendar.period], ["0 9 * * MON-FRI", "Europe/Berlin", ""]);
    assert.throws(() => setReminderRequest("t", "i", "r", { cron: "@daily", period: "1h" }), /both a period and a cron schedule/);
    assert.throws(() => setReminderRequest("t", "i", "r", { timeZone: "Asia/Kolkata" }), InvalidArgument);
    const full = setReminderRequest("t", "i", "r", {
      due: 0.1,
      period: "200ms",
      repeat: 3,
      until: "1h",
      data: [1],
      retry: { maxAttempts: 3, initialBackoffMs: 50 },
      missed: "skip",
    });
    assert.equal(full.due, "100ms");
    assert.equal(full.period, "200ms");
    assert.equal(full.repeat, 3);
    assert.equal(full.until, "3600000ms");
    assert.equal(text(full.payload?.data), "[1]");
    assert.deepEqual(full.retry, { maxAttempts: 3, initialBackoffMs: 50n, maxBackoffMs: 0n });
    assert.equal(full.missed, MissedFirings.MISSED_FIRINGS_SKIP);
    assert.throws(() => setReminderRequest("t", "i", "r", { repeat: -1 }), /repeat must be an integer/);

    const when = new Date(Date.UTC(2030, 0, 2, 3, 4, 5));
    assert.deepEqual(setAlarmRequest("t", "i", when, { data: "x" }), {
      actor: { type: "t", id: "i" },
      at: "2030-01-02T03:04:05.000Z",
      payload: { data: Buffer.from('"x"'), contentType: ContentType.CONTENT_TYPE_JSON },
      retry: undefined,
    });
    assert.equal(setAlarmRequest("t", "i", "5s", {}).at, "5000ms");

    assert.deepEqual(setTimerRequest("t", "i", "tick", { due: 0.01, period: 0.02, keepAlive: true }), {
      actor: { type: "t", id: "i" },
      name: "tick",
      due: "10ms",
      period: "20ms",
      payload: undefined,
      keepAlive: true,
    });
    assert.equal(setTimerRequest("t", "i", "tick", {}).keepAlive, false);
    assert.equal(setTimerRequest("t", "i", "tick", {}).due, "1000ms");
    assert.equal(setTimerRequest("t", "i", "tick", { due: "1s" }).due, "1000ms");
    assert.throws(() => setTimerRequest("t", "i", "tick", { due: "soon" }), /^InvalidArgument: due "soon" is not a duration/);
  });

  test("Reminder messages: zero means none, times become Dates", () => {
    const oneShot: Reminder = reminderFromProto({
      actor: { type: "t", id: "i" },
      name: "r",
      nextDueUnixMs: 1_800_000_000_123n,
      periodMs: 0n,
      remaining: 0,
      untilUnixMs: 0n,
      payload: { data: Buffer.from('{"a":1}'), contentType: ContentType.CONTENT_TYPE_JSON },
      retry: { maxAttempts: 3, initialBackoffMs: 1000n, maxBackoffMs: 60_000n },
      missed: MissedFirings.MISSED_FIRINGS_UNSPECIFIED,
      attempts: 0,
      fired: 0n,
      alarm: false,
      cron: "",
      timeZone: "",
      jitterMs: 0n,
      jitterDelayMs: 0n,
      paused: false,
      tellMethod: "",
    });
    assert.deepEqual(oneShot, {
      actorType: "t",
      actorId: "i",
      name: "r",
      nextDue: new Date(1_800_000_000_123),
      periodMs: null,
      cron: null,
      timeZone: null,
      jitterMs: null,
      jitterDelayMs: 0,
      remaining: null,
      until: null,
      data: { a: 1 },
      retry: { maxAttempts: 3, initialBackoffMs: 1000, maxBackoffMs: 60_000 },
      missed: "fire_once",
      attempts: 0,
      fired: 0,
      alarm: false,
      paused: false,
      tellMethod: null,
    });
    const periodic = reminderFromProto({
      actor: undefined,
      name: "p",
      nextDueUnixMs: 5n,
      periodMs: 200n,
      remaining: 2,
      untilUnixMs: 9000n,
      payload: { data: Buffer.from([1]), contentType: ContentType.CONTENT_TYPE_BYTES },
      retry: undefined,
      missed: MissedFirings.MISSED_FIRINGS_SKIP,
      attempts: 1,
      fired: 7n,
      alarm: true,
      cron: "",
      timeZone: "",
      jitterMs: 0n,
      jitterDelayMs: 0n,
      paused: false,
      tellMethod: "",
    });
    assert.equal(periodic.actorType, "");
    assert.equal(periodic.periodMs, 200);
    assert.equal(periodic.remaining, 2);
    assert.deepEqual(periodic.until, new Date(9000));
    assert.deepEqual(periodic.data, new Uint8Array([1]));
    assert.equal(periodic.missed, "skip");
    assert.equal(periodic.attempts, 1);
    assert.equal(periodic.fired, 7);
    assert.equal(periodic.alarm, true);
    assert.equal(periodic.cron, null);
    const calendar = reminderFromProto({
      actor: undefined,
      name: "c",
      nextDueUnixMs: 86_400_000n,
      periodMs: 0n,
      remaining: 0,
      untilUnixMs: 0n,
      payload: undefined,
      retry: undefined,
      missed: MissedFirings.MISSED_FIRINGS_UNSPECIFIED,
      attempts: 0,
      fired: 0n,
      alarm: false,
      cron: "@daily",
      timeZone: "",
      jitterMs: 0n,
      jitterDelayMs: 0n,
      paused: false,
      tellMethod: "",
    });
    assert.deepEqual([calendar.cron, calendar.timeZone, calendar.periodMs], ["@daily", "UTC", null]);
  });

  test("listReminders needs actorType for actorId (checked before any RPC)", async () => {
    const client = new Client({ address: "127.0.0.1:1" });
    try {
      await assert.rejects(client.listReminders({ actorId: "x" }), /actorId needs actorType/);
      // Conversion errors reject (no RPC is made), they do not throw synchronously.
      const p = client.setReminder("t", "i", "r", { period: -1 });
      await assert.rejects(p, InvalidArgument);
      await assert.rejects(client.setTimer("t", "i", "r", { due: Number.NaN }), InvalidArgument);
      await assert.rejects(client.setAlarm("t", "i", new Date(Number.NaN)), InvalidArgument);
    } finally {
      client.close();
    }
  });
});

describe("handler hooks", () => {
  @actor("plain-hooks")
  class Plain extends Actor {
    @method
    noop(): null {
      return null;
    }
  }

  test("the defaults throw an error that says to override them", () => {
    const a = new Plain();
    assert.throws(() => a.onReminder("r", null), /Plain received reminder "r" but does not override onReminder\(name, data\)/);
    assert.throws(() => a.onAlarm(null), /does not override onAlarm\(data\)/);
    assert.throws(() => a.onTimer("t", null), /received timer "t" but does not override onTimer\(name, data\)/);
  });
});
