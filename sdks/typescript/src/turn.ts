// The turn running in the current async context: its call chain, its caller's
// deadline and the state it touched.
//
// Each turn runs in its own async context, so concurrent turns (of different
// actors, and the read-only or re-entrant turns the daemon runs side by side on
// one actor) never see each other's scope, while work a handler starts inherits it.
import { AsyncLocalStorage } from "node:async_hooks";
import type * as grpc from "@grpc/grpc-js";
import { DeadlineExceeded } from "./errors.js";
import type { CallChain, Payload } from "./gen/troupe/v1/common.js";

/**
 * @internal One turn (or activation/deactivation hook) of one actor instance in this app.
 *
 * `snapshots` holds, per state key the turn touched, the encoded value it had
 * when the turn first touched it (undefined: absent); `written` the keys it set
 * or deleted; `ttls` the expiry its sets and deletes gave a key (StateChange.ttl_ms:
 * 0 no expiry), sent only with this turn's changes; `events` what it published
 * (`ctx.publish`), sent only with its success. `live` turns false when the turn
 * ends, so that work which outlives it neither records state or events into it
 * nor claims its chain.
 */
export class TurnScope {
  live = true;
  readonly snapshots = new Map<string, Buffer | undefined>();
  readonly written = new Set<string>();
  readonly ttls = new Map<string, bigint>();
  /**
   * The events the turn published, encoded, in call order; undefined for an
   * activation or deactivation hook, whose results carry no events (the
   * session opens it for the turns it runs).
   */
  events: Payload[] | undefined;
  /** When the turn's caller stops waiting (unix ms), if it set a deadline. */
  readonly deadline: number | undefined;
  /** Made on first use: most turns are never asked for their signal nor cancelled. */
  #abort: AbortController | undefined;
  /** The calls the turn has under way, stopped with it (made on first use). */
  #calls: Set<(reason: Error) => void> | undefined;
  /** Why the turn was cancelled, once it was. */
  #cancelled: TurnCancelled | undefined;

  constructor(
    /** The State instance of the actor the turn belongs to. */
    readonly state: object,
    /** `type/id`, for messages. */
    readonly actor: string,
    readonly method: string,
    readonly readonly = false,
    readonly chain?: CallChain,
    deadlineUnixMs = 0n,
    /** What the caller sent as metadata with the call. */
    readonly metadata?: Readonly<Record<string, string>>,
  ) {
    this.deadline = deadlineUnixMs > 0n ? Number(deadlineUnixMs) : undefined;
  }

  /** Aborted when the daemon says the turn's caller stopped waiting (CancelTurn). */
  get signal(): AbortSignal {
    this.#abort ??= new AbortController();
    return this.#abort.signal;
  }

