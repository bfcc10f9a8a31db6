// The one duration grammar of every option that takes a duration: idleTimeout,
// turnTimeout, client and call timeout, reminder and timer due/period, retry
// backoffs, maxReconnectDelay, waitRegistered's timeout, the test clock's step.
// Each is read here where the option is given, so that a bad value fails the
// decorator, constructor or call that took it with InvalidArgument naming the
// option, never later inside the library. The Python SDK's troupe/_duration.py
// and the daemon's flags read the same strings, and a number is seconds in all
// three, so `timeout: 2` means the same wherever it is written.
import * as grpc from "@grpc/grpc-js";
import { InvalidArgument } from "./errors.js";

/**
 * A duration: a number of **seconds** (`90`, `1.5`, `0.25`), or a string of `<number><unit>` parts
 * (`"90s"`, `"1h30m"`, `"500ms"`, `"30d"`, `"1.5h"`; units `ms s m h d w` and their
 * long names) or ISO 8601 (`"PT1M30S"`, `"P30D"`). Months and years have no fixed
 * length and are refused.
 */
export type Duration = number | string;

const MS_PER_UNIT = new Map<string, number>();
for (const [names, ms] of [
  [["ms", "msec", "msecs", "millis", "millisecond", "milliseconds"], 1],
  [["s", "sec", "secs", "second", "seconds"], 1_000],
  [["m", "min", "mins", "minute", "minutes"], 60_000],
  [["h", "hr", "hrs", "hour", "hours"], 3_600_000],
  [["d", "day", "days"], 86_400_000],
  [["w", "week", "weeks"], 604_800_000],
] as const) {
  for (const name of names) MS_PER_UNIT.set(name, ms);
}

const NUMBER = String.raw`(\d+(?:\.\d+)?|\.\d+)`;
const PART = new RegExp(String.raw`\s*${NUMBER}\s*([a-zA-Z]+)\s*`, "y");
const NUMBER_END = new RegExp(String.raw`${NUMBER}\s*$`);
const ISO = new RegExp(
  String.raw`^[Pp](?:${NUMBER}[Ww])?(?:${NUMBER}[Dd])?(?:[Tt](?:${NUMBER}[Hh])?(?:${NUMBER}[Mm])?(?:${NUMBER}[Ss])?)?$`,
);
const ISO_MS = [604_800_000, 86_400_000, 3_600_000, 60_000, 1_000];
// Where an ISO 8601 duration has months or years (P1M, P1Y, P1Y2M).
const ISO_CALENDAR = /^[Pp](?:\d+(?:\.\d+)?[YyMm])+/;
// The daemon's longest duration; longer values are surely mistakes.
const MAX_MS = 100 * 365.25 * 86_400_000;

const HINT = `write seconds as a number, or a string such as "90s", "1h30m", "500ms", "30d" or ISO 8601 "PT1M30S"`;

function shown(value: unknown): string {
  let text: string;
  if (typeof value === "string") text = JSON.stringify(value);
  else if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") text = String(value);
  else if (value === null) text = "null";
  else text = `a ${value instanceof Object ? value.constructor.name : typeof value}`;
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function bad(option: string, value: unknown, why: string): InvalidArgument {
  return new InvalidArgument(`${option} ${shown(value)} is not a duration (${why}); ${HINT}`, grpc.status.INVALID_ARGUMENT);
}

function stringMs(option: string, raw: string): number {
  const text = raw.trim();
  if (text === "") throw bad(option, raw, "it is empty");
  if (text.startsWith("P") || text.startsWith("p")) {
    if (ISO_CALENDAR.test(text)) throw bad(option, raw, "months and years have no fixed length; use days, e.g. P30D");
    const iso = ISO.exec(text);
    // Groups that did not take part are undefined at run time, whatever RegExpExecArray says.
    const groups: (string | undefined)[] = iso?.slice(1) ?? [];
    if (iso === null || groups.every((g) => g === undefined) || /[Tt]$/.test(text)) {
      throw bad(option, raw, "not ISO 8601 PnWnDTnHnMnS");
    }
    return groups.reduce((sum, g, i) => (g === undefined ? sum : sum + Number(g) * (ISO_MS[i] ?? 0)), 0);
  }
  if (text.startsWith("-")) throw bad(option, raw, "a duration cannot be negative");
  let total = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < text.length) {
    const part = PART.exec(text);
    if (part === null) throw bad(option, raw, NUMBER_END.test(text) ? "a number needs a unit" : "unreadable");
    const unit = part[2] ?? "";
    const ms = MS_PER_UNIT.get(unit);
    if (ms === undefined) throw bad(option, raw, `unknown unit "${unit}"; use ms, s, m, h, d or w`);
    total += Number(part[1]) * ms;
  }
  return total;
}

/**
 * @internal Milliseconds of `value` (not rounded); InvalidArgument naming `option`
 * when it is not a duration, is negative, or is zero and `allowZero` is false.
 */
export function durationMs(value: unknown, option: string, allowZero = false): number {
  let ms: number;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw bad(option, value, "not finite");
    ms = value * 1_000;
  } else if (typeof value === "string") {
    ms = stringMs(option, value);
  } else {
    throw bad(option, value, typeof value === "object" ? "not a number or a string" : `a ${typeof value}`);
  }
  if (ms < 0) throw bad(option, value, "a duration cannot be negative");
  if (ms === 0 && !allowZero) throw bad(option, value, `${option} must be longer than zero`);
  if (ms > MAX_MS) throw bad(option, value, "longer than 100 years");
  return ms;
}

/**
 * Whole milliseconds of a duration option; `undefined` stays `undefined`. A positive
 * duration under 1 ms is 1 ms, never 0, which the wire reads as "not set". Throws
 * InvalidArgument naming `option` for anything else.
 */
export function toMillis(value: Duration | undefined, option: string, allowZero = false): number | undefined {
  if (value === undefined) return undefined;
  const ms = durationMs(value, option, allowZero);
  return ms === 0 ? 0 : Math.max(1, Math.round(ms));
}

/**
 * @internal A period as the daemon reads it: `"<ms>ms"`, or `"R<n>/<ms>ms"` for an
 * ISO 8601 repetition such as `"R5/PT10S"` (five firings in all) where `repetitions`
 * allows one (reminders; a timer fires until it is deleted).
 */
export function periodWire(value: Duration, option = "period", repetitions = true): string {
  if (typeof value === "string") {
    const text = value.trim();
    const slash = text.indexOf("/");
    if ((text.startsWith("R") || text.startsWith("r")) && slash > 0) {
      if (!repetitions) {
        throw new InvalidArgument(
          `${option} ${shown(value)} has a repetition count; a timer fires until it is deleted or its actor deactivates: ` +
            `give the period alone (e.g. "PT1S"), or use a reminder for a fixed number of firings`,
          grpc.status.INVALID_ARGUMENT,
        );
      }
      const count = text.slice(1, slash);
      if (count !== "" && !(/^\d+$/.test(count) && Number(count) > 0 && Number(count) < 2 ** 32)) {
        throw new InvalidArgument(
          `${option} ${shown(value)}: the repetition count in R<n>/... must be a whole number from 1 to ${2 ** 32 - 1}, e.g. "R5/PT10S"`,
          grpc.status.INVALID_ARGUMENT,
        );
      }
      return `R${count}/${String(toMillis(text.slice(slash + 1), option))}ms`;
    }
  }
  return `${String(toMillis(value, option))}ms`;
}
