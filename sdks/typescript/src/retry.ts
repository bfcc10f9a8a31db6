// Idempotency keys and retries of invoke and tell.
//
// Every invoke and tell names its logical call with an idempotency key, resent
// unchanged on every retry, so that a daemon which honours keys
// (proto/troupe/v1/client.proto) runs the call once and answers each attempt
// with the first answer. Two answers are resent:
// - UNAVAILABLE: the daemon restarted, a forward to another daemon broke, or
//   the connection was refused or reset; the first attempt may or may not have
//   reached the actor, and the key makes the resend safe.
// - RESOURCE_EXHAUSTED with gRPC's retry pushback (`grpc-retry-pushback-ms`):
//   the daemon refused the call before it ran (a full mailbox, memory near its
//   limit) and says how long to wait at least. Without the pushback (a message
//   over a size limit) a resend would fail alike, so it is not resent.
//
// The retries of all of one client's calls (one connection) are bounded together
// by its retry budget (RetryBudget), gRPC's retry throttling (gRFC A6): while the
// daemon is down or overloaded, every concurrent call would otherwise keep
// resending for its whole deadline, multiplying the load on a daemon trying to
// recover.
//
// On the native core the addon owns the keys and the retries (crates/sdk-core's
// key.rs and retry.rs, the same policy); this module's loop serves the grpc-js
// core, and both cores' error messages and retry lines are worded here
// (failureNote, logRetry).
import * as grpc from "@grpc/grpc-js";
import { randomUUID } from "node:crypto";
import { debuglog } from "node:util";
import { type Duration, toMillis } from "./duration.js";
import { fromRpcError, InvalidArgument, isServiceError, rpcDetails } from "./errors.js";
import type { CallStop } from "./turn.js";

export const MAX_KEY_BYTES = 256;
const FIRST_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 1000;
/**
 * The trailer in which the daemon says a RESOURCE_EXHAUSTED ran nothing, and
 * how many milliseconds to wait at least before resending it (gRFC A6).
 */
export const PUSHBACK_TRAILER = "grpc-retry-pushback-ms";
/**
 * A call without a deadline would otherwise retry forever against a daemon that
 * never comes back; this bounds its retries, counted from its first failure.
 */
export const NO_DEADLINE_RETRY_WINDOW_MS = 10_000;
/** What a key made here is resent for beyond the call's retries: the daemon's flush, and room to spare. */
const MADE_KEY_MARGIN_MS = 60_000;
/**
 * Below this much time left another attempt is not sent: it would most likely
 * end in DEADLINE_EXCEEDED, hiding the refusal that explains the failure.
 */
const MIN_ATTEMPT_MS = 50;

/**
 * How many retries a client's calls may make together: gRPC's retry throttling
 * (gRFC A6 `retryThrottling`), one budget per client (and per app connection,
 * for the calls its actors make).
 *
 * The budget holds `maxTokens` tokens and starts full. Every attempt of an
 * invoke or tell that fails with a status worth resending (UNAVAILABLE, or
 * RESOURCE_EXHAUSTED with a retry pushback) takes one; every call that succeeds
 * puts back `tokenRatio`, up to `maxTokens`; and a retry is sent only while
 * more than `maxTokens / 2` tokens are left. While the daemon answers, the
 * budget stays full and changes nothing; while it is down or overloaded, the
 * client's calls together make a few retries and then fail at once, instead of
 * each resending until its deadline.
 */
export interface RetryBudget {
  /** Tokens in a full budget: an integer from 1 to 1000 (gRFC A6). Default 100 (gRPC's example has 10). */
  maxTokens?: number;
  /** What each successful call puts back: at least 0.001, counted to three decimals (gRFC A6). Default 0.1. */
  tokenRatio?: number;
}

/** gRFC A6 allows at most this many tokens in a retry budget. */
const MAX_BUDGET_TOKENS = 1000;
/**
 * Tokens are counted in thousandths, as gRPC's implementations (and the native
 * core) do: gRFC A6 gives tokenRatio three decimal places, and whole
 * thousandths add up exactly where repeated float additions would drift.
 */
const MILLI = 1000;

/** A value a caller passed, for a message: numbers as written (NaN too), the rest as JSON. */
function shown(value: unknown): string {
  return typeof value === "number" ? String(value) : JSON.stringify(value);
}

/**
 * @internal A client's budget unless it is given another: ten times gRPC's
 * example, whose 4 retries are spent in under a second, so a lone client would
 * no longer ride out a daemon's restart.
 */
