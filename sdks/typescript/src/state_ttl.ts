// State.set's ttl option (when a key expires, docs/state.md), and the changes
// that carry it (StateChange.ttl_ms).
import { type Duration, toMillis } from "./duration.js";
import type { StateChange } from "./gen/troupe/v1/common.js";

/** Options of `State#set`: `state.set(key, value, { ttl })`. */
export interface StateSetOptions {
  /**
   * How long the key lives once the turn's changes are stored: a duration of at
   * least a second (a number is seconds, as in every duration option: `"30m"`,
   * `"1h"`, `90`) makes it expire that long after; `null` makes it no longer
   * expire; left out (or `undefined`) it keeps the expiry it has.
   */
  ttl?: Duration | null;
}

/** The daemon's shortest expiry (it refuses a shorter ttl_ms). */
const MIN_TTL_MS = 1_000;

/** The ttl_ms of a set with `options`: undefined (keep the expiry), 0n (none), or ms. */
export function ttlOf(options: StateSetOptions | undefined): bigint | undefined {
  if (options === undefined) return undefined;
  // Plain JS callers may pass the ttl itself.
  const given: unknown = options;
  if (typeof given !== "object" || given === null) {
    throw new TypeError(`state.set's third argument is its options, e.g. { ttl: "1h" }, not ${String(given)}`);
  }
  const { ttl } = options;
  if (ttl === undefined) return undefined;
  if (ttl === null) return 0n;
  const ms = toMillis(ttl, "ttl", true) ?? 0;
  if (ms < MIN_TTL_MS) {
    // Most likely minutes or hours given as a bare number, which reads as seconds.
    throw new RangeError(
      `ttl must be at least a second, got ${JSON.stringify(ttl)} (${ms} ms); a bare number is seconds: ` +
        `write e.g. "30m" for thirty minutes, or { ttl: null } for a key that does not expire`,
    );
  }
  return BigInt(ms);
}

/** The changes to send: each key's encoded value (undefined: deleted), a set with its ttl_ms from `ttls` if any. */
export function toChanges(encoded: Iterable<[string, Buffer | undefined]>, ttls: ReadonlyMap<string, bigint>): StateChange[] {
  const changes: StateChange[] = [];
  for (const [key, data] of encoded) {
    if (data === undefined) {
      changes.push({ key, op: { $case: "delete", value: true } });
      continue;
    }
    const ttlMs = ttls.get(key);
    changes.push(ttlMs === undefined ? { key, op: { $case: "set", value: data } } : { key, op: { $case: "set", value: data }, ttlMs });
  }
  return changes;
}
