// The Map-like view of an actor's state and the bookkeeping that turns it into changes.
import { ReadOnlyStateError } from "./errors.js";
import type { StateChange } from "./gen/troupe/v1/common.js";
import { decodeState, encodeState } from "./payload.js";
import { currentTurn, type TurnScope } from "./turn.js";

/** The shape of an actor's state: string keys, JSON-serialisable values. */
export type StateShape = Record<string, unknown>;

type Key<S> = keyof S & string;

type Write = "set" | "delete";

interface Internals {
  commit(state: State, scope: TurnScope | undefined): StateChange[];
  refuse(state: State, scope: TurnScope): StateChange[];
  rollback(state: State, scope: TurnScope | undefined): void;
  end(state: State, scope: TurnScope): void;
}
let internals: Internals | undefined;

function toChanges(encoded: Iterable<[string, Buffer | undefined]>): StateChange[] {
  const changes: StateChange[] = [];
  for (const [key, data] of encoded) {
    changes.push(data === undefined ? { key, op: { $case: "delete", value: true } } : { key, op: { $case: "set", value: data } });
  }
  return changes;
}

/**
 * An actor's state: string keys, JSON-serialisable values, typed by `S`.
 *
 * Changes made during a turn, including in-place changes to values read during
 * the turn (`this.state.get("items")?.push(x)`), are sent to the daemon when the
 * turn ends and applied atomically. If the turn throws, they are discarded and
 * the keys it touched return to what they were.
 *
 * Several turns of one actor can be in flight at once (read-only methods, and a
 * reentrant actor called back by a chain it is waiting on); each reports only
 * the keys it changed itself. In a read-only method every write throws
 * {@link ReadOnlyStateError}.
 */
export class State<S extends object = StateShape> implements Iterable<[Key<S>, S[Key<S>]]> {
  // What the daemon holds, as far as this app knows: the baseline of every turn.
  #stored: Map<string, Buffer>;
  #values = new Map<string, unknown>();
  // Per key, how many running writing turns touched it: their changes are not in
  // #stored yet, so a turn touching the key later snapshots the live value.
  #writers = new Map<string, number>();
  // Keys touched outside any running turn; the next writing turn sends them.
  #loose = new Set<string>();

  /** @internal Built by the SDK from the stored bytes; actors use `this.state`. */
  constructor(stored: Readonly<Record<string, Uint8Array>> = {}) {
    this.#stored = new Map();
    for (const [key, data] of Object.entries(stored)) {
      const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      this.#stored.set(key, bytes);
      try {
        this.#values.set(key, decodeState(bytes));
      } catch (e) {
        throw new TypeError(
          `stored value of state key ${JSON.stringify(key)} is not JSON (${e instanceof Error ? e.message : String(e)});` +
            " it was not written by a troupe SDK, or the data dir holds another app's data",
        );
      }
    }
  }