export const DEFAULT_RETRY_BUDGET: Readonly<Required<RetryBudget>> = Object.freeze({ maxTokens: 100, tokenRatio: 0.1 });

/**
 * @internal The `retryBudget` option with its defaults filled in, or false for
 * no budget; throws TypeError or RangeError for one out of gRFC A6's range.
 */
export function checkRetryBudget(given: unknown): Readonly<Required<RetryBudget>> | false {
  if (given === undefined) return DEFAULT_RETRY_BUDGET;
  if (given === false) return false;
  if (typeof given !== "object" || given === null) {
    throw new TypeError(`retryBudget must be { maxTokens, tokenRatio } or false for no budget, not ${JSON.stringify(given)}`);
  }
  // A JavaScript caller may pass anything: each field is checked as unknown.
  const fields = given as Readonly<Record<string, unknown>>;
  const maxTokens = fields["maxTokens"] ?? DEFAULT_RETRY_BUDGET.maxTokens;
  const tokenRatio = fields["tokenRatio"] ?? DEFAULT_RETRY_BUDGET.tokenRatio;
  if (typeof maxTokens !== "number" || !Number.isInteger(maxTokens) || maxTokens < 1 || maxTokens > MAX_BUDGET_TOKENS) {
    throw new RangeError(`retryBudget.maxTokens must be an integer from 1 to ${MAX_BUDGET_TOKENS} (gRFC A6), not ${shown(maxTokens)}`);
  }
  if (typeof tokenRatio !== "number" || !Number.isFinite(tokenRatio) || Math.round(tokenRatio * MILLI) < 1) {
    throw new RangeError(`retryBudget.tokenRatio must be at least 0.001 (gRFC A6 counts it to three decimals), not ${shown(tokenRatio)}`);
  }
  return Object.freeze({ maxTokens, tokenRatio });
}

/**
 * @internal The tokens of a retry budget as one client's calls spend them on
 * the grpc-js core (the native core keeps its own: crates/sdk-core's retry.rs).
 */
export class RetryThrottle {
  readonly #max: number;
  readonly #ratio: number;
  #tokens: number;

  constructor(budget: Readonly<Required<RetryBudget>>) {
    this.#max = budget.maxTokens * MILLI;
    // More than a full budget per success refills it all the same.
    this.#ratio = Math.min(Math.round(budget.tokenRatio * MILLI), this.#max);
    this.#tokens = this.#max;
  }

  /** The tokens left. */
  get tokens(): number {
    return this.#tokens / MILLI;
  }

  /** An attempt failed with a status worth resending: takes a token, and says whether a retry may follow (more than half the budget left). */
  onFailure(): boolean {
    this.#tokens = Math.max(0, this.#tokens - MILLI);
    return this.#tokens * 2 > this.#max;
  }

  /** A call succeeded: puts back the token ratio, up to a full budget. */
  onSuccess(): void {
    this.#tokens = Math.min(this.#max, this.#tokens + this.#ratio);
  }
}

// Unicode category Cc, as the daemon's check (Rust's char::is_control).
const CONTROL = /\p{Cc}/u;

/**
 * @internal The key a call sends: the caller's own (checked as the daemon
 * would), else a fresh UUID. Throws InvalidArgument before anything is sent.
 */
export function callKey(key: string | undefined): string {
  if (key === undefined) return randomUUID();
  checkKeyType(key);
  const size = Buffer.byteLength(key, "utf8");
  if (size === 0) {
    throw new InvalidArgument("idempotencyKey is empty; pass 1 to 256 bytes of printable UTF-8, or leave it out to let the SDK make a fresh key");
  }
  if (size > MAX_KEY_BYTES) {
    throw new InvalidArgument(`idempotencyKey is ${size} bytes; it must be at most ${MAX_KEY_BYTES} bytes (a UUID or a hash of what names the call fits)`);
  }
  if (CONTROL.test(key)) {
    throw new InvalidArgument(`idempotencyKey ${JSON.stringify(key)} contains control characters; use printable UTF-8`);
  }
  return key;
}

/**
 * @internal How long the daemon should keep the answer of a call whose key the
 * SDK made (`keyRetentionMs`, proto/troupe/v1/client.proto): such a key is
 * resent only while the call's retries last (`timeoutMs`, or
 * NO_DEADLINE_RETRY_WINDOW_MS without one) and no one else knows it. A key the
 * caller gave may be sent again at any time: its answer keeps the daemon's
 * whole retention (0).
 */
