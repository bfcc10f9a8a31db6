// The Map-like view of an actor's state and the bookkeeping that turns it into changes.
import { ReadOnlyStateError } from "./errors.js";
import type { StateChange } from "./gen/troupe/v1/common.js";
import { decodeState, encodeState } from "./payload.js";
import { type StateSetOptions, toChanges, ttlOf } from "./state_ttl.js";
import { type Author, COMMITTED, LOOSE, type Touch, Writes } from "./state_writes.js";
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
  expire(state: State, keys: readonly string[]): void;
}
let internals: Internals | undefined;

export { type StateSetOptions, ttlOf } from "./state_ttl.js";

/** The state key (and, after a slash, the prefix of the keys) the daemon keeps the expiry times in; a turn writing one is refused. */
const EXPIRES_KEY = "$expires";
// A key a turn has not touched.
const NO_TOUCH: Touch = [0, 0, undefined];

/** What a turn found instead of an undone write: the value, when it was written, and by whom. */
type Instead = readonly [data: Buffer | undefined, at: number, by: Author | undefined];

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
 * A key can expire: `set(key, value, { ttl: "1h" })`. An expired key is gone
 * everywhere: the SDK drops it from this view before the actor's next turn
 * (call, reminder, timer or alarm) runs, and the daemon from the store. See
 * {@link State.set} for the rules.
 */
