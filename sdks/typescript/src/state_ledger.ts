// The bookkeeping behind an actor's state view: what the daemon holds, which
// running turns (and code outside turns) touched and wrote which key, and what
// each turn's end sends. What a failed turn undoes is in state_rollback.ts; the
// Map-like view users see is state.ts's State. Kept in step with the Python
// SDK's _state_ledger.py.
import type { StateChange } from "./gen/troupe/v1/common.js";
import { decodeState, encodeState } from "./payload.js";
import { toChanges } from "./state_ttl.js";
import { type Author, LOOSE, type Touch, Writes } from "./state_writes.js";
import type { TurnScope } from "./turn.js";

/** A key no running turn touched. */
export const NO_TOUCH: Touch = [0, 0, undefined];

/**
 * One actor's state as this app holds it (`values`, the view's map) and the
 * record that tells, at the end of each turn, which changes are that turn's
 * own. Internal to the SDK: State holds it in a private field.
 */
export class StateLedger {
  // What the daemon holds, as far as this app knows: the baseline of every turn.
  readonly stored = new Map<string, Buffer>();
  readonly values = new Map<string, unknown>();
  // Per key, how many running writing turns touched it: their changes are not in
  // stored yet, so a turn touching the key later snapshots the live value.
  readonly writers = new Map<string, number>();
  // Keys touched outside any running turn (when first: as turns has it, and
  // the value then, encoded, to tell changes made in place); the next writing
  // turn sends them.
  readonly loose = new Map<string, [...touch: Touch, snapshot: Buffer | undefined]>();
  // Of those, the keys assigned or deleted there (not only read): such a change
  // sets the key again after an expiry, even to the value it had.
  readonly looseWritten = new Set<string>();
  // The expiries set outside any running turn; the next writing turn sends them.
  readonly looseTtls = new Map<string, bigint>();
  // The running turns that touched a key, and when each first touched each key
  // (writes ticks: then, and the write it found, with its author: a failed
  // author's writes are all undone): an expiry or a rollback must reach their
  // snapshots, and what those that wrote a key send reaches the daemon after
  // the expiry.
  readonly turns = new Map<TurnScope, Map<string, Touch>>();
  // Who wrote which key lately, for a rollback to undo only its turn's writes.
  readonly writes = new Writes();

  constructor(stored: Readonly<Record<string, Uint8Array>>) {
    for (const [key, data] of Object.entries(stored)) {
      const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      this.stored.set(key, bytes);
      try {
        this.values.set(key, decodeState(bytes));
      } catch (e) {
        throw new TypeError(
          `stored value of state key ${JSON.stringify(key)} is not JSON (${e instanceof Error ? e.message : String(e)});` +
            " it was not written by a troupe SDK, or the data dir holds another app's data",
        );
      }
    }
  }

  /**
   * Record that `scope` (undefined: code outside turns) reads `key` (or, with
   * `write`, sets it to `value`; undefined: deletes it). Only touched keys are
   * re-encoded at turn end, so a turn costs O(keys touched), not O(state size).
   * Call it before changing the value; a read-only turn's writes are refused
   * before this.
   */
  touch(key: string, scope: TurnScope | undefined, write: boolean, value?: unknown): void {
    if (scope === undefined) {
      if (!this.loose.has(key)) {
        const snapshot = this.snapshot(key);
        this.loose.set(key, [...this.writes.touch(key), snapshot]);
      }
      if (write) {
        this.looseWritten.add(key);
        this.writes.wrote(key, LOOSE, value);
      }
      return;
    }
    if (!scope.snapshots.has(key)) {
      scope.snapshots.set(key, this.snapshot(key));
      const touches = this.turns.get(scope) ?? new Map<string, Touch>();
      this.turns.set(scope, touches.set(key, this.writes.touch(key)));
      if (!scope.readonly) this.writers.set(key, (this.writers.get(key) ?? 0) + 1);
    }
    if (write) {
      scope.written.add(key);
      this.writes.wrote(key, scope, value);
    }
  }

  /**
   * Whether an author besides the one at hand may hold an unsent change of
   * `key`: the value it found is then its snapshot, not the stored one.
   */
  othersUnsent(key: string): boolean {
    return (this.writers.get(key) ?? 0) > 1 || this.loose.has(key);
  }

