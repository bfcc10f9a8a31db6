// The Map-like view of an actor's state and the bookkeeping that turns it into changes.
import type { StateChange } from "./gen/troupe/v1/common.js";
import { decodeState, encodeState } from "./payload.js";

/** The shape of an actor's state: string keys, JSON-serialisable values. */
export type StateShape = Record<string, unknown>;

type Key<S> = keyof S & string;

let commitImpl: (state: State) => StateChange[];
let rollbackImpl: (state: State) => void;

/**
 * An actor's state: string keys, JSON-serialisable values, typed by `S`.
 *
 * Changes made during a turn, including in-place changes to values read during
 * the turn (`this.state.get("items")?.push(x)`), are sent to the daemon when the
 * turn ends and applied atomically. If the turn throws, they are discarded and
 * the view returns to what it was before the turn.
 */
export class State<S extends object = StateShape> implements Iterable<[Key<S>, S[Key<S>]]> {
  #stored: Map<string, Buffer>;
  #values = new Map<string, unknown>();
  // Keys read or written since the last commit; only these are re-encoded at
  // turn end, so a turn costs O(keys touched), not O(state size).
  #touched = new Set<string>();

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
    this.#touched.add(key);
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
    this.#values.set(key, value);
    this.#touched.add(key);
    return this;
  }

  /** The value of `key`, first setting it to `value` if absent (Python's `setdefault`). */
  setDefault<K extends Key<S>>(key: K, value: S[K]): S[K] {
    if (!this.#values.has(key)) this.set(key, value);
    return this.get(key, value);
  }

  /** Remove `key`; returns whether it was there. */
  delete(key: Key<S>): boolean {
    const had = this.#values.delete(key);
    if (had) this.#touched.add(key);
    return had;
  }

  /** Remove every key. */
  clear(): void {
    for (const key of this.#values.keys()) this.#touched.add(key);
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
      this.#touched.add(key);
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

  #commit(): StateChange[] {
    // Encode first, so a value that cannot be encoded leaves the baseline untouched.
    const encoded: [string, Buffer | undefined][] = [];
    for (const key of [...this.#touched].sort()) {
      if (this.#values.has(key)) {
        const data = encodeState(key, this.#values.get(key));
        const before = this.#stored.get(key);
        if (before === undefined || !before.equals(data)) encoded.push([key, data]);
      } else if (this.#stored.has(key)) {
        encoded.push([key, undefined]);
      }
    }
    const changes: StateChange[] = [];
    for (const [key, data] of encoded) {
      if (data === undefined) {
        this.#stored.delete(key);
        changes.push({ key, op: { $case: "delete", value: true } });
      } else {
        this.#stored.set(key, data);
        changes.push({ key, op: { $case: "set", value: data } });
      }
    }
    this.#touched.clear();
    return changes;
  }

  #rollback(): void {
    for (const key of this.#touched) {
      const data = this.#stored.get(key);
      if (data === undefined) this.#values.delete(key);
      else this.#values.set(key, decodeState(data));
    }
    this.#touched.clear();
  }

  static {
    commitImpl = (state) => state.#commit();
    rollbackImpl = (state) => {
      state.#rollback();
    };
  }
}

/** @internal The changes since the last commit, which become the new baseline. */
export function commitState<S extends object>(state: State<S>): StateChange[] {
  return commitImpl(state as unknown as State);
}

/** @internal Forget every change since the last commit. */
export function rollbackState<S extends object>(state: State<S>): void {
  rollbackImpl(state as unknown as State);
}