export class State<S extends object = StateShape> implements Iterable<[Key<S>, S[Key<S>]]> {
  // What the daemon holds, as far as this app knows: the baseline of every turn.
  #stored: Map<string, Buffer>;
  #values = new Map<string, unknown>();
  // Per key, how many running writing turns touched it: their changes are not in
  // #stored yet, so a turn touching the key later snapshots the live value.
  #writers = new Map<string, number>();
  // Keys touched outside any running turn (when first: as #turns has it, and
  // the value then, encoded, to tell changes made in place); the next writing
  // turn sends them.
  #loose = new Map<string, [...touch: Touch, snapshot: Buffer | undefined]>();
  // Of those, the keys assigned or deleted there (not only read): such a change
  // sets the key again after an expiry, even to the value it had.
  #looseWritten = new Set<string>();
  // The expiries set outside any running turn; the next writing turn sends them.
  #looseTtls = new Map<string, bigint>();
  // The running turns that touched a key, and when each first touched each key
  // (#writes ticks: then, and the write it found, with its author: a failed
  // author's writes are all undone): an expiry or a rollback must reach their
  // snapshots, and what those that wrote a key send reaches the daemon after
  // the expiry.
  #turns = new Map<TurnScope, Map<string, Touch>>();
  // Who wrote which key lately, for a rollback to undo only its turn's writes.
  readonly #writes = new Writes();

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
   * write in a read-only method. Set outside a turn, it goes with the actor's
   * next writing turn, as other changes made there do. The key `"$expires"` is
   * the daemon's and cannot be set.
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
    // Read before anything changes: a bad ttl leaves the state as it was.
    const ttlMs = ttlOf(options);
    const scope = this.#touch(key, "set", value);
    this.#values.set(key, value);
    if (ttlMs !== undefined) (scope?.ttls ?? this.#looseTtls).set(key, ttlMs);
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
    (scope?.ttls ?? this.#looseTtls).set(key, 0n);
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
   * Record that the running turn reads (or, with `write`, changes to `value`)
   * `key`. Only touched keys are re-encoded at turn end, so a turn costs O(keys
   * touched), not O(state size). Call it before changing the value. Returns the
   * turn, undefined outside turns.
   */
  #touch(key: string, write?: Write, value?: unknown): TurnScope | undefined {
    const scope = this.#scope();
    if (scope === undefined) {
      if (!this.#loose.has(key)) {
        const snapshot = this.#snapshot(key);
        this.#loose.set(key, [...this.#writes.touch(key), snapshot]);
      }
      if (write !== undefined) {
        this.#looseWritten.add(key);
        this.#writes.wrote(key, LOOSE, value);
      }
      return undefined;
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
      const touches = this.#turns.get(scope) ?? new Map<string, Touch>();
      this.#turns.set(scope, touches.set(key, this.#writes.touch(key)));
      if (!scope.readonly) this.#writers.set(key, (this.#writers.get(key) ?? 0) + 1);
    }
    if (write !== undefined) {
      scope.written.add(key);
      this.#writes.wrote(key, scope, value);
    }
    return scope;
  }

  #snapshot(key: string): Buffer | undefined {
    // Nobody has an unsent change of this key: the value is the stored one.
    if ((this.#writers.get(key) ?? 0) === 0 && !this.#loose.has(key)) return this.#stored.get(key);
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
   * key present with an expiry in `ttls` counts even unchanged: the set renews
   * (or ends) its expiry.
   *
   * A writing turn also sends what code outside turns changed. Each sends only
   * its own writes: a key another running author wrote later goes as the
   * senders last wrote it (the later write is its author's to send, and to
   * undo), recorded in `heldBack` with the time of the write sent, undefined if
   * none is (a commit since replaced theirs). A key only read counts when
   * changed in place since first touched, not by another author's write: a
   * nested turn does not send the outer turn's unsent changes, and a read-only
   * turn is not refused for another's write (`heldBack` undefined otherwise).
   * A change made in place outside turns under another running author's later
   * write goes in `kept`: it is sent once that author is done, or undone with it.
   * Throws TypeError if a value cannot be encoded.
   */
  #changed(
    scope: TurnScope | undefined,
    ttls: ReadonlyMap<string, bigint>,
    heldBack?: Map<string, number | undefined>,
    kept?: Set<string>,
  ): Map<string, Buffer | undefined> {
    const authors = authorsOf(scope);
    const loose = authors.includes(LOOSE);
    const keys = new Set(loose ? this.#loose.keys() : []);
    if (scope !== undefined) for (const key of scope.snapshots.keys()) keys.add(key);
    const out = new Map<string, Buffer | undefined>();
    for (const key of [...keys].sort()) {
      const base = this.#stored.get(key);
      const assigned = scope?.written.has(key) === true || (loose && this.#looseWritten.has(key));
      const held = assigned ? this.#writes.heldBack(key, authors) : undefined;
      let current: Buffer | undefined;
      if (held !== undefined) {
        heldBack?.set(key, held[0]);
        if (held[0] === undefined) continue;
        current = held[1] === undefined ? undefined : encodeState(key, held[1]);
      } else current = this.#values.has(key) ? encodeState(key, this.#values.get(key)) : undefined;
      if (current !== undefined && ttls.has(key)) {
        out.set(key, current);
        continue;
      }
      if (assigned) {
        if (!same(current, base)) out.set(key, current);
        continue;
      }
      // Only read: sent if changed in place since first touched, unless another
      // author's write is what changed it. Else the view's value is not theirs.
      const touched = loose ? this.#loose.get(key) : undefined;
      const inTurn = scope?.snapshots.has(key) === true;
      const changed =
        !same(current, base) &&
        ((inTurn && !same(current, scope.snapshots.get(key))) || (touched !== undefined && !same(current, touched[3])));
      if (changed || touched !== undefined) {
        const firsts = touched === undefined ? [] : [touched[0]];
        if (inTurn) firsts.push(this.#turns.get(scope)?.get(key)?.[0] ?? 0);
        if (!this.#writes.overwritten(key, authors, Math.min(...firsts))) {
          if (changed) {
            out.set(key, current);
            continue;
          }
        } else if (touched !== undefined) {
          // What was changed outside turns, if anything, lies under another
          // author's write: it is known once that one is sent or undone.
          kept?.add(key);
        }
      }
      if (touched !== undefined) heldBack?.set(key, undefined);
    }
    return out;
  }

  #commit(scope: TurnScope | undefined): StateChange[] {
    // The turn's own expiries win over those set outside turns, which go with it.
    const ttls = new Map([...this.#looseTtls, ...(scope?.ttls ?? [])]);
    // Encode first, so a value that cannot be encoded leaves the baseline untouched.
    const heldBack = new Map<string, number | undefined>();
    const kept = new Set<string>();
    const encoded = this.#changed(scope, ttls, heldBack, kept);
    // The daemon now holds the view's value of these keys, whoever wrote it (or
    // the write held back): a failed turn must not undo that, only its own
    // writes that come after.
    for (const key of new Set([...encoded.keys(), ...this.#loose.keys(), ...(scope?.written ?? [])])) {
      const own = scope?.snapshots.has(key) === true ? 1 : 0;
      const watched = (this.#writers.get(key) ?? 0) > own;
      if (!heldBack.has(key)) this.#writes.committed(key, watched);
      else {
        const at = heldBack.get(key);
        if (at !== undefined) this.#writes.committed(key, watched, at);
      }
    }
    for (const [key, data] of encoded) {
      if (data === undefined) this.#stored.delete(key);
      else this.#stored.set(key, data);
    }
    for (const key of this.#loose.keys()) if (!kept.has(key)) this.#loose.delete(key);
    this.#looseWritten.clear();
    this.#looseTtls.clear();
    scope?.ttls.clear();
    return toChanges(encoded, ttls);
  }

  /**
   * End a read-only turn: undo any in-place change it made and return those
   * changes. Sent with the turn's result they make the daemon refuse it with
   * FAILED_PRECONDITION, naming the keys; here the view is back to the daemon's.
   */
  #refuse(scope: TurnScope): StateChange[] {
    let encoded: Map<string, Buffer | undefined>;
    try {
      // No expiries: a read-only turn cannot set any, and those set outside
      // turns wait for a writing one.
      encoded = new Map([...this.#changed(scope, new Map())].filter(([key]) => scope.snapshots.has(key)));
    } catch {
      // A value that no longer encodes was certainly changed; undo every key read.
      encoded = new Map([...scope.snapshots.keys()].map((key) => [key, this.#stored.get(key)]));
    }
    for (const key of encoded.keys()) this.#restore(key, scope.snapshots.get(key));
    return toChanges(encoded, new Map());
  }

  /** Undo what a failed turn (without a turn: code outside turns) changed: see #undo. */
  #rollback(scope: TurnScope | undefined): void {
    if (scope === undefined) {
      for (const [key, [first]] of this.#loose) this.#undo(key, LOOSE, [first, 0, undefined], this.#stored.get(key));
      this.#loose.clear();
      this.#looseWritten.clear();
      this.#looseTtls.clear();
      return;
    }
    if (scope.readonly) {
      this.#refuse(scope);
      return;
    }
    scope.ttls.clear();
    const touches = this.#turns.get(scope);
    for (const [key, snapshot] of scope.snapshots) this.#undo(key, scope, touches?.get(key) ?? NO_TOUCH, snapshot);
  }

  /**
   * Undo what `author` did to `key`, which it first touched at `touch`: back
   * to what it found (`snapshot`), unless another author wrote the key since
   * (Writes#undo). Turns that touched the key after the change saw the result.
   */
  #undo(key: string, author: Author, touch: Touch, snapshot: Buffer | undefined): void {
    const back = this.#writes.undo(key, author, touch[0], touch[1]);
    if (back === undefined) {
      this.#foundInstead(key, author, touch, snapshot);
      return;
    }
    const [since, who, value] = back;
    let data = this.#stored.get(key);
    const others = (this.#writers.get(key) ?? 0) > 1 || this.#loose.has(key);
    if (who === undefined && others) data = snapshot; // what it found holds others' unsent changes
    if (who === undefined || who === COMMITTED) this.#restore(key, data);
    else {
      if (value === undefined) this.#values.delete(key);
      else this.#values.set(key, value);
      try {
        data = value === undefined ? undefined : encodeState(key, value);
      } catch {
        return; // its author cannot send it either: that turn fails too
      }
    }
    this.#foundInstead(key, author, touch, snapshot, since, data);
  }

  /**
   * `author`'s writes of `key` are undone: turns (and code outside turns) that
   * found one of them now found what they would have without it, and those
   * that first touched the key after `since` (the view went back to `data`
   * then) find `data`. `touch` and `snapshot` are `author`'s.
   */
  #foundInstead(key: string, author: Author, touch: Touch, snapshot: Buffer | undefined, since?: number, data?: Buffer): void {
    const latest = this.#writes.latest(key);
    const foundInstead = (first: number, by: Author | undefined): Instead | undefined => {
      if (by === author) return this.#foundBefore(key, first, touch, snapshot);
      if (since !== undefined && first > since) return [data, ...latest];
      return undefined;
    };
    for (const [turn, touches] of this.#turns) {
      const [first, , by] = touches.get(key) ?? NO_TOUCH;
      if (turn === author || first === 0) continue;
      const instead = foundInstead(first, by);
      if (instead === undefined) continue;
      turn.snapshots.set(key, instead[0]);
      touches.set(key, [first, instead[1], instead[2]]);
    }
    const loose = this.#loose.get(key);
    if (author === LOOSE || loose === undefined) return;
    const instead = foundInstead(loose[0], loose[2]);
    if (instead !== undefined) this.#loose.set(key, [loose[0], instead[1], instead[2], instead[0]]);
  }

  /**
   * What a turn first touching `key` at `first` finds now that the writes of
   * the author that touched it at `touch` finding `snapshot` are undone: the
   * latest write kept from before it, or else what that author found.
   */
  #foundBefore(key: string, first: number, touch: Touch, snapshot: Buffer | undefined): Instead | undefined {
    const below = this.#writes.beneath(key, first);
    if (below === undefined || below[1] < touch[0]) {
      const others = (this.#writers.get(key) ?? 0) > 1 || this.#loose.has(key);
      return [others ? snapshot : this.#stored.get(key), touch[1], touch[2]];
    }
    const [who, at, value] = below;
    if (who === COMMITTED) return [this.#stored.get(key), at, who];
    try {
      return [value === undefined ? undefined : encodeState(key, value), at, who];
    } catch {
      return undefined; // its author cannot send it either: that turn fails too
    }
  }

  /** The turn is over: later touches from work it started are not its own. */
  #end(scope: TurnScope): void {
    scope.live = false;
    this.#turns.delete(scope);
    if (scope.readonly) return;
    for (const key of scope.snapshots.keys()) {
      const left = (this.#writers.get(key) ?? 0) - 1;
      if (left > 0) this.#writers.set(key, left);
      else this.#writers.delete(key);
      this.#writes.ended(key, scope, left > 0);
    }
  }

  /**
   * The daemon says these keys expired (Turn.expired_keys) and deleted them: they
   * leave the baseline, and the view unless a change of them is still unsent (a
   * running turn, or code outside turns, set them), which the daemon applies
   * after the expiry. Nothing is sent for them.
   */
  #expire(keys: readonly string[]): void {
    for (const key of keys) {
      const stored = this.#stored.get(key);
      // Not in the daemon's state as far as this app knows: anything here is unsent.
      if (stored === undefined) continue;
      this.#stored.delete(key);
      if (this.#values.has(key) && !this.#unsent(key, stored)) this.#values.delete(key);
      // A running turn that first saw the expired value now saw the key absent:
      // undoing the turn must not bring the value back, for a later commit to
      // send as a key without expiry. A snapshot holding another turn's unsent
      // change stays; that change comes after the expiry.
      for (const scope of this.#turns.keys()) {
        if (same(scope.snapshots.get(key), stored)) scope.snapshots.set(key, undefined);
      }
    }
  }

  /** Whether the value of `key` is a change the daemon, which held `stored`, has not been sent. */
  #unsent(key: string, stored: Buffer): boolean {
    // An assignment, even of the value the key had, sets the key again after
    // the expiry; not one that a commit since replaced, whose value the daemon
    // held and let expire.
    if (this.#writes.unsent(key)) return true;
    try {
      return !encodeState(key, this.#values.get(key)).equals(stored);
    } catch {
      return true;
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
      expire: (state, keys) => {
        state.#expire(keys);
      },
    };
  }
}

/**
 * Whose writes the end of `scope` (undefined: code outside turns) sends: its
 * own, and those made outside turns, which go with a writing turn.
 */
function authorsOf(scope: TurnScope | undefined): readonly Author[] {
  if (scope === undefined) return [LOOSE];
  return scope.readonly ? [scope] : [scope, LOOSE];
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

/** @internal Drop the keys the daemon says expired (Turn.expired_keys); see State#expire. */
export function expireState<S extends object>(state: State<S>, keys: readonly string[]): void {
  impl().expire(state as unknown as State, keys);
}
