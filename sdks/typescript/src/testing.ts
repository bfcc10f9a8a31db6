/**
 * Testing actors against a real daemon, with a clock the test moves
 * (`@troupe/sdk/testing`, docs/testing.md).
 *
 * {@link TestDaemon} is one `troupe serve --test-clock` on a free loopback
 * port with a temporary data directory; {@link TestEnv} is a test's view of
 * one: apps hosting the actor classes under test in this process, a client,
 * state reads, and `advance()`, which fires every reminder, alarm and timer
 * due on the way and resolves once their turns ran.
 *
 * ```ts
 * let env: TestEnv;
 * beforeEach(async () => { env = await startTestEnv(); await env.host(Cart); });
 * afterEach(() => env.close());
 * it("empties an abandoned cart", async () => {
 *   await env.actor(Cart, "c1").add("apple", 2, 1.0);
 *   await env.advance("720h");
 *   assert.deepEqual(await env.state(Cart, "c1"), { items: {}, abandoned: true });
 * });
 * ```
 *
 * @module
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as grpc from "@grpc/grpc-js";

import { type ActorClass, type ActorInstance, actorTypeName } from "./actor.js";
import { CHANNEL_OPTIONS, grpcTarget } from "./address.js";
import { App } from "./app.js";
import type { ActorHandle, UntypedActor } from "./caller.js";
import { Client } from "./client.js";
import { daemonPath } from "./daemon.js";
import { type Duration, toMillis } from "./duration.js";
import type { CallFilter } from "./filters.js";
import { TroupeError, fromRpcError } from "./errors.js";
import { AdminClient, type AdvanceClockResponse, type DeactivateActorResponse } from "./gen/troupe/v1/admin.js";
import type { StateChange } from "./gen/troupe/v1/common.js";
import { encodeState } from "./payload.js";
import { ttlOf } from "./state.js";

/** The line the daemon prints on stdout once it serves, with the bound address. */
const ANNOUNCE = /^troupe listening on (\S+)/;

/**
 * How far to move the clock: seconds, or a duration string the daemon
 * reads (`"90s"`, `"720h"`, ISO 8601 `"P30D"`).
 */
export type ClockStep = number | string;

/** What moving the clock did: the daemon's time after it, and the firings that ran. */
export interface Advanced {
  now: Date;
  remindersFired: number;
  alarmsFired: number;
  timersFired: number;
}

/** The test daemon did not start, or its clock cannot be moved. */
export class TestDaemonError extends TroupeError {}

/** Options of {@link TestDaemon.start}. */
export interface TestDaemonOptions {
  /** The daemon binary; defaults to {@link daemonPath} (`$TROUPE_BIN` or the installed one). */
  binary?: string;
  /**
   * Added to `troupe serve`. A `--host-wait` here (or `TROUPE_HOST_WAIT` in
   * the environment) replaces the kit's `--host-wait 0s` (see {@link TestDaemon}).
   */
  extraArgs?: readonly string[];
  /** How long to wait for the daemon to serve (default 30 s). */
  startTimeoutMs?: number;
}

/** `by` as the daemon's duration grammar (numbers are seconds, sent as whole milliseconds). */
export function clockStepText(by: ClockStep): string {
  // The SDK's one grammar; a negative step is InvalidArgument (the test clock only moves forward).
  return `${String(toMillis(by, "advance by", true))}ms`;
}

/**
 * One `troupe serve --test-clock` process. Stop it with {@link stop} (or `await using`).
 *
 * It runs with `--host-wait 0s`: a call to a type no app registered rejects at
 * once with `NotFound` naming the registered types, rather than after the
 * daemon's start-up wait for apps (10 s by default; `TestEnv.host()` resolves
 * once the daemon accepted the app's types, so there is nothing to wait for). A
 * type whose app has gone is refused with UNAVAILABLE at once too, which the
 * client resends until the call's deadline, so an app that reconnects meanwhile
 * still answers. A `--host-wait` in `extraArgs`, or `TROUPE_HOST_WAIT` in the
 * environment, replaces the kit's.
 */
export class TestDaemon {
  /** `127.0.0.1:PORT`, for `new Client({ address })` and `new App({ address })`. */
  readonly address: string;
  /** Holds the data and the daemon's log; removed by {@link stop}. */
  readonly dir: string;
  readonly #proc: ChildProcess;
  readonly #admin: AdminClient;
  readonly #exited: Promise<void>;
  readonly #killOnExit: () => void;

