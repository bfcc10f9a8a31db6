// State with turns side by side, checked against a model on random runs.
//
// Turns of one actor interleave (a reentrant actor's nested turns, read-only
// turns) and end in any order, each committing or failing; code outside turns
// reads, and each change it tries throws and changes nothing.
// Whatever the order, a key must end as its latest write by an author that did
// not fail, and the daemon (the changes sent, applied in turn) must hold what
// the view holds. When the daemon lets a key expire, it deletes what it holds:
// writes sent before go with it, writes not sent yet come after it (and set the
// key again once sent). A list is changed in place only by the author of its latest
// write, while no other author touched the key since and no other running turn
// holds it: a change in place of a value two turns hold cannot be told apart.
// Kept in step with the Python SDK's test_state_model.py.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { StateChange } from "../src/gen/troupe/v1/common.js";
import { State, TroupeError } from "../src/index.js";
import { commitState, endTurn, expireState, refuseState, rollbackState } from "../src/state.js";
import type { TurnScope } from "../src/turn.js";
import { turnOf } from "./state_turns.js";

const KEYS = ["a", "b", "c"] as const;
type Key = (typeof KEYS)[number];
type Value = number | number[];
type S = Record<Key, Value>;
const GONE = Symbol("gone");
// The author of an expiry.
const DAEMON = Symbol("daemon");