  /** The daemon's CancelTurn: whoever listens to `signal` stops the turn's work, and the calls the turn made end. */
  cancel(): void {
    if (this.#cancelled !== undefined) return;
    const reason = new TurnCancelled(
      `${this.actor}.${this.method}: the caller stopped waiting (it cancelled the call or its deadline passed), so the turn was cancelled`,
    );
    this.#cancelled = reason;
    this.#abort ??= new AbortController();
    this.#abort.abort(reason);
    const calls = this.#calls;
    this.#calls = undefined;
    for (const stop of calls ?? []) stop(reason);
  }

  /** @internal Runs `stop` when the turn is cancelled (at once if it was); returns what forgets it. */
  onCancel(stop: (reason: Error) => void): () => void {
    if (this.#cancelled !== undefined) {
      stop(this.#cancelled);
      return () => undefined;
    }
    const calls = (this.#calls ??= new Set());
    calls.add(stop);
    return () => calls.delete(stop);
  }

  /** @internal Why the turn was cancelled; undefined while it was not. */
  get cancelled(): TurnCancelled | undefined {
    return this.#cancelled;
  }
}

/**
 * @internal What ends a call before its answer: the caller's AbortSignal (the
 * call's `signal` option), the cancellation of the turn the call was made in,
 * or either.
 */
export interface CallStop {
  /** Why the call must stop already; undefined: it need not (yet). */
  readonly reason: Error | undefined;
  /** Runs `stop` once when the call must stop (at once if it must already); returns what forgets it. */
  listen(stop: (reason: Error) => void): () => void;
}

/** @internal A signal's reason as the call's error: itself when it is one (`abort()`'s AbortError is). */
export function abortError(reason: unknown): Error {
  if (reason instanceof Error) return reason;
  const err = new Error(`the call's signal was aborted: ${String(reason)}`, { cause: reason });
  err.name = "AbortError";
  return err;
}

function signalStop(signal: AbortSignal): CallStop {
  return {
    get reason(): Error | undefined {
      return signal.aborted ? abortError(signal.reason) : undefined;
    },
    listen(stop) {
      if (signal.aborted) {
        stop(abortError(signal.reason));
        return () => undefined;
      }
      const onAbort = (): void => {
        stop(abortError(signal.reason));
      };
      signal.addEventListener("abort", onAbort, { once: true });
      return () => {
        signal.removeEventListener("abort", onAbort);
      };
    },
  };
}

function turnStop(scope: TurnScope): CallStop {
  return {
    get reason(): Error | undefined {
      return scope.cancelled;
    },
    listen: (stop) => scope.onCancel(stop),
  };
}

/**
 * @internal What stops a call made now with `signal`: that, and the running
 * turn's cancellation, so that a cancelled turn's calls end with it (and the
 * turns they started are cancelled in turn). Undefined, at no cost, for a call
 * with neither.
 */
export function callStop(signal: AbortSignal | undefined): CallStop | undefined {
  const scope = liveTurn();
  const own = signal === undefined ? undefined : signalStop(signal);
  if (scope === undefined) return own;
  const turn = turnStop(scope);
  if (own === undefined) return turn;
  return {
    get reason(): Error | undefined {
      return own.reason ?? turn.reason;
    },
    listen(stop) {
      let once = false;
      const first = (reason: Error): void => {
        if (once) return;
        once = true;
        stop(reason);
      };
      const offOwn = own.listen(first);
      const offTurn = turn.listen(first);
      return () => {
        offOwn();
        offTurn();
      };
    },
  };
}

/**
 * The reason of a cancelled turn's `ctx.signal`; thrown by the handler, it ends the
 * turn as a failure whose state changes are discarded.
 */
export class TurnCancelled extends Error {
  override name = "CancelledError";
}

/** @internal */
export const currentTurn = new AsyncLocalStorage<TurnScope>();

/** @internal The turn the running code works for, if it is still running. */
export function liveTurn(): TurnScope | undefined {
  const scope = currentTurn.getStore();
  return scope?.live === true ? scope : undefined;
}

/**
 * @internal The chain a call made now must carry: the running turn's, exactly as
 * the daemon sent it (it already ends with this actor).
 */
export function chainForCall(): CallChain | undefined {
  return liveTurn()?.chain;
}

/**
 * @internal The gRPC deadline of a call: its own timeout, cut to the running
 * turn's caller's deadline. Nobody waits for the result after that, and
 * shrinking deadlines along a chain is what ends a wait across two chains (A
 * waits on B while B waits on A). Throws DeadlineExceeded if it already passed.
 */
export function callDeadline(timeoutMs: number | undefined, what: string): Partial<grpc.CallOptions> {
  const own = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const scope = liveTurn();
  if (scope?.deadline === undefined) return own === undefined ? {} : { deadline: own };
  const left = scope.deadline - Date.now();
  if (left <= 0) {
    throw new DeadlineExceeded(
      `${what}: not sent, because the caller of turn ${scope.actor}.${scope.method} stopped waiting ${String(-left)} ms ago ` +
        "(its deadline passed); give the outermost call a longer timeout, or do less in this turn",
    );
  }
  return { deadline: own === undefined ? scope.deadline : Math.min(own, scope.deadline) };
}