  /** The value of `key` now, encoded (undefined: absent), as a turn first touching it finds it. */
  snapshot(key: string): Buffer | undefined {
    // Nobody has an unsent change of this key: the value is the stored one.
    if ((this.writers.get(key) ?? 0) === 0 && !this.loose.has(key)) return this.stored.get(key);
    if (!this.values.has(key)) return undefined;
    try {
      return encodeState(key, this.values.get(key));
    } catch {
      return this.stored.get(key);
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
  changed(
    scope: TurnScope | undefined,
    ttls: ReadonlyMap<string, bigint>,
    heldBack?: Map<string, number | undefined>,
    kept?: Set<string>,
  ): Map<string, Buffer | undefined> {
    const authors = authorsOf(scope);
    const loose = authors.includes(LOOSE);
    const keys = new Set(loose ? this.loose.keys() : []);
    if (scope !== undefined) for (const key of scope.snapshots.keys()) keys.add(key);
    const out = new Map<string, Buffer | undefined>();
    for (const key of [...keys].sort()) {
      const base = this.stored.get(key);
      const assigned = scope?.written.has(key) === true || (loose && this.looseWritten.has(key));
      const held = assigned ? this.writes.heldBack(key, authors) : undefined;
      let current: Buffer | undefined;
      if (held !== undefined) {
        heldBack?.set(key, held[0]);
        if (held[0] === undefined) continue;
        current = held[1] === undefined ? undefined : encodeState(key, held[1]);
      } else current = this.values.has(key) ? encodeState(key, this.values.get(key)) : undefined;
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
      const touched = loose ? this.loose.get(key) : undefined;
      const inTurn = scope?.snapshots.has(key) === true;
      const changed =
        !same(current, base) &&
        ((inTurn && !same(current, scope.snapshots.get(key))) || (touched !== undefined && !same(current, touched[3])));
      if (changed || touched !== undefined) {
        const firsts = touched === undefined ? [] : [touched[0]];
        if (inTurn) firsts.push(this.turns.get(scope)?.get(key)?.[0] ?? 0);
        if (!this.writes.overwritten(key, authors, Math.min(...firsts))) {
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

  commit(scope: TurnScope | undefined): StateChange[] {
    // The turn's own expiries win over those set outside turns, which go with it.
    const ttls = new Map([...this.looseTtls, ...(scope?.ttls ?? [])]);
    // Encode first, so a value that cannot be encoded leaves the baseline untouched.
    const heldBack = new Map<string, number | undefined>();
    const kept = new Set<string>();
    const encoded = this.changed(scope, ttls, heldBack, kept);
    // The daemon now holds the view's value of these keys, whoever wrote it (or
    // the write held back): a failed turn must not undo that, only its own
    // writes that come after.
    for (const key of new Set([...encoded.keys(), ...this.loose.keys(), ...(scope?.written ?? [])])) {
      const own = scope?.snapshots.has(key) === true ? 1 : 0;
      const watched = (this.writers.get(key) ?? 0) > own;
      if (!heldBack.has(key)) this.writes.committed(key, watched);
      else {
        const at = heldBack.get(key);
        if (at !== undefined) this.writes.committed(key, watched, at);
      }
    }
    for (const [key, data] of encoded) {
      if (data === undefined) this.stored.delete(key);
      else this.stored.set(key, data);
    }
    for (const key of this.loose.keys()) if (!kept.has(key)) this.loose.delete(key);
    this.looseWritten.clear();
    this.looseTtls.clear();
    scope?.ttls.clear();
    return toChanges(encoded, ttls);
  }

  /**
   * End a read-only turn: undo any in-place change it made and return those
   * changes. Sent with the turn's result they make the daemon refuse it with
   * FAILED_PRECONDITION, naming the keys; here the view is back to the daemon's.
   */
  refuse(scope: TurnScope): StateChange[] {
    let encoded: Map<string, Buffer | undefined>;
    try {
      // No expiries: a read-only turn cannot set any, and those set outside
      // turns wait for a writing one.
      encoded = new Map([...this.changed(scope, new Map())].filter(([key]) => scope.snapshots.has(key)));
    } catch {
      // A value that no longer encodes was certainly changed; undo every key read.
      encoded = new Map([...scope.snapshots.keys()].map((key) => [key, this.stored.get(key)]));
    }
    for (const key of encoded.keys()) this.restore(key, scope.snapshots.get(key));
    return toChanges(encoded, new Map());
  }

  /** The turn is over: later touches from work it started are not its own. */
  end(scope: TurnScope): void {
    scope.live = false;
    this.turns.delete(scope);
    if (scope.readonly) return;
    for (const key of scope.snapshots.keys()) {
      const left = (this.writers.get(key) ?? 0) - 1;
      if (left > 0) this.writers.set(key, left);
      else this.writers.delete(key);
      this.writes.ended(key, scope, left > 0);
    }
  }

  /**
   * The daemon says these keys expired (Turn.expired_keys) and deleted them: they
   * leave the baseline, and the view unless a change of them is still unsent (a
   * running turn, or code outside turns, set them), which the daemon applies
   * after the expiry. Nothing is sent for them.
   */
  expire(keys: readonly string[]): void {
    for (const key of keys) {
      const stored = this.stored.get(key);
      // Not in the daemon's state as far as this app knows: anything here is unsent.
      if (stored === undefined) continue;
      this.stored.delete(key);
      if (this.values.has(key) && !this.unsent(key, stored)) this.values.delete(key);
      // A running turn that first saw the expired value now saw the key absent:
      // undoing the turn must not bring the value back, for a later commit to
      // send as a key without expiry. A snapshot holding another turn's unsent
      // change stays; that change comes after the expiry.
      for (const scope of this.turns.keys()) {
        if (same(scope.snapshots.get(key), stored)) scope.snapshots.set(key, undefined);
      }
    }
  }

  /** Whether the value of `key` is a change the daemon, which held `stored`, has not been sent. */
  unsent(key: string, stored: Buffer): boolean {
    // An assignment, even of the value the key had, sets the key again after
    // the expiry; not one that a commit since replaced, whose value the daemon
    // held and let expire.
    if (this.writes.unsent(key)) return true;
    try {
      return !encodeState(key, this.values.get(key)).equals(stored);
    } catch {
      return true;
    }
  }

  restore(key: string, data: Buffer | undefined): void {
    if (data === undefined) this.values.delete(key);
    else this.values.set(key, decodeState(data));
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
