// `this.ctx`: what an actor can do beyond its own state.
import { type ActorClass, type ActorInstance, actorTypeName } from "./actor.js";
import {
  type ActorHandle,
  type CallOptions,
  type Caller,
  type HandleOptions,
  handleOptions,
  makeHandle,
  type Params,
  splitParams,
  type TellOptions,
  type UntypedActor,
} from "./caller.js";
import { toMillis } from "./duration.js";
import type { ActorRef } from "./gen/troupe/v1/common.js";
import { TroupeError } from "./errors.js";
import { encodeResult } from "./payload.js";
import type { AlarmOptions, Reminder, ReminderOptions, Scheduler, ScheduleTime, TimerOptions } from "./schedule.js";
import { liveTurn } from "./turn.js";

/** `ctx.signal` outside a turn: nothing to cancel. */
const NEVER_ABORTED = new AbortController().signal;

/**
 * What an actor can do from inside a turn beyond its own state: call other
 * actors, publish events to its watchers, and manage its own reminders, alarm
 * and timers.
 *
 * A call made while a turn runs (through `this.ctx` or any {@link Client})
 * carries the turn's call chain, so the daemon can let a chain re-enter a
 * reentrant actor and refuse a cycle into any other one at once, and a deadline
 * no later than the turn's caller's. See docs/calls.md.
 *
 * Invoke and tell carry an idempotency key and are retried on UNAVAILABLE (or
 * a RESOURCE_EXHAUSTED with a retry pushback) within the turn's caller's
 * deadline, as a {@link Client}'s, and within a retry budget shared by all the
 * calls the app's actors make on one connection to the daemon (the App's
 * `retryBudget`).
 */
export class Context {
  readonly #caller: Caller;
  readonly #scheduler: Scheduler;
  readonly #self: ActorRef;

  /** @internal */
  constructor(caller: Caller, scheduler: Scheduler, type: string, id: string) {
    this.#caller = caller;
    this.#scheduler = scheduler;
    this.#self = { type, id };
  }

  /**
   * The running turn's call chain as `"type/id"` names, outermost caller first
   * and this actor last; empty outside a turn.
   */
  get chain(): readonly string[] {
    return (liveTurn()?.chain?.actors ?? []).map((a) => `${a.type}/${a.id}`);
  }

  /**
   * What the running turn's caller sent as `metadata` with its invoke or tell (a
   * tenant, a user, a request id); empty for reminders, timers and the alarm, and
   * outside a turn. The daemon passes it through as the caller sent it.
   */
  get metadata(): Readonly<Record<string, string>> {
    return Object.freeze({ ...liveTurn()?.metadata });
  }

  /**
   * When the running turn's caller stops waiting; undefined when it set no
   * deadline (or outside a turn). Calls the turn makes end by then.
   */
  get deadline(): Date | undefined {
    const ms = liveTurn()?.deadline;
    return ms === undefined ? undefined : new Date(ms);
  }

  /**
   * Aborted when the running turn's caller stops waiting (it cancelled the call, or
   * its deadline passed): nobody will read the turn's result, and the actor's next
   * turns wait behind it. Pass it to work that takes one (`fetch(url, { signal })`),
   * or `signal.throwIfAborted()` between steps; a turn that throws its reason ends
   * as a failure and its state changes are discarded. Outside a turn, never aborted.
   */
  get signal(): AbortSignal {
    return liveTurn()?.signal ?? NEVER_ABORTED;
  }

  /**
   * Publish `value` as an event of the running turn, to every client watching
   * this actor (`client.watch(type, id)`). It travels as a method's return
   * value does: JSON, or raw bytes for a Uint8Array, encoded here, so a value
   * that cannot be sent throws TypeError at this call.
   *
   * Events are the turn's, like its state changes: they reach the watchers,
   * in the order they were published and after the events of earlier turns,
   * once the turn succeeded, and not at all when it fails (the handler threw,
   * its caller cancelled it...). Publish from a method (a read-only one too:
   * events are no state), `onReminder`, `onTimer` or `onAlarm` while it runs;
   * `onActivate`, `onDeactivate` and work that outlives its turn cannot
   * publish (it throws {@link TroupeError}).
   *
   * ```ts
   * this.state.set("position", pos);
   * this.ctx.publish({ kind: "moved", pos });
   * ```
   */
  publish(value: unknown): void {
    const self = `${this.#self.type}/${this.#self.id}`;
    const scope = liveTurn();
    if (scope === undefined || scope.events === undefined) {
      const where = scope === undefined ? "outside any turn (from work that outlived its turn, or no turn at all)" : `from ${scope.method}`;
      throw new TroupeError(
        `${self} called this.ctx.publish ${where}, but events can only be published from a turn: a method, onReminder, onTimer or onAlarm while it runs. ` +
          "Publish from the method that made the change (for an activation, from a timer it sets in onActivate, say)",
      );
    }
    if (scope.actor !== self) {
      throw new TroupeError(
        `this.ctx.publish of ${self} was called during a turn of ${scope.actor}; an actor publishes only from its own turns: publish through the ctx of ${scope.actor}`,
      );
    }
    // Encoded now: a value that cannot be sent fails here, where it was published, not the whole turn at its end.
    scope.events.push(encodeResult(value, `the event ${self} published`));
  }

