// What the event tests share on the real daemon (events_*.test.ts): the actors
// that publish, and a TestEnv of a describe's own that hosts them.
import assert from "node:assert/strict";
import { after, before } from "node:test";
import { Actor, actor, type ActorClass, method } from "../src/index.js";
import { startTestEnv, type TestEnv } from "../src/testing.js";
import { troupeBin } from "./helpers.js";

/**
 * The daemon's start-up grace, during which a new watch of a type no app
 * registered waits for one instead of being refused (the default is 10 s).
 */
export const HOST_WAIT_MS = 200;

@actor("ev_bus", { idleTimeout: "30d" })
export class Bus extends Actor {
  @method
  publishAll(values: unknown[]): void {
    for (const v of values) this.ctx.publish(v);
  }

  @method
  publishThenFail(values: unknown[]): void {
    for (const v of values) this.ctx.publish(v);
    throw new Error("fails after publishing");
  }

  @method
  publishBytes(text: string): void {
    this.ctx.publish(new TextEncoder().encode(text));
  }

  /** Events are no state: a read-only method publishes too. */
  @method({ readonly: true })
  peek(tag: string): void {
    this.ctx.publish(tag);
  }

  @method
  async schedule(): Promise<void> {
    await this.ctx.setReminder("r", { due: "1m" });
    await this.ctx.setTimer("t", { due: "2m" });
    await this.ctx.setAlarm("3m", { data: "a" });
  }

  override onReminder(name: string): void {
    this.ctx.publish({ reminder: name });
  }

  override onTimer(name: string): void {
    this.ctx.publish({ timer: name });
  }

  override onAlarm(data: unknown): void {
    this.ctx.publish({ alarm: data });
  }
}

/** Watched as a type: only tests of type watches publish from it, so a type watch sees only theirs. */
@actor("ev_fleet", { idleTimeout: "30d" })
export class Fleet extends Actor {
  @method
  publishAll(values: unknown[]): void {
    for (const v of values) this.ctx.publish(v);
  }
}

/** A fresh ev_bus actor of a test: its id, and a call of a method that publishes `values`. */
export interface BusActor {
  id: string;
  call: (m: "publishAll" | "publishThenFail", values: unknown[]) => Promise<unknown>;
}

/** The daemon of a describe's tests (see {@link eventsSuite}). */
export interface EventsSuite {
  /** The env, from the describe's before() on. */
  readonly env: TestEnv;
  /** When the daemon began serving (performance.now()). */
  readonly servingSince: number;
  /** A fresh ev_bus actor for a test. */
  bus(): BusActor;
}

/**
 * For the enclosing describe: a TestEnv on a daemon of its own, with a start-up
 * grace of HOST_WAIT_MS, hosting `actors`; started in the describe's before()
 * and closed in its after().
 */
export function eventsSuite(...actors: ActorClass[]): EventsSuite {
  let env: TestEnv | undefined;
  let servingSince = 0;
  let n = 0;
  before(async () => {
    env = await startTestEnv({ binary: troupeBin(), extraArgs: ["--host-wait", `${String(HOST_WAIT_MS)}ms`] });
    servingSince = performance.now();
    await env.host(...actors);
  });
  after(async () => {
    await env?.close();
  });
  const suite: EventsSuite = {
    get env(): TestEnv {
      assert.ok(env !== undefined, "the env starts in the describe's before()");
      return env;
    },
    get servingSince(): number {
      return servingSince;
    },
    bus(): BusActor {
      n += 1;
      const id = `bus${String(n)}`;
      return { id, call: (m, vals) => suite.env.client.invoke("ev_bus", id, m, [vals]) };
    },
  };
  return suite;
}
