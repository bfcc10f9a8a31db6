// The Map-like view of an actor's state that actors use as `this.state`. The
// view checks what users write and resolves the running turn; the bookkeeping
// that turns writes into each turn's changes is state_ledger.ts, and what a
// failed turn undoes is state_rollback.ts.
import { ReadOnlyStateError, TroupeError } from "./errors.js";
import type { StateChange } from "./gen/troupe/v1/common.js";
import { jsonlessTopLevel } from "./payload.js";
import { StateLedger } from "./state_ledger.js";
import { rollback } from "./state_rollback.js";
import { type StateSetOptions, ttlOf } from "./state_ttl.js";
import { currentTurn, type TurnScope } from "./turn.js";

/** The shape of an actor's state: string keys, JSON-serialisable values. */
export type StateShape = Record<string, unknown>;

type Key<S> = keyof S & string;

type Write = "set" | "delete";

let ledgerOf: ((state: State) => StateLedger) | undefined;

export { type StateSetOptions, ttlOf } from "./state_ttl.js";

/** The key (and, after a slash, the prefix of the keys) the daemon keeps the expiry times in; a turn writing one is refused. */
const EXPIRES_KEY = "$expires";

/**
 * An actor's state: string keys, JSON-serialisable values, typed by `S`.
 *
 * Changes made during a turn, including in-place changes to values read during
 * the turn (`this.state.get("items")?.push(x)`), are sent to the daemon when the
 * turn ends and applied atomically. If the turn throws, they are discarded and
 * the keys it touched return to what they were, except a key another turn wrote
 * after it: that write stays.
 *
 * Several turns of one actor can be in flight at once (read-only methods, and a
 * reentrant actor called back by a chain it is waiting on); each reports only
 * the keys it changed itself. In a read-only method every write throws
 * {@link ReadOnlyStateError}.
 *
 * State changes only during the actor's turns (methods, `onActivate`,
 * `onDeactivate`, `onReminder`, `onTimer`, `onAlarm`, and work they await).
 * Outside them (in a `setTimeout` callback, or a promise a method left running
 * after it returned), `set`, `delete`, `clear` and a `setDefault` that would
 * add the key throw {@link TroupeError}, as does changing in place a plain
 * object or array read there; reads work anywhere.
 *
 * A key can expire: `set(key, value, { ttl: "1h" })`. An expired key is gone
 * everywhere: the SDK drops it from this view before the actor's next turn
 * (call, reminder, timer or alarm) runs, and the daemon from the store. See
 * {@link State.set} for the rules.
 */
export class State<S extends object = StateShape> implements Iterable<[Key<S>, S[Key<S>]]> {
  readonly #ledger: StateLedger;
  // The ledger's map, held here too: reads are the hot path.
  readonly #values: Map<string, unknown>;
  // The views handed out outside turns (#guarded), by value; made on first use.
  #views: WeakMap<object, object> | undefined;

  /** @internal Built by the SDK from the stored bytes; actors use `this.state`. */
  constructor(stored: Readonly<Record<string, Uint8Array>> = {}) {
    this.#ledger = new StateLedger(stored);
    this.#values = this.#ledger.values;
  }