  private constructor(proc: ChildProcess, address: string, dir: string, exited: Promise<void>) {
    this.#proc = proc;
    this.address = address;
    this.dir = dir;
    this.#exited = exited;
    this.#admin = new AdminClient(grpcTarget(address), grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
    // A test that forgets stop() must not leave a daemon behind.
    this.#killOnExit = () => {
      proc.kill("SIGKILL");
    };
    process.once("exit", this.#killOnExit);
  }

  /** Start a daemon and resolve once it serves. */
  static async start(options: TestDaemonOptions = {}): Promise<TestDaemon> {
    const binary = options.binary ?? daemonPath();
    const dir = mkdtempSync(join(tmpdir(), "troupe-test-"));
    const logPath = join(dir, "daemon.log");
    const log = openSync(logPath, "w");
    const extra = options.extraArgs ?? [];
    const args = ["serve", "--test-clock", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), ...hostWait(extra), ...extra];
    let proc: ChildProcess;
    try {
      proc = spawn(binary, args, { stdio: ["ignore", "pipe", log] });
    } finally {
      closeSync(log); // the child holds its own descriptor
    }
    const exited = new Promise<void>((resolve) => {
      proc.once("exit", () => {
        resolve();
      });
    });
    try {
      const address = await announced(proc, options.startTimeoutMs ?? 30_000);
      // Neither the process nor its pipe keeps a test run alive: stop() ends them.
      proc.unref();
      const stdout = proc.stdout as (NodeJS.ReadableStream & { unref?: () => void }) | null;
      stdout?.unref?.();
      return new TestDaemon(proc, address, dir, exited);
    } catch (err) {
      proc.kill("SIGKILL");
      await exited;
      const text = readLog(logPath);
      rmSync(dir, { recursive: true, force: true });
      throw new TestDaemonError(`the test daemon ${binary} did not start (${String(err)}):\n${text}`);
    }
  }

  /** The daemon's log so far, for a failing test's report. */
  log(): string {
    return readLog(join(this.dir, "daemon.log"));
  }

  /**
   * Move the daemon's clock forward by `by`: every reminder, alarm and timer
   * due on the way fires in due order, and this resolves once their turns ran.
   */
  advance(by: ClockStep): Promise<Advanced> {
    return new Promise<Advanced>((resolve, reject) => {
      // Read inside the executor: a bad step rejects the promise rather than throwing.
      const text = clockStepText(by);
      this.#admin.advanceClock({ by: text }, (err: grpc.ServiceError | null, reply: AdvanceClockResponse) => {
        if (err !== null) {
          reject(fromRpcError(err, `advancing the test clock by ${text}`));
          return;
        }
        resolve({
          now: new Date(Number(reply.nowUnixMs)),
          remindersFired: Number(reply.remindersFired),
          alarmsFired: Number(reply.alarmsFired),
          timersFired: Number(reply.timersFired),
        });
      });
    });
  }

  /**
   * Store `values` (encoded) as keys of the actor's state and remove the keys
   * in `remove` (`Admin.EditActorState`); an active actor is deactivated first.
   *
   * `ttlMs` is each stored key's `StateChange.ttl_ms`: undefined, the key keeps
   * the expiry it has (none for a new key); `0n`, it no longer expires;
   * otherwise it expires that many milliseconds after the edit (the daemon
   * refuses under a second).
   */
  editState(type: string, id: string, values: ReadonlyMap<string, Buffer>, remove: readonly string[], ttlMs?: bigint): Promise<void> {
    const changes: StateChange[] = [
      ...[...values].map(([key, value]): StateChange => ({ key, op: { $case: "set", value }, ...(ttlMs === undefined ? {} : { ttlMs }) })),
      ...remove.map((key): StateChange => ({ key, op: { $case: "delete", value: true } })),
    ];
    return new Promise<void>((resolve, reject) => {
      this.#admin.editActorState({ actor: { type, id }, changes, expect: [] }, (err: grpc.ServiceError | null) => {
        if (err !== null) {
          reject(fromRpcError(err, `setting the state of ${type}/${id}`));
          return;
        }
        resolve();
      });
    });
  }

  /**
   * End the actor's activation now (`Admin.DeactivateActor`): its running turn
   * finishes, `onDeactivate` runs, its state is stored. False if it was not active.
   */
  deactivate(type: string, id: string): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.#admin.deactivateActor({ actor: { type, id } }, (err: grpc.ServiceError | null, reply: DeactivateActorResponse) => {
        if (err !== null) {
          reject(fromRpcError(err, `deactivating ${type}/${id}`));
          return;
        }
        resolve(reply.deactivated);
      });
    });
  }

  /** The daemon's scheduling time (flows with real time, jumps on {@link advance}). */
  async now(): Promise<Date> {
    return (await this.advance("0s")).now;
  }

  /** Stop the daemon (SIGTERM, SIGKILL after 10 s) and remove its directory. */
  async stop(): Promise<void> {
    this.#admin.close();
    process.off("exit", this.#killOnExit);
    if (this.#proc.exitCode === null && this.#proc.signalCode === null) {
      this.#proc.kill("SIGTERM");
      const timer = setTimeout(() => {
        this.#proc.kill("SIGKILL");
      }, 10_000);
      await this.#exited;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** Options of {@link TestEnv}. */
export interface TestEnvOptions {
  /**
   * Whether {@link TestEnv.advance} may move the daemon's clock (default
   * true). The clock is the daemon's, shared by every test on it: set false
   * for an env on a daemon other tests share.
   */
  ownsClock?: boolean;
  /** Default deadline of the env's client calls (default 30 s). */
  timeout?: Duration;
}

/** Options of {@link TestEnv.setState}. */
export interface SetStateOptions {
  /** Keys to remove. */
  readonly delete?: readonly string[];
  /**
   * An expiry for every key in `values`, counted from the edit, as
   * `this.state.set(key, value, { ttl })` gives one from a turn and read as it
   * reads it: a duration of at least a second (`"1h"`, a number of seconds),
   * or `null` for keys that no longer expire. Left out (or `undefined`), each
   * key keeps the expiry it has (none for a new key).
   */
  readonly ttl?: Duration | null;
}

/** Options of {@link TestEnv.host}. */
export interface HostOptions {
  /** Call filters the App runs around every turn (see `CallFilter`). */
  filters?: readonly CallFilter[];
}

/** Host actors, call them, read and set their state and move the clock, on one {@link TestDaemon}. */
export class TestEnv {
  readonly daemon: TestDaemon;
  readonly client: Client;
  readonly #ownsClock: boolean;
  readonly #apps: App[] = [];
  #ownsDaemon = false;

  constructor(daemon: TestDaemon, options: TestEnvOptions = {}) {
    this.daemon = daemon;
    this.#ownsClock = options.ownsClock ?? true;
    this.client = new Client({ address: daemon.address, timeout: options.timeout ?? 30 });
  }

  /**
   * Host `actors` in this process until {@link close}; resolves once the daemon
   * accepted their types. Options first, when there are any:
   * `env.host({ filters: [audit] }, Cart)` hosts with call filters.
   */
  async host(...actors: ActorClass[]): Promise<App>;
  async host(options: HostOptions, ...actors: ActorClass[]): Promise<App>;
  async host(...args: (HostOptions | ActorClass)[]): Promise<App> {
    const first = args[0];
    const options: HostOptions = first !== undefined && typeof first !== "function" ? first : {};
    const actors = args.filter((a): a is ActorClass => typeof a === "function");
    const app = new App({ actors, address: this.daemon.address, maxReconnectDelay: 0.2, filters: options.filters });
    this.#apps.push(app);
    await app.start({ timeout: 30 });
    return app;
  }

  /** A typed handle to call one actor: `await env.actor(Cart, "c1").add("apple", 2, 1.5)`. */
  actor<A extends ActorInstance>(cls: ActorClass<A>, id: string): ActorHandle<A>;
  actor<A = UntypedActor>(type: string, id: string): ActorHandle<A>;
  actor<A>(typeOrClass: string | ActorClass, id: string): ActorHandle<A> {
    return typeof typeOrClass === "string" ? this.client.actor<A>(typeOrClass, id) : (this.client.actor(typeOrClass, id) as ActorHandle<A>);
  }

  /** The actor's state as stored (every key, or only `keys`), without running a turn. */
  state<S extends object = Record<string, unknown>>(typeOrClass: string | ActorClass, id: string, ...keys: string[]): Promise<Partial<S>> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    return this.client.getState<S>(type, id, keys);
  }

  /**
   * Give an actor state without running a turn, as a test's starting point (a
   * cart with items, a device that went silent a week ago): each of `values`
   * is stored as the actor's own writes store it, the keys in `options.delete`
   * go, other keys stay. An active actor is deactivated first, so its next
   * turn starts on this state.
   *
   * With `options.ttl` the keys in `values` expire (see
   * {@link SetStateOptions.ttl}): `setState(Login, id, { token }, { ttl: "1h" })`
   * then `advance("1h")`, and the token is gone. A ttl under a second rejects
   * with RangeError, one that is no duration with InvalidArgument, and a ttl
   * without `values` with TypeError, each before anything changes.
   */
  async setState(
    typeOrClass: string | ActorClass,
    id: string,
    values: Readonly<Record<string, unknown>> = {},
    options: SetStateOptions = {},
  ): Promise<void> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    const { ttl } = options;
    if (ttl !== undefined && Object.keys(values).length === 0) {
      throw new TypeError(
        "setState's ttl expires the keys in values, and no values were given; pass the keys to expire with their values " +
          "(a deleted key's expiry ends with it), or drop ttl",
      );
    }
    const ttlMs = ttlOf({ ttl });
    const encoded = new Map(Object.entries(values).map(([key, value]) => [key, encodeState(key, value)]));
    const remove = options.delete ?? [];
    if (encoded.size === 0 && remove.length === 0) {
      throw new TypeError("setState needs values to store or keys to delete");
    }
    await this.daemon.editState(type, id, encoded, remove, ttlMs);
  }

  /**
   * End the actor's activation now, as its idle timeout would: its running
   * turn finishes, `onDeactivate` runs and its state is stored; the next call
   * activates it again. For testing deactivation hooks and a type's
   * `retention`. False if the actor was not active.
   */
  deactivate(typeOrClass: string | ActorClass, id: string): Promise<boolean> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    return this.daemon.deactivate(type, id);
  }

  /**
   * Move the clock forward by `by` (seconds, or `"720h"`): reminders,
   * alarms and timers due on the way fire in due order, and this resolves
   * once their turns ran, so the state they left can be asserted at once.
   */
  advance(by: ClockStep): Promise<Advanced> {
    if (!this.#ownsClock) {
      return Promise.reject(
        new TestDaemonError(
          "this env shares its daemon, whose clock is every test's: moving it would fire other tests' " +
            "reminders. Use startTestEnv() (a daemon of the test's own) to move time.",
        ),
      );
    }
    return this.daemon.advance(by);
  }

  /** A fresh actor id, so tests sharing a daemon never meet each other's actors. */
  static uniqueId(prefix = ""): string {
    return `${prefix}${randomUUID().slice(0, 12)}`;
  }

  /** Stop the apps this env started, close its client, and stop a daemon it started. */
  async close(): Promise<void> {
    const apps = this.#apps.splice(0);
    await Promise.all(apps.map((app) => app.close()));
    this.client.close();
    if (this.#ownsDaemon) await this.daemon.stop();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** @internal Used by {@link startTestEnv}: the env stops the daemon when it closes. */
  static owning(daemon: TestDaemon): TestEnv {
    const env = new TestEnv(daemon, { ownsClock: true });
    env.#ownsDaemon = true;
    return env;
  }
}

/**
 * A fresh daemon and an env on it, for one test: its own state and a clock
 * only it moves. {@link TestEnv.close} stops the daemon too.
 */
export async function startTestEnv(options: TestDaemonOptions = {}): Promise<TestEnv> {
  return TestEnv.owning(await TestDaemon.start(options));
}

/**
 * `--host-wait 0s`, unless `extra` gives the flag (the daemon takes it once)
 * or `TROUPE_HOST_WAIT` does (the daemon inherits the environment; a flag would win).
 */
function hostWait(extra: readonly string[]): string[] {
  const given = extra.some((a) => a === "--host-wait" || a.startsWith("--host-wait=")) || process.env.TROUPE_HOST_WAIT !== undefined;
  return given ? [] : ["--host-wait", "0s"];
}

function announced(proc: ChildProcess, timeoutMs: number): Promise<string> {
  const stdout = proc.stdout;
  if (stdout === null) return Promise.reject(new Error("the daemon has no stdout pipe"));
  const lines = createInterface({ input: stdout });
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`it did not serve within ${String(timeoutMs)} ms`));
    }, timeoutMs);
    lines.on("line", (line) => {
      const m = ANNOUNCE.exec(line);
      if (m?.[1] !== undefined) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`it exited (${String(code ?? signal)}) before it served`));
    });
    proc.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

function readLog(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}
