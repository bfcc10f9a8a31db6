// What a failed turn undoes in an actor's state view, and what the turns that
// saw its writes find instead.
//
// The daemon discards only a failed turn's own changes, so the view must too:
// each key goes back to the write beneath the failed author's, unless another
// author wrote it since (Writes#undo); turns and code outside turns that found
// one of the failed author's writes now find what they would have without it.
// Kept in step with the Python SDK's _state_rollback.py.
import { encodeState } from "./payload.js";
import { NO_TOUCH, type StateLedger } from "./state_ledger.js";
import { type Author, COMMITTED, LOOSE, type Touch } from "./state_writes.js";
import type { TurnScope } from "./turn.js";

/** What a turn found instead of an undone write: the value, when it was written, and by whom. */
type Instead = readonly [data: Buffer | undefined, at: number, by: Author | undefined];

/** Undo what a failed turn (without a turn: code outside turns) changed: see undo. */
export function rollback(ledger: StateLedger, scope: TurnScope | undefined): void {
  if (scope === undefined) {
    for (const [key, [first]] of ledger.loose) undo(ledger, key, LOOSE, [first, 0, undefined], ledger.stored.get(key));
    ledger.loose.clear();
    ledger.looseWritten.clear();
    ledger.looseTtls.clear();
    return;
  }
  if (scope.readonly) {
    ledger.refuse(scope);
    return;
  }
  scope.ttls.clear();
  const touches = ledger.turns.get(scope);
  for (const [key, snapshot] of scope.snapshots) undo(ledger, key, scope, touches?.get(key) ?? NO_TOUCH, snapshot);
}

/**
 * Undo what `author` did to `key`, which it first touched at `touch`: back
 * to what it found (`snapshot`), unless another author wrote the key since
 * (Writes#undo). Turns that touched the key after the change saw the result.
 */
function undo(ledger: StateLedger, key: string, author: Author, touch: Touch, snapshot: Buffer | undefined): void {
  const back = ledger.writes.undo(key, author, touch[0], touch[1]);
  if (back === undefined) {
    foundInstead(ledger, key, author, touch, snapshot);
    return;
  }
  const [since, who, value] = back;
  let data = ledger.stored.get(key);
  if (who === undefined && ledger.othersUnsent(key)) data = snapshot; // what it found holds others' unsent changes
  if (who === undefined || who === COMMITTED) ledger.restore(key, data);
  else {
    if (value === undefined) ledger.values.delete(key);
    else ledger.values.set(key, value);
    try {
      data = value === undefined ? undefined : encodeState(key, value);
    } catch {
      return; // its author cannot send it either: that turn fails too
    }
  }
  foundInstead(ledger, key, author, touch, snapshot, since, data);
}

/**
 * `author`'s writes of `key` are undone: turns (and code outside turns) that
 * found one of them now found what they would have without it, and those
 * that first touched the key after `since` (the view went back to `data`
 * then) find `data`. `touch` and `snapshot` are `author`'s.
 */
function foundInstead(
  ledger: StateLedger,
  key: string,
  author: Author,
  touch: Touch,
  snapshot: Buffer | undefined,
  since?: number,
  data?: Buffer,
): void {
  const latest = ledger.writes.latest(key);
  const insteadOf = (first: number, by: Author | undefined): Instead | undefined => {
    if (by === author) return foundBefore(ledger, key, first, touch, snapshot);
    if (since !== undefined && first > since) return [data, ...latest];
    return undefined;
  };
  for (const [turn, touches] of ledger.turns) {
    const [first, , by] = touches.get(key) ?? NO_TOUCH;
    if (turn === author || first === 0) continue;
    const instead = insteadOf(first, by);
    if (instead === undefined) continue;
    turn.snapshots.set(key, instead[0]);
    touches.set(key, [first, instead[1], instead[2]]);
  }
  const loose = ledger.loose.get(key);
  if (author === LOOSE || loose === undefined) return;
  const instead = insteadOf(loose[0], loose[2]);
  if (instead !== undefined) ledger.loose.set(key, [loose[0], instead[1], instead[2], instead[0]]);
}

/**
 * What a turn first touching `key` at `first` finds now that the writes of
 * the author that touched it at `touch` finding `snapshot` are undone: the
 * latest write kept from before it, or else what that author found.
 */
function foundBefore(ledger: StateLedger, key: string, first: number, touch: Touch, snapshot: Buffer | undefined): Instead | undefined {
  const below = ledger.writes.beneath(key, first);
  if (below === undefined || below[1] < touch[0]) {
    return [ledger.othersUnsent(key) ? snapshot : ledger.stored.get(key), touch[1], touch[2]];
  }
  const [who, at, value] = below;
  if (who === COMMITTED) return [ledger.stored.get(key), at, who];
  try {
    return [value === undefined ? undefined : encodeState(key, value), at, who];
  } catch {
    return undefined; // its author cannot send it either: that turn fails too
  }
}