  /** A handle on another actor: `await this.ctx.actor<Counter>("counter", "c2").call("incr", 1)`. */
  actor<A extends ActorInstance>(cls: ActorClass<A>, id: string, options?: HandleOptions): ActorHandle<A>;
  actor<A = UntypedActor>(type: string, id: string, options?: HandleOptions): ActorHandle<A>;
  actor<A>(typeOrClass: string | ActorClass, id: string, handle?: HandleOptions): ActorHandle<A> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    const options = handleOptions(handle);
    toMillis(options.timeout, "timeout"); // a bad timeout fails here, not at the handle's first call
    return makeHandle<A>(
      type,
      id,
      (m, args, kw) => this.#caller.invoke(type, id, m, args, kw, options),
      (m, args, kw) => this.#caller.tell(type, id, m, args, kw, options),
    );
  }

  /** Call a method on another actor and return its result (see {@link Client.invoke}, also for `idempotencyKey` and `idempotencyRetention`). */
  invoke(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options: CallOptions = {},
  ): Promise<unknown> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#caller.invoke(type, id, method, args, kw, options);
  }

  /**
   * Queue a call on another actor without waiting for its result (`{ durable: true }`:
   * see {@link TellOptions}). With `{ delay }` or `{ at }` it is delivered later (to this actor
   * too: a message to its future self) and resolves to the reminder it waits as.
   */
  tell(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options: TellOptions = {},
  ): Promise<string | null> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#caller.tell(type, id, method, args, kw, options);
  }

  /**
   * Set (or replace) the durable reminder `name` of this actor; it fires
   * `onReminder(name, data)` even when the actor is inactive, and survives
   * daemon restarts. Rejects with {@link InvalidArgument} for a bad due time or period.
   *
   * ```ts
   * await this.ctx.setReminder("bill", { due: "1h", period: "720h", data: { plan: "pro" } });
   * await this.ctx.setReminder("poll", { period: "R5/PT10S", retry: { maxAttempts: 5 } });
   * await this.ctx.setReminder("standup", { cron: "0 9 * * MON-FRI", timeZone: "Europe/Berlin" });
   * ```
   */
  setReminder(name: string, options: ReminderOptions = {}): Promise<Reminder> {
    return this.#scheduler.setReminder(this.#self.type, this.#self.id, name, options);
  }

  /** This actor's reminder `name`, or null if it has none of that name. */
  getReminder(name: string): Promise<Reminder | null> {
    return this.#scheduler.getReminder(this.#self.type, this.#self.id, name);
  }

  /** Delete this actor's reminder `name`; resolves to whether it existed. */
  deleteReminder(name: string): Promise<boolean> {
    return this.#scheduler.deleteReminder(this.#self.type, this.#self.id, name);
  }

  /** Hold this actor's reminder `name` until `resumeReminder`; null if there is none. */
  pauseReminder(name: string): Promise<Reminder | null> {
    return this.#scheduler.pauseReminder(this.#self.type, this.#self.id, name);
  }

  /** Let this actor's paused reminder `name` fire again; null if there is none. */
  resumeReminder(name: string): Promise<Reminder | null> {
    return this.#scheduler.resumeReminder(this.#self.type, this.#self.id, name);
  }

  /** This actor's reminders (its alarm included, with `alarm: true`). */
  listReminders(): Promise<Reminder[]> {
    return this.#scheduler.listReminders({ actorType: this.#self.type, actorId: this.#self.id });
  }

  /**
   * Set (or replace) this actor's one alarm: `onAlarm(data)` runs at `at` (an
   * RFC 3339 string, a Date, or a duration from now), with the durability and
   * retries of a reminder.
   */
  setAlarm(at: ScheduleTime, options: AlarmOptions = {}): Promise<Reminder> {
    return this.#scheduler.setAlarm(this.#self.type, this.#self.id, at, options);
  }

  /** This actor's alarm, or null if none is set. */
  getAlarm(): Promise<Reminder | null> {
    return this.#scheduler.getAlarm(this.#self.type, this.#self.id);
  }

  /** Delete this actor's alarm; resolves to whether there was one. */
  deleteAlarm(): Promise<boolean> {
    return this.#scheduler.deleteAlarm(this.#self.type, this.#self.id);
  }

  /**
   * Set (or replace) the in-memory timer `name`: `onTimer(name, data)` runs after
   * `due` and then every `period`, until it is deleted or the actor deactivates.
   * With `keepAlive: true` a firing counts as activity and keeps the actor from idling out.
   */
  setTimer(name: string, options: TimerOptions = {}): Promise<void> {
    return this.#scheduler.setTimer(this.#self.type, this.#self.id, name, options);
  }

  /** Delete the timer `name`; resolves to whether it existed. */
  deleteTimer(name: string): Promise<boolean> {
    return this.#scheduler.deleteTimer(this.#self.type, this.#self.id, name);
  }
}
