// The one duration grammar (src/duration.ts), and that every option taking a duration
// reads it where the option is given: a bad value throws InvalidArgument naming the
// option at the decorator, constructor or call, before anything reaches the daemon.
// sdks/python/tests/test_duration.py has the same table: numbers are seconds in both
// SDKs and in the daemon's flags.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Actor, actor, App, Client, type Duration, InvalidArgument, method } from "../src/index.js";
import { durationMs, periodWire, toMillis } from "../src/duration.js";
import { retryToProto } from "../src/schedule.js";

// [value, milliseconds]: one table of what every duration option reads.
const GOOD: [Duration, number][] = [
  ["90s", 90_000],
  ["1h30m", 5_400_000],
  ["1h 30m", 5_400_000],
  ["500ms", 500],
  ["30d", 2_592_000_000],
  ["2w", 1_209_600_000],
  ["1.5h", 5_400_000],
  ["0.25s", 250],
  ["10 minutes", 600_000],
  ["1hour", 3_600_000],
  [" 5m ", 300_000],
  ["PT1M30S", 90_000],
  ["pt1m30s", 90_000],
  ["PT0.5S", 500],
  ["P30D", 2_592_000_000],
  ["P1DT1H", 90_000_000],
  ["P2W", 1_209_600_000],
  [90, 90_000], // numbers are seconds, as in the Python SDK and the daemon's flags
  [1.5, 1_500],
  [0.25, 250],
];

// [value, what the message says is wrong].
const BAD: [unknown, string][] = [
  ["", "empty"],
  ["90", "a number needs a unit"],
  ["1h30", "a number needs a unit"],
  ["soon", "unreadable"],
  ["5 parsecs", 'unknown unit "parsecs"'],
  ["1M", 'unknown unit "M"'], // months have no fixed length
  ["1y", 'unknown unit "y"'],
  ["-5s", "cannot be negative"],
  ["P1M", "months and years have no fixed length; use days"],
  ["P1Y", "months and years have no fixed length"],
  ["PT", "not ISO 8601"],
  ["P1DT", "not ISO 8601"],
  ["PT-5S", "not ISO 8601"],
  [-1, "cannot be negative"],
  [Number.NaN, "not finite"],
  [Number.POSITIVE_INFINITY, "not finite"],
  [true, "a boolean"],
  [10n, "a bigint"],
  [[10], "not a number or a string"],
  [1e10, "longer than 100 years"],
];

describe("the duration grammar", () => {
  for (const [value, ms] of GOOD) {
    test(`reads ${JSON.stringify(value)}`, () => {
      assert.equal(durationMs(value, "x"), ms);
    });
  }
  for (const [value, why] of BAD) {
    test(`refuses ${typeof value === "bigint" ? String(value) : JSON.stringify(value)}, naming the option, the value and the fix`, () => {
      assert.throws(
        () => durationMs(value, "idleTimeout"),
        (err) => {
          assert.ok(err instanceof InvalidArgument);
          assert.match(err.message, /^idleTimeout .* is not a duration/);
          assert.ok(err.message.includes(why), err.message);
          assert.ok(err.message.includes('"1h30m"'), "says what to write instead");
          return true;
        },
      );
    });
  }

  test("zero is a duration only where it means something; tiny ones round up to 1 ms", () => {
    assert.equal(toMillis("0s", "due", true), 0);
    assert.throws(() => toMillis(0, "idleTimeout"), /idleTimeout must be longer than zero/);
    assert.equal(toMillis(0.0002, "period"), 1);
    assert.equal(toMillis(0.2, "period"), 200);
  });

  test("periods take the ISO repetition", () => {
    assert.equal(periodWire("R5/PT10S"), "R5/10000ms");
    assert.equal(periodWire("R/1m"), "R/60000ms");
    assert.throws(() => periodWire("R0/PT1S"), /repetition count in R<n>/);
    assert.throws(() => periodWire("R5/PT0S"), /^InvalidArgument: period "PT0S" is not a duration/);
  });
});

@actor("duration-base")
class Base extends Actor {
  @method m(): void {}
}

// Each option that takes a duration, given a value: the call that takes it must throw for a bad one.
const OPTIONS: Record<string, (value: Duration) => unknown> = {
  idleTimeout: (v) => actor("t", { idleTimeout: v }),
  turnTimeout: (v) => actor("t", { turnTimeout: v }),
  timeout: (v) => new Client({ address: "127.0.0.1:1", timeout: v }),
  maxReconnectDelay: (v) => new App({ actors: [Base], address: "127.0.0.1:1", maxReconnectDelay: v }),
  "retry.initialBackoff": (v) => retryToProto({ initialBackoff: v }),
  "retry.maxBackoff": (v) => retryToProto({ maxBackoff: v }),
};

describe("every duration option", () => {
  for (const [option, give] of Object.entries(OPTIONS)) {
    test(`${option} refuses a bad duration where it is given`, () => {
      for (const bad of ["5 parsecs", -1, "PT"]) {
        assert.throws(() => give(bad), (err) => err instanceof InvalidArgument && err.message.startsWith(`${option} `), `${option}: ${String(bad)}`);
      }
    });
    test(`${option} takes every form`, () => {
      for (const good of ["90s", "PT1M30S", 90]) give(good);
    });
  }

  test("the decorator sends what it read", () => {
    const decorate = actor("cart", { idleTimeout: "1h30m", turnTimeout: "PT1M30S" });
    assert.equal(typeof decorate, "function");
  });

  test("call timeouts fail where the handle or call takes them", async () => {
    // Port 1: nothing listens, so only a check made before sending can answer InvalidArgument.
    const client = new Client({ address: "127.0.0.1:1" });
    try {
      assert.throws(() => client.actor("t", "1", { timeout: "soon" }), /^InvalidArgument: timeout "soon" is not a duration/);
      await assert.rejects(client.invoke("t", "1", "m", [], undefined, { timeout: "soon" }), InvalidArgument);
      await assert.rejects(client.setReminder("t", "1", "r", { due: "soon" }), /^InvalidArgument: due "soon"/);
      await assert.rejects(client.setTimer("t", "1", "r", { period: "0s" }), /^InvalidArgument: period "0s"/);
    } finally {
      client.close();
    }
  });
});
