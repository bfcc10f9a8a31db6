// Who wrote each state key lately: what a failed turn's rollback must keep.
//
// Turns of one actor can run at once (a reentrant actor called back by a chain
// it waits on), and code outside turns (work that outlived its turn) can write
// too. The daemon discards only a failed turn's own changes, so the view must
// too: a key another author wrote after the failed turn first touched it keeps
// that write, which the daemon holds or will get from its author. Kept in step
// with the Python SDK's _state_writes.py.

/** An author besides the turns (a TurnScope each): code outside any running turn. */
export const LOOSE: unique symbol = Symbol("loose");
/** An author besides the turns: a commit (the daemon then held the view's value, whoever wrote it). */
export const COMMITTED: unique symbol = Symbol("committed");

/** A running turn (its TurnScope), LOOSE or COMMITTED. */
export type Author = object | typeof LOOSE | typeof COMMITTED;

/** A write: when (a tick), and the value written (undefined: deleted). */
type Write = readonly [at: number, value: unknown];

/** What a key goes back to (see Writes#undo): since when, whose write (undefined: what the author found), its value. */
export type Back = readonly [since: number, who: Author | undefined, value: unknown];

/** A write found: when, and by whom (undefined: none is kept). */
export type Found = readonly [at: number, by: Author | undefined];

/** When a key was first touched, and the write found then. */
export type Touch = readonly [first: number, at: number, by: Author | undefined];

/** What a commit sends instead of the view's value (see Writes#heldBack). */
export type Held = readonly [at: number | undefined, value: unknown];

/** The last entry of `map`, the latest write. */
function latest(map: ReadonlyMap<Author, Write>): [Author, Write] | undefined {
  let last: [Author, Write] | undefined;
  for (const entry of map) last = entry;
  return last;
}

/**
 * Per key, the latest write of each author, oldest first, timed on a clock
 * that also times when turns first touch keys (`tick`).
 */
export class Writes {
  #clock = 0;
  readonly #keys = new Map<string, Map<Author, Write>>();

  tick(): number {
    this.#clock += 1;
    return this.#clock;
  }

  wrote(key: string, author: Author, value: unknown): void {
    let writes = this.#keys.get(key);
    if (writes === undefined) this.#keys.set(key, (writes = new Map<Author, Write>()));
    writes.delete(author); // its latest write goes last
    writes.set(author, [this.tick(), value]);
  }

  /**
   * The daemon now holds the view's value of `key`: no rollback goes behind it.
   * `watched`: a running writing turn touched the key (only their rollbacks look).
   * `heldBack`: it holds the write of that time instead (see `heldBack`); the
   * later writes, not sent, stay.
   */
  committed(key: string, watched: boolean, heldBack?: number): void {
    if (heldBack !== undefined) {
      const kept = new Map<Author, Write>([[COMMITTED, [heldBack, undefined]]]);
      for (const [who, write] of this.#keys.get(key) ?? []) if (write[0] > heldBack) kept.set(who, write);
      this.#keys.set(key, kept);
    } else if (watched) this.#keys.set(key, new Map<Author, Write>([[COMMITTED, [this.tick(), undefined]]]));
    else this.#keys.delete(key);
  }

  /**
   * `turn`, which touched `key`, is over; `watched` as for `committed`. Writes
   * made outside turns stay until a commit sends them.
   */
  ended(key: string, turn: Author, watched: boolean): void {
    const writes = this.#keys.get(key);
    if (writes === undefined) return;
    writes.delete(turn);
    if (writes.size === 0 || (!watched && !writes.has(LOOSE))) this.#keys.delete(key);
  }

  /** Whether a running author's write of `key` is kept that no commit has sent or replaced since. */
  unsent(key: string): boolean {
    for (const who of this.#keys.get(key)?.keys() ?? []) if (who !== COMMITTED) return true;
    return false;
  }

  /**
   * The latest write of `key` kept: when, and by whom ([0, undefined]: none is
   * kept). What a turn touching the key now finds, for `undo` to tell whether
   * that write was undone since.
   */
  latest(key: string): Found {
    const writes = this.#keys.get(key);
    const last = writes === undefined ? undefined : latest(writes);
    return last === undefined ? [0, undefined] : [last[1][0], last[0]];
  }

  /**
   * Whether an author other than `authors` (a running turn, or code outside
   * turns) wrote `key` after `since`. A value that changed so is that author's
   * change: only it sends the write, and only its rollback undoes it.
   */
  overwritten(key: string, authors: readonly Author[], since: number): boolean {
    const writes = this.#keys.get(key);
    if (writes === undefined) return false;
    for (const [who, [at]] of writes) {
      if (at > since && who !== COMMITTED && !authors.includes(who)) return true;
    }
    return false;
  }

  /**
   * What a commit by `authors` sends of `key` when another running turn (or
   * code outside turns) wrote it after them: their latest write, as [when,
   * value], or [undefined] when a commit since replaced their writes.
   * Undefined: the view's value is theirs to send.
   */
  heldBack(key: string, authors: readonly Author[]): Held | undefined {
    const writes = this.#keys.get(key);
    // One author alone: nobody wrote after it.
    if (writes === undefined || writes.size < 2) return undefined;
    let mine: [Author, Write] | undefined;
    for (const [who, write] of writes) {
      // Oldest first: the last of theirs, else the commit that replaced them.
      if (authors.includes(who) || (mine === undefined && who === COMMITTED)) mine = [who, write];
    }
    if (mine === undefined || !this.overwritten(key, authors, mine[1][0])) return undefined;
    return mine[0] === COMMITTED ? [undefined, undefined] : mine[1];
  }

  /** The latest write of `key` kept from before time `at`: [who, when, value]. */
  beneath(key: string, at: number): [Author, number, unknown] | undefined {
    let below: [Author, number, unknown] | undefined;
    for (const [who, [when, value]] of this.#keys.get(key) ?? []) if (when < at) below = [who, when, value];
    return below;
  }

  /** A turn first touches `key`: now, and the write it finds (see `undo`). */
  touch(key: string): Touch {
    return [this.tick(), ...this.latest(key)];
  }

  /**
   * Forget `author`'s write of `key`, which it first touched at `first`
   * finding the write of time `found`, and say what the key goes back to.
   *
   * Undefined: it keeps its value, another author's write made since (`author`
   * did not write the key again after it). Else `[since, who, value]`: back to
   * the write of `value` by `who` (for COMMITTED, the stored value), the latest
   * before `author`'s own, or, with `who` undefined, to what `author` found;
   * turns that first touched the key after `since` saw `author`'s change.
   */
  undo(key: string, author: Author, first: number, found: number): Back | undefined {
    const writes = this.#keys.get(key);
    const mine = writes?.get(author);
    writes?.delete(author);
    const last = writes === undefined ? undefined : latest(writes);
    if (last === undefined) {
      this.#keys.delete(key);
      // What it found was written by a turn that failed since: back to the stored value.
      return [first, found === 0 ? undefined : COMMITTED, undefined];
    }
    const [who, [at, value]] = last;
    if (at > first) {
      if (mine !== undefined && mine[0] > at) return [mine[0], who, value];
      // Another author's write stands; a commit is what the daemon holds,
      // without any change `author` made in place since.
      return who === COMMITTED ? [at, who, value] : undefined;
    }
    // What it found stands: its snapshot holds that and changes made in place
    // before it. Code outside turns keeps no snapshot.
    return at === found && author !== LOOSE ? [first, undefined, undefined] : [first, who, value];
  }
}
