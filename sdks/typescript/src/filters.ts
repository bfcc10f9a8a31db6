// Call filters: code an app runs around every turn of its actors, for what cuts
// across types (authorisation from call metadata, logging, metrics, a tenant's
// context), as Orleans's incoming grain call filters do.
import type { Actor } from "./actor.js";

/** What started a turn: a call (invoke or tell), or what fired. */
export type TurnKindName = "call" | "reminder" | "timer" | "alarm";

/** One turn about to run, as a {@link CallFilter} sees it. */
export interface IncomingCall {
  readonly actorType: string;
  readonly actorId: string;
  /** The actor instance the turn runs on (its `state`, its `ctx`). */
  readonly actor: Actor;
  /** The method called, or the hook a scheduled turn runs: `onReminder`, `onTimer` or `onAlarm`. */
  readonly method: string;
  readonly kind: TurnKindName;
  /**
   * The arguments, as the handler gets them: a call's (keyword arguments, when
   * there are any, as one last plain object: docs/payloads.md), or `[name, data]`
   * of a reminder or timer and `[data]` of the alarm.
   */
  readonly args: readonly unknown[];
  /** What the caller sent as `metadata` with an invoke or tell (empty for scheduled turns); also `this.ctx.metadata` in the turn. */
  readonly metadata: Readonly<Record<string, string>>;
  /** The method is read-only (it may run beside other read-only turns of the actor). */
  readonly readonly: boolean;
}

/** Runs the rest of the filters and then the handler; resolves to the handler's result as the later filters left it. */
export type Next = () => Promise<unknown>;

/**
 * `async (call, next) => ...`: runs the turn by awaiting `next()` at most once and
 * may replace its result; answers the call itself by returning without it (the
 * handler does not run, the state stays as it was); fails the turn by throwing
 * (its changes are undone and the caller gets ActorError with the error's name
 * and message).
 */
export type CallFilter = (call: IncomingCall, next: Next) => Promise<unknown>;

/** @internal The filters an App runs, checked when it is made rather than at the first turn. */
export function checkFilters(filters: readonly CallFilter[] | undefined): readonly CallFilter[] {
  for (const f of filters ?? []) {
    if (typeof f !== "function") throw new TypeError(`App filters take async functions (call, next); got ${String(f)}, which is not a function`);
  }
  return [...(filters ?? [])];
}

/** @internal Runs `handler` inside `filters`, the first outermost. */
export function runFiltered(filters: readonly CallFilter[], call: IncomingCall, handler: () => unknown): Promise<unknown> {
  const step = async (index: number): Promise<unknown> => {
    const current = filters[index];
    if (current === undefined) return handler();
    let called = false;
    const next: Next = () => {
      if (called) {
        return Promise.reject(
          new Error(
            `call filter ${current.name || "(anonymous)"} awaited next() twice for ${call.method} of ${call.actorType}/${call.actorId}; ` +
              "a turn runs its handler once: await next() at most once",
          ),
        );
      }
      called = true;
      return step(index + 1);
    };
    return current(call, next);
  };
  return step(0);
}
