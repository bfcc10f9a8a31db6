// For unit tests of State with turns side by side: stored state from plain
// values, and turns to run code as.
import type { StateChange } from "../src/gen/troupe/v1/common.js";
import { State } from "../src/index.js";
import { commitState, endTurn } from "../src/state.js";
import { currentTurn, TurnScope } from "../src/turn.js";

/** `values` as the daemon hands them over: each one's JSON bytes. */
export function stored(values: Record<string, unknown>): Record<string, Buffer> {
  return Object.fromEntries(Object.entries(values).map(([k, v]) => [k, Buffer.from(JSON.stringify(v))]));
}

/** A turn of `s` named `name`, and a way to run code as it. */
export function turnOf<S extends object>(s: State<S>, name: string, readonly = false): [TurnScope, <T>(fn: () => T) => T] {
  const scope = new TurnScope(s, "t/1", name, readonly);
  return [scope, (fn) => currentTurn.run(scope, fn)];
}

/** Run `fn` as a writing turn of `s` that succeeds; returns the changes its end sends. */
export function committed<S extends object>(s: State<S>, fn: () => void, name = "turn"): StateChange[] {
  const [scope, run] = turnOf(s, name);
  try {
    run(fn);
    return commitState(s, scope);
  } finally {
    endTurn(s, scope);
  }
}
