// Durations in options: milliseconds as a number, or a string with a unit.

/** A duration: a number of milliseconds, or a string such as `"250ms"`, `"5s"`, `"10m"`, `"1h"`. */
export type Duration = number | `${number}${"ms" | "s" | "m" | "h"}`;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/;

/** Milliseconds of a duration; `undefined` stays `undefined`. Throws RangeError when not positive. */
export function toMillis(value: Duration | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  let ms: number;
  if (typeof value === "number") {
    ms = value;
  } else {
    const m = PATTERN.exec(value);
    if (m === null) {
      throw new RangeError(`${what} must be milliseconds or a string like "500ms", "5s", "10m", got ${JSON.stringify(value)}`);
    }
    ms = Number(m[1]) * (UNITS[m[2] ?? "ms"] ?? 1);
  }
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new RangeError(`${what} must be a positive duration, got ${String(value)}`);
  }
  return Math.max(1, Math.round(ms));
}