export function madeKeyRetentionMs(timeoutMs: number | undefined): bigint {
  // A timeout too large to count in milliseconds asks for the whole retention.
  if (timeoutMs !== undefined && !Number.isFinite(timeoutMs)) return 0n;
  const resent = timeoutMs === undefined ? NO_DEADLINE_RETRY_WINDOW_MS : Math.max(0, Math.ceil(timeoutMs));
  return BigInt(resent) + BigInt(MADE_KEY_MARGIN_MS);
}

/**
 * @internal The `keyRetentionMs` of a call with the caller's own `key`:
 * `retention` (`idempotencyRetention`) in whole milliseconds, or 0n, the
 * daemon's whole retention, when it is left out. Throws InvalidArgument, before
 * anything is sent, for a retention without a key (a key the SDK makes is kept
 * only as long as its retries last) or one that is not a positive duration.
 */
export function passedKeyRetentionMs(key: string | undefined, retention: Duration | undefined): bigint {
  if (retention === undefined) return 0n;
  if (key === undefined) {
    throw new InvalidArgument(
      "idempotencyRetention says how long you may send your idempotencyKey again; pass it with idempotencyKey (a key the SDK makes is kept only as long as the call's own retries last)",
    );
  }
  return BigInt(toMillis(retention, "idempotencyRetention") ?? 0);
}

/**
 * @internal `key` if it is a string or undefined (a JavaScript caller may pass
 * anything); else throws InvalidArgument. The native core checks the rest.
 */
export function checkKeyType(key: unknown): string | undefined {
  if (key !== undefined && typeof key !== "string") {
    throw new InvalidArgument(`idempotencyKey must be a string (or left out for a fresh one), not ${typeof key}`);
  }
  return key;
}