  /** The value of `key`, or `fallback` (default undefined) when the key is absent. */
  get<K extends Key<S>>(key: K): S[K] | undefined;
  get<K extends Key<S>>(key: K, fallback: S[K]): S[K];
  get<K extends Key<S>>(key: K, fallback?: S[K]): S[K] | undefined {
    if (!this.#values.has(key)) return fallback;
    this.#touch(key);
    return this.#values.get(key) as S[K];
  }

  /** Set `key` to a JSON-serialisable value. */
  set<K extends Key<S>>(key: K, value: S[K]): this {
    if (typeof key !== "string" || key === "") {
      throw new TypeError(`state keys must be non-empty strings, got ${JSON.stringify(key)}`);
    }
    if (value === undefined) {
      throw new TypeError(`state[${JSON.stringify(key)}] cannot be undefined; use state.delete(key)`);
    }
    this.#touch(key, "set");
    this.#values.set(key, value);
    return this;
  }

  /** The value of `key`, first setting it to `value` if absent (Python's `setdefault`). */
  setDefault<K extends Key<S>>(key: K, value: S[K]): S[K] {
    if (!this.#values.has(key)) this.set(key, value);
    return this.get(key, value);
  }

  /** Remove `key`; returns whether it was there. */
  delete(key: Key<S>): boolean {
    this.#touch(key, "delete");
    return this.#values.delete(key);
  }

  /** Remove every key. */
  clear(): void {
    for (const key of this.#values.keys()) this.#touch(key, "delete");
    this.#values.clear();
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
      this.#touch(key);
      yield [key as Key<S>, value as S[Key<S>]];
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
   * Record that the running turn reads (or, with `write`, changes) `key`. Only
   * touched keys are re-encoded at turn end, so a turn costs O(keys touched),
   * not O(state size). Call it before changing the value.
   */
  #touch(key: string, write?: Write): void {
    const scope = this.#scope();
    if (scope === undefined) {
      this.#loose.add(key);
      return;
    }
    if (write !== undefined && scope.readonly) {
      throw new ReadOnlyStateError(
        `method ${JSON.stringify(scope.method)} of ${scope.actor} is read-only (declared with @method({ readonly: true })), ` +
          `so it cannot change this.state (it tried to ${write} key ${JSON.stringify(key)}); the state is unchanged. ` +
          "Remove readonly from the method, or make the change in a method that is not read-only",
      );
    }
    if (!scope.snapshots.has(key)) {
      scope.snapshots.set(key, this.#snapshot(key));
      if (!scope.readonly) this.#writers.set(key, (this.#writers.get(key) ?? 0) + 1);
    }
    if (write !== undefined) scope.written.add(key);
  }

  #snapshot(key: string): Buffer | undefined {
    // Nobody has an unsent change of this key: the value is the stored one.
    if ((this.#writers.get(key) ?? 0) === 0) return this.#stored.get(key);
    if (!this.#values.has(key)) return undefined;
    try {
      return encodeState(key, this.#values.get(key));
    } catch {
      return this.#stored.get(key);
    }
  }

  /**
   * The keys whose value differs from the daemon's because of this turn (or,
   * without a turn, of code outside turns), encoded; undefined means deleted. A
   * key the turn only read counts when its value changed since the turn first
   * touched it (in place), so a turn nested in another one does not send the
   * outer turn's unsent changes. Throws TypeError if a value cannot be encoded.
   */
  #changed(scope: TurnScope | undefined): Map<string, Buffer | undefined> {
    const keys = new Set(this.#loose);
    if (scope !== undefined) for (const key of scope.snapshots.keys()) keys.add(key);
    const out = new Map<string, Buffer | undefined>();
    for (const key of [...keys].sort()) {
      const current = this.#values.has(key) ? encodeState(key, this.#values.get(key)) : undefined;
      const base = this.#stored.get(key);
      if (same(current, base)) continue;
      const written = scope === undefined || !scope.snapshots.has(key) || scope.written.has(key);
      if (written || !same(current, scope.snapshots.get(key))) out.set(key, current);
    }
    return out;
  }

  #commit(scope: TurnScope | undefined): StateChange[] {
    // Encode first, so a value that cannot be encoded leaves the baseline untouched.
    const encoded = this.#changed(scope);
    for (const [key, data] of encoded) {
      if (data === undefined) this.#stored.delete(key);
      else this.#stored.set(key, data);
    }
    this.#loose.clear();
    return toChanges(encoded);
  }

  /**
   * End a read-only turn: undo any in-place change it made and return those
   * changes. Sent with the turn's result they make the daemon refuse it with
   * FAILED_PRECONDITION, naming the keys; here the view is back to the daemon's.
   */
  #refuse(scope: TurnScope): StateChange[] {
    let encoded: Map<string, Buffer | undefined>;
    try {
      encoded = new Map([...this.#changed(scope)].filter(([key]) => scope.snapshots.has(key)));
    } catch {
      // A value that no longer encodes was certainly changed; undo every key read.
      encoded = new Map([...scope.snapshots.keys()].map((key) => [key, this.#stored.get(key)]));
    }
    for (const key of encoded.keys()) this.#restore(key, scope.snapshots.get(key));
    return toChanges(encoded);
  }

  /**
   * Undo what a failed turn (without a turn: code outside turns) changed. A key
   * another running turn also touched goes back to what it was when this turn
   * first touched it, keeping that turn's unsent change; any other key goes
   * back to the daemon's value.
   */
  #rollback(scope: TurnScope | undefined): void {
    if (scope === undefined) {
      for (const key of this.#loose) this.#restore(key, this.#stored.get(key));
      this.#loose.clear();
      return;
    }
    if (scope.readonly) {
      this.#refuse(scope);
      return;
    }
    for (const [key, snapshot] of scope.snapshots) {
      const others = (this.#writers.get(key) ?? 0) - 1;
      this.#restore(key, others > 0 ? snapshot : this.#stored.get(key));
    }
  }

  /** The turn is over: later touches from work it started are not its own. */
  #end(scope: TurnScope): void {
    scope.live = false;
    if (scope.readonly) return;
    for (const key of scope.snapshots.keys()) {
      const left = (this.#writers.get(key) ?? 0) - 1;
      if (left > 0) this.#writers.set(key, left);
      else this.#writers.delete(key);
    }
  }

  #restore(key: string, data: Buffer | undefined): void {
    if (data === undefined) this.#values.delete(key);
    else this.#values.set(key, decodeState(data));
  }

  static {
    internals = {
      commit: (state, scope) => state.#commit(scope),
      refuse: (state, scope) => state.#refuse(scope),
      rollback: (state, scope) => {
        state.#rollback(scope);
      },
      end: (state, scope) => {
        state.#end(scope);
      },
    };
  }
}

function same(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined || b === undefined ? a === b : a.equals(b);
}

function impl(): Internals {
  if (internals === undefined) throw new Error("troupe: State internals are not initialised");
  return internals;
}

/**
 * @internal The changes of a writing turn (without a turn: of code outside
 * turns), which become the new baseline.
 */
export function commitState<S extends object>(state: State<S>, scope?: TurnScope): StateChange[] {
  return impl().commit(state as unknown as State, scope);
}

/** @internal End a read-only turn; see State#refuse. */
export function refuseState<S extends object>(state: State<S>, scope: TurnScope): StateChange[] {
  return impl().refuse(state as unknown as State, scope);
}

/** @internal Undo what a failed turn (without a turn: code outside turns) changed. */
export function rollbackState<S extends object>(state: State<S>, scope?: TurnScope): void {
  impl().rollback(state as unknown as State, scope);
}

/** @internal The turn is over. */
export function endTurn<S extends object>(state: State<S>, scope: TurnScope): void {
  impl().end(state as unknown as State, scope);
}