/** A small seeded generator (mulberry32), so a failing seed replays. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Turn = { scope: TurnScope; run: <T>(fn: () => T) => T; name: string };
type Author = Turn | undefined | typeof DAEMON;
type Write = { author: Author; value: Value | typeof GONE; sent: boolean };

class Run {
  readonly state: State<S>;
  readonly daemon = new Map<string, string>();
  readonly initial = new Map<string, Value>();
  // Per key, every write in the order it takes effect; the model keeps the latest that stands.
  readonly writes = new Map<string, Write[]>(KEYS.map((k) => [k, []]));
  readonly failed = new Set<Author>();
  // Per key, who touched it since its latest write, and the running turns that did.
  readonly touched = new Map<string, Set<Author>>(KEYS.map((k) => [k, new Set()]));
  readonly holders = new Map<string, Set<Author>>(KEYS.map((k) => [k, new Set()]));
  readonly running: Turn[] = [];
  readonly log: string[] = [];
  #next = 10;

  constructor(readonly rand: () => number) {
    for (const key of KEYS) if (rand() < 0.7) this.initial.set(key, Math.floor(rand() * 3));
    const stored: Record<string, Buffer> = {};
    for (const [key, value] of this.initial) {
      stored[key] = Buffer.from(String(value));
      this.daemon.set(key, String(value));
    }
    this.state = new State<S>(stored);
  }

  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.rand() * items.length)];
    if (item === undefined) throw new Error("nothing to pick from");
    return item;
  }

  apply(changes: StateChange[]): void {
    for (const c of changes) {
      if (c.op?.$case === "set") this.daemon.set(c.key, Buffer.from(c.op.value).toString("utf8"));
      else this.daemon.delete(c.key);
    }
  }

  act(turn: Turn | undefined): void {
    const key = this.pick(KEYS);
    const name = turn?.name ?? "outside turns";
    const s = this.state;
    const last = (this.writes.get(key) ?? []).filter((w) => !this.failed.has(w.author)).at(-1);
    const own = last !== undefined && last.author === turn ? last.value : undefined;
    const alone = (who: Set<Author> | undefined): boolean => [...(who ?? [])].every((a) => a === turn);
    const step = (): void => {
      if (turn?.scope.readonly === true || this.rand() < 0.3) {
        if (s.has(key)) {
          s.get(key);
          this.#touch(key, turn);
        }
        this.log.push(`${name} reads ${key}`);
      } else if (Array.isArray(own) && alone(this.touched.get(key)) && alone(this.holders.get(key)) && this.rand() < 0.5) {
        const value = this.#next++;
        const held = s.get(key);
        if (!Array.isArray(held)) throw new Error(`${key} holds ${JSON.stringify(held)}, not a list`);
        held.push(value);
        if (held !== own) own.push(value);
        // A change not sent yet, of a value that may have been.
        this.writes.get(key)?.push({ author: turn, value: own, sent: false });
        this.log.push(`${name} appends ${String(value)} to ${key}`);
      } else if (this.rand() < 0.2 && s.has(key)) {
        s.delete(key);
        this.#wrote(key, turn, GONE);
        this.log.push(`${name} deletes ${key}`);
      } else {
        const next = this.#next++;
        const value = this.rand() < 0.3 ? [next] : next;
        s.set(key, value);
        this.#wrote(key, turn, value);
        this.log.push(`${name} sets ${key}=${JSON.stringify(value)}`);
      }
    };
    if (turn === undefined) this.#outside(key);
    else turn.run(step);
  }

  /** Code outside turns reads `key`, and every change it tries throws and changes nothing. */
  #outside(key: Key): void {
    const s = this.state;
    const before = s.has(key) ? JSON.stringify(s.get(key)) : undefined;
    if (before !== undefined) this.#touch(key, undefined);
    const held = s.get(key);
    const tries: [string, () => unknown][] = [
      ["sets", () => s.set(key, this.#next++)],
      ["deletes", () => s.delete(key)],
      ["adds", () => s.setDefault("c", 0)],
    ];
    if (Array.isArray(held)) tries.push(["appends to", () => held.push(this.#next++)]);
    const [verb, change] = this.pick(tries);
    if (verb === "adds" && s.has("c")) return;
    assert.throws(change, TroupeError, `outside turns ${verb} ${key}\n${this.trace()}`);
    const after = s.has(key) ? JSON.stringify(s.get(key)) : undefined;
    assert.equal(after, before, `a refused change outside turns changed ${key}\n${this.trace()}`);
    this.log.push(`outside turns reads ${key}, and ${verb} it in vain`);
  }

  #wrote(key: string, author: Author, value: Value | typeof GONE): void {
    this.writes.get(key)?.push({ author, value, sent: false });
    this.touched.set(key, new Set());
    this.#touch(key, author);
  }

  #touch(key: string, author: Author): void {
    this.touched.get(key)?.add(author);
    if (author !== undefined) this.holders.get(key)?.add(author);
  }

  end(turn: Turn): void {
    this.running.splice(this.running.indexOf(turn), 1);
    for (const holders of this.holders.values()) holders.delete(turn);
    if (turn.scope.readonly) {
      const refused = refuseState(this.state, turn.scope);
      this.log.push(`${turn.name} ends (read-only)`);
      assert.deepEqual(refused, [], `a read-only turn was refused\n${this.trace()}`);
    } else if (this.rand() < 0.5) {
      const changes = commitState(this.state, turn.scope);
      this.log.push(`${turn.name} commits ${shown(changes)}`);
      this.apply(changes);
      this.sent(turn);
    } else {
      rollbackState(this.state, turn.scope);
      this.failed.add(turn);
      this.log.push(`${turn.name} fails`);
    }
    endTurn(this.state, turn.scope);
  }

  /** A commit by `turn` sent its writes. */
  sent(turn: Turn): void {
    for (const writes of this.writes.values()) {
      for (const w of writes) if (w.author === turn) w.sent = true;
    }
  }

  expire(): void {
    const key = this.pick(KEYS);
    if (!this.daemon.has(key)) return;
    this.daemon.delete(key);
    expireState(this.state, [key]);
    const writes = this.writes.get(key) ?? [];
    let after = 0;
    writes.forEach((w, i) => {
      if (w.sent && !this.failed.has(w.author)) after = i + 1;
    });
    writes.splice(after, 0, { author: DAEMON, value: GONE, sent: true });
    this.log.push(`${key} expires`);
  }

  expected(): Record<string, Value> {
    const out = new Map(this.initial);
    for (const [key, writes] of this.writes) {
      const last = writes.filter((w) => !this.failed.has(w.author)).at(-1);
      if (last === undefined) continue;
      if (last.value === GONE) out.delete(key);
      else out.set(key, last.value);
    }
    return Object.fromEntries(out);
  }

  trace(): string {
    return this.log.join("\n");
  }
}

function shown(changes: StateChange[]): string {
  return JSON.stringify(Object.fromEntries(changes.map((c) => [c.key, c.op?.$case === "set" ? Buffer.from(c.op.value).toString("utf8") : null])));
}

function runSeed(seed: number): void {
  const rand = random(seed);
  const run = new Run(rand);
  let started = 0;
  const steps = 4 + Math.floor(rand() * 20);
  for (let i = 0; i < steps; i++) {
    const roll = rand();
    if (roll < 0.2 && started < 4) {
      const readonly = rand() < 0.25;
      const name = `turn${String(started++)}`;
      const [scope, runAs] = turnOf(run.state, name, readonly);
      run.running.push({ scope, run: runAs, name });
      run.log.push(`${name} starts${readonly ? " (read-only)" : ""}`);
    } else if (roll < 0.35 && run.running.length > 0) run.end(run.pick(run.running));
    else if (roll < 0.42) run.act(undefined);
    else if (roll < 0.47) run.expire();
    else if (run.running.length > 0) run.act(run.pick(run.running));
  }
  while (run.running.length > 0) run.end(run.pick(run.running));
  // Code outside turns changed nothing, so it has nothing for a next turn to send.
  assert.deepEqual(commitState(run.state), [], `code outside turns left changes to send\n${run.trace()}`);
  const expected = run.expected();
  assert.deepEqual(run.state.toJSON(), expected, `the view is not the model\n${run.trace()}`);
  const daemon = Object.fromEntries([...run.daemon].map(([k, v]) => [k, JSON.parse(v) as unknown]));
  assert.deepEqual(daemon, expected, `the daemon is not the model\n${run.trace()}`);
}

test("turns side by side leave each key at its latest write that stands", () => {
  for (let seed = 0; seed < 20_000; seed++) {
    try {
      runSeed(seed);
    } catch (e) {
      throw new Error(`seed ${String(seed)}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
});