function pause(ms: number, stop: CallStop | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      forget?.();
      resolve();
    }, ms);
    const forget = stop?.listen(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** What the error message adds about the retries made before it ("" for none). */
function retried(retries: number, elapsedMs: number, rest: string): string {
  if (retries === 0) return "";
  const times = retries === 1 ? "once" : `${retries} times`;
  return `; retried ${times} over ${(elapsedMs / 1000).toFixed(1)}s with the same idempotency key${rest}`;
}

/** Why retries stopped with the daemon still refusing the call: the call's deadline, the window of a call without one, or the client's retry budget. */
export type GaveUp = "deadline" | "window" | "budget";

/** What a call's message says when its client's retry budget refused a retry. */
const BUDGET_EXHAUSTED = "the client's retry budget was exhausted (its calls were refused too often lately: gRFC A6 retry throttling)";

/**
 * @internal What a failed call's message adds about its retries ("" for none):
 * how often and over how long, and either the refusal before the status that
 * ended them (`last`, as `CODE: message`) or that they ran out of time
 * (`gaveUp`) while the daemon still refused the call: UNAVAILABLE, or
 * RESOURCE_EXHAUSTED (`overloaded`).
 */
export function failureNote(retries: number, elapsedMs: number, last: string | undefined, gaveUp: GaveUp | undefined, overloaded = false): string {
  if (gaveUp === undefined) return retried(retries, elapsedMs, last === undefined || last === "" ? "" : ` after ${last}`);
  if (gaveUp === "budget") {
    // An App's actors' calls have a budget of the App's: the advice names both.
    const advice = overloaded
      ? "; the daemon is refusing calls for lack of room: send less, or give the Client (or the App, for its actors' calls) a larger retryBudget"
      : "; check that the daemon is running and reachable, or give the Client (or the App, for its actors' calls) a larger retryBudget (false turns the budget off)";
    // retried() says nothing of a call not retried: this one says why not.
    if (retries === 0) return `; not retried: ${BUDGET_EXHAUSTED}${advice}`;
    return retried(retries, elapsedMs, ` until ${BUDGET_EXHAUSTED}${advice}`);
  }
  const until =
    gaveUp === "window"
      ? `for ${NO_DEADLINE_RETRY_WINDOW_MS / 1000}s, the limit for a call without a timeout`
      : "until the call's deadline left no time for another attempt";
  const advice = overloaded
    ? "; the daemon kept refusing it for lack of room (the message says why): give the call a longer timeout to wait the load out, or send less"
    : "; check that the daemon is running and reachable, or give the call a longer timeout to ride out a longer restart";
  return retried(retries, elapsedMs, ` ${until}${advice}`);
}

/**
 * @internal For a refusal worth resending, the least pause (ms) before the
 * resend: none of its own for UNAVAILABLE, the daemon's pushback for
 * RESOURCE_EXHAUSTED. Undefined for every other status, and for a
 * RESOURCE_EXHAUSTED without a pushback (or a negative one, which gRFC A6
 * makes a "do not retry").
 */
export function minPause(err: grpc.ServiceError): number | undefined {
  if (err.code === grpc.status.UNAVAILABLE) return 0;
  if (err.code !== grpc.status.RESOURCE_EXHAUSTED) return undefined;
  const value = err.metadata.get(PUSHBACK_TRAILER)[0];
  const text = typeof value === "string" ? value.trim() : "";
  return /^\d+$/.test(text) ? Number(text) : undefined;
}

// NODE_DEBUG=troupe prints it, as Node's own modules do theirs.
const debug = debuglog("troupe");

/**
 * @internal The debug line of a retry about to happen (`retry` counts from 1;
 * `details` is the refusal as `CODE: message`), printed with NODE_DEBUG=troupe.
 */
export function logRetry(what: string, details: string, retry: number, pauseMs: number): void {
  debug("%s: %s; retry %d in %d ms, same idempotency key", what, details, retry, Math.round(pauseMs));
}

/** How {@link sendWithRetries} sends. */
export interface RetryOptions {
  /** Resend refusals (the Client's `retry` option). */
  retry: boolean;
  /** The call, for error messages: "invoke counter/c1.incr". */
  what: string;
  /** The client's retry budget; undefined: none. */
  throttle?: RetryThrottle | undefined;
  /** Ends the pause before a retry too (the attempt after it then rejects with its reason). */
  stop?: CallStop | undefined;
}

/**
 * @internal Run `attempt()` until it answers, fails with a status that is not
 * a refusal to resend ({@link minPause}), or the call's `deadline` (unix ms;
 * undefined: none) leaves no time for another attempt, or the client's retry
 * budget (`options.throttle`) refuses one. Without `options.retry` the call is
 * sent once and leaves the budget alone. Rejects with the SDK's error for the
 * last status, saying how often it retried. `attempt` must resend the same
 * request, idempotency key and deadline included, and reject with the gRPC
 * error.
 */
export async function sendWithRetries<T>(attempt: () => Promise<T>, deadline: number | undefined, options: RetryOptions): Promise<T> {
  // A call sent once is outside the retry policy, and so outside its throttling (as in gRPC).
  const throttle = options.retry ? options.throttle : undefined;
  const start = Date.now();
  let windowEnd = deadline;
  let backoff = FIRST_BACKOFF_MS;
  let retries = 0;
  let last = "";
  for (;;) {
    try {
      const answer = await attempt();
      throttle?.onSuccess();
      return answer;
    } catch (err) {
      if (!isServiceError(err)) throw err;
      const least = options.retry ? minPause(err) : undefined;
      if (least === undefined) {
        // Another status ends the retries: the restarted daemon's NOT_FOUND, or the
        // deadline passing while a retry waited (then the refusal explains more).
        throw fromRpcError(err, options.what, failureNote(retries, Date.now() - start, last, undefined));
      }
      // Every refusal takes its token, the last one of a call too (gRFC A6), even when
      // time would end the retries anyway.
      const throttled = throttle !== undefined && !throttle.onFailure();
      last = `${grpc.status[err.code]}: ${rpcDetails(err) || "no details"}`;
      const now = Date.now();
      windowEnd ??= now + NO_DEADLINE_RETRY_WINDOW_MS;
      // Jitter keeps many clients of a restarted daemon from retrying in lockstep;
      // the last pause is cut short so that the attempt after it still fits, but
      // never below what the daemon asked for.
      const room = windowEnd - now - MIN_ATTEMPT_MS;
      // Time first: when both end the retries, the deadline is what the caller can act on.
      const outOfTime = room <= 0 || room < least;
      const gaveUp: GaveUp | undefined = outOfTime ? (deadline === undefined ? "window" : "deadline") : throttled ? "budget" : undefined;
      if (gaveUp !== undefined) {
        throw fromRpcError(err, options.what, failureNote(retries, now - start, last, gaveUp, err.code === grpc.status.RESOURCE_EXHAUSTED));
      }
      const wait = Math.min(Math.max(backoff * (0.8 + 0.4 * Math.random()), least), room);
      logRetry(options.what, last, retries + 1, wait);
      await pause(wait, options.stop);
      if (options.stop?.reason !== undefined) throw options.stop.reason;
      retries += 1;
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }
}