  /** The value of `key`, or `fallback` (default undefined) when the key is absent. */
  get<K extends Key<S>>(key: K): S[K] | undefined;
  get<K extends Key<S>>(key: K, fallback: S[K]): S[K];
  get<K extends Key<S>>(key: K, fallback?: S[K]): S[K] | undefined {
    if (!this.#values.has(key)) return fallback;
    const value = this.#values.get(key) as S[K];
    return this.#touch(key) === undefined ? this.#guarded(value, key) : value;
  }

  /**
   * Set `key` to a JSON-serialisable value; with `{ ttl }`, also set when it expires.
   *
   * - `{ ttl: "1h" }` (any duration of at least a second; a number is seconds):
   *   the key expires an hour after the turn's changes are stored. This is sent
   *   even when the value is unchanged, so setting the same value again renews
   *   the expiry. A ttl under a second throws RangeError here, a value that is no
   *   duration InvalidArgument.
   * - `{ ttl: null }`: the key no longer expires.
   * - No ttl (a plain `set`, or `ttl: undefined`), and changes made in place:
   *   the key keeps the expiry it has, so updating a value does not end it; a new
   *   key does not expire.
   * - `delete(key)` ends the key's expiry: set again later (even in the same
   *   turn) without a ttl, it does not expire.
   *
   * The expiry belongs to the turn's changes: it is stored with them when the
   * turn ends, forgotten with them when the turn throws, and refused like any
   * write in a read-only method. The key `"$expires"` is the daemon's and
   * cannot be set.
   *
   * Throws TroupeError outside the actor's turns (work a turn left running
   * after it ended, say): see {@link State}.
   */
  set<K extends Key<S>>(key: K, value: S[K], options?: StateSetOptions): this {
    if (typeof key !== "string" || key === "") {
      throw new TypeError(`state keys must be non-empty strings, got ${JSON.stringify(key)}`);
    }
    if (key === EXPIRES_KEY || key.startsWith(`${EXPIRES_KEY}/`)) {
      throw new TypeError(
        `state key ${JSON.stringify(key)} is the daemon's (${JSON.stringify(EXPIRES_KEY)} and the keys under ${JSON.stringify(`${EXPIRES_KEY}/`)} keep the keys' expiry times); use another key`,
      );
    }
    if (value === undefined) {
      throw new TypeError(`state[${JSON.stringify(key)}] cannot be undefined; use state.delete(key)`);
    }
    // Nested ones are refused where the turn's changes are encoded, at its end.
    const jsonless = jsonlessTopLevel(value);
    if (jsonless !== undefined) throw new TypeError(`state[${JSON.stringify(key)}] must be JSON-serialisable: ${jsonless}`);
    // Read before anything changes: a bad ttl leaves the state as it was.
    const ttlMs = ttlOf(options);
    const scope = this.#touch(key, "set", value);
    this.#values.set(key, value);
    if (ttlMs !== undefined) (scope?.ttls ?? this.#ledger.looseTtls).set(key, ttlMs);
    return this;
  }

  /** The value of `key`, first setting it to `value` if absent (Python's `setdefault`). */
  setDefault<K extends Key<S>>(key: K, value: S[K]): S[K] {
    if (!this.#values.has(key)) this.set(key, value);
    return this.get(key, value);
  }

  /** Remove `key` (and its expiry); returns whether it was there. */
  delete(key: Key<S>): boolean {
    this.#forget(key);
    return this.#values.delete(key);
  }

  /** Remove every key. */
  clear(): void {
    for (const key of this.#values.keys()) this.#forget(key);
    this.#values.clear();
  }

  /** Record the deletion of `key` by the running turn (or code outside turns). */
  #forget(key: string): void {
    const scope = this.#touch(key, "delete");
    // Deleted and set again in one turn, the daemon sees a set alone, which would
    // keep the old expiry: the deletion must end it. Sent only with a set.
    (scope?.ttls ?? this.#ledger.looseTtls).set(key, 0n);
  }

  has(key: Key<S>): boolean {
    return this.#values.has(key);
  }

  get size(): number {
    return this.#values.size;
  }

  keys(): IterableIterator<Key<S>> {
    return this.#values.keys() as IterableIterator<Key<S>>;
  }

  *values(): IterableIterator<S[Key<S>]> {
    for (const [, value] of this.entries()) yield value;
  }

  *entries(): IterableIterator<[Key<S>, S[Key<S>]]> {
    for (const [key, value] of this.#values) {
      // Values handed out may be changed in place: re-encode them at turn end.
      const inTurn = this.#touch(key) !== undefined;
      yield [key as Key<S>, (inTurn ? value : this.#guarded(value, key)) as S[Key<S>]];
    }
  }

  [Symbol.iterator](): IterableIterator<[Key<S>, S[Key<S>]]> {
    return this.entries();
  }

  /** A plain-object snapshot of the current values. */
  toJSON(): Partial<S> {
    return Object.fromEntries(this.entries()) as Partial<S>;
  }

  #scope(): TurnScope | undefined {
    const scope = currentTurn.getStore();
    return scope !== undefined && scope.state === this && scope.live ? scope : undefined;
  }

  /**
   * Record that the running turn reads (or, with `write`, changes to `value`)
   * `key`; call it before changing the value. Returns the turn, undefined
   * outside turns. Throws, before anything changes, TroupeError for a write
   * outside the actor's turns and ReadOnlyStateError for one in a read-only turn.
   */
  #touch(key: string, write?: Write, value?: unknown): TurnScope | undefined {
    const scope = this.#scope();
    if (write !== undefined && scope === undefined) throw this.#outsideTurns(`${write} key ${JSON.stringify(key)}`);
    if (write !== undefined && scope?.readonly === true) {
      throw new ReadOnlyStateError(
        `method ${JSON.stringify(scope.method)} of ${scope.actor} is read-only (declared with @method({ readonly: true })), ` +
          `so it cannot change this.state (it tried to ${write} key ${JSON.stringify(key)}); the state is unchanged. ` +
          "Remove readonly from the method, or make the change in a method that is not read-only",
      );
    }
    this.#ledger.touch(key, scope, write !== undefined, value);
    return scope;
  }

  /**
   * The error of a change outside the actor's turns. Only a turn's end sends
   * changes, so one made elsewhere would wait for whichever turn came next and
   * be saved (or undone) with that turn's, which did not make it.
   */
  #outsideTurns(change: string): TroupeError {
    const store = currentTurn.getStore();
    const where =
      store === undefined
        ? "outside any turn"
        : store.state !== this
          ? `in ${store.method} of ${store.actor}, which is not this state's actor`
          : `after its turn ended (in work that ${store.method} of ${store.actor} started and did not await)`;
    return new TroupeError(
      `this.state cannot ${change} ${where}: an actor's state changes only during its turns (methods, onActivate, onDeactivate, ` +
        "onReminder, onTimer, onAlarm), whose end saves them; the state is unchanged. Await that work inside the turn, " +
        "or make the change in a turn: call or tell the actor, or set a timer or reminder whose handler makes it",
    );
  }

  /**
   * `value`, read outside the actor's turns, as a view that refuses changes
   * in place there as set() does (see #outsideTurns); inside a turn of the
   * actor the view changes the value as the turn's own change. Plain objects
   * and arrays only: other classes' methods need their own instance as `this`.
   */
  #guarded<T>(value: T, key: string): T {
    if (!isPlainData(value)) return value;
    this.#views ??= new WeakMap();
    let view = this.#views.get(value);
    if (view === undefined) {
      view = new Proxy(value, this.#viewHandler(key));
      this.#views.set(value, view);
    }
    return view as T;
  }

  #viewHandler(key: string): ProxyHandler<object> {
    const change = (): void => {
      const scope = this.#scope();
      if (scope === undefined) throw this.#outsideTurns(`change key ${JSON.stringify(key)} in place`);
      // The turn re-encodes the key at its end, so it sends the change.
      this.#ledger.touch(key, scope, false);
    };
    return {
      get: (target, prop) => {
        const inner: unknown = Reflect.get(target, prop);
        if (!isPlainData(inner)) return inner;
        // A proxy must return a property that can neither change nor be redefined as it is.
        const own = Reflect.getOwnPropertyDescriptor(target, prop);
        return own?.configurable === false && own.writable === false ? inner : this.#guarded(inner, key);
      },
      set: (target, prop, v) => {
        change();
        return Reflect.set(target, prop, v);
      },
      deleteProperty: (target, prop) => {
        change();
        return Reflect.deleteProperty(target, prop);
      },
      defineProperty: (target, prop, descriptor) => {
        change();
        return Reflect.defineProperty(target, prop, descriptor);
      },
      setPrototypeOf: (target, proto) => {
        change();
        return Reflect.setPrototypeOf(target, proto);
      },
      preventExtensions: (target) => {
        change();
        return Reflect.preventExtensions(target);
      },
    };
  }

  static {
    ledgerOf = (state) => state.#ledger;
  }
}

/** A plain object or an array: what a view of #guarded can stand in for. */
function isPlainData(value: unknown): value is object {
  if (typeof value !== "object" || value === null) return false;
  if (Array.isArray(value)) return true;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function ledger(state: object): StateLedger {
  if (ledgerOf === undefined) throw new Error("troupe: State internals are not initialised");
  return ledgerOf(state as State);
}

/**
 * @internal The changes of a writing turn (without a turn: of code outside
 * turns), which become the new baseline.
 */
export function commitState<S extends object>(state: State<S>, scope?: TurnScope): StateChange[] {
  return ledger(state).commit(scope);
}

/** @internal End a read-only turn; see StateLedger#refuse. */
export function refuseState<S extends object>(state: State<S>, scope: TurnScope): StateChange[] {
  return ledger(state).refuse(scope);
}

/** @internal Undo what a failed turn (without a turn: code outside turns) changed. */
export function rollbackState<S extends object>(state: State<S>, scope?: TurnScope): void {
  rollback(ledger(state), scope);
}

/** @internal The turn is over. */
export function endTurn<S extends object>(state: State<S>, scope: TurnScope): void {
  ledger(state).end(scope);
}

/** @internal Drop the keys the daemon says expired (Turn.expired_keys); see StateLedger#expire. */
export function expireState<S extends object>(state: State<S>, keys: readonly string[]): void {
  ledger(state).expire(keys);
}
