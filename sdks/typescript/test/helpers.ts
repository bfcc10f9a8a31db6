// Test support: the real `troupe` daemon binary, an App hosted for a block, bounded waits.
import * as grpc from "@grpc/grpc-js";
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type ActorClass, App } from "../src/index.js";

/** sdks/typescript (tests run from build/test). */
export const SDK_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const REPO_ROOT = resolve(SDK_ROOT, "..", "..");

/** The daemon binary: $TROUPE_BIN, else target/debug/troupe at the repository root. */
export function troupeBin(): string {
  const path = process.env["TROUPE_BIN"] ?? join(REPO_ROOT, "target", "debug", "troupe");
  if (!existsSync(path)) {
    throw new Error(`daemon binary ${path} not found: build it (cargo build -p troupe) or set TROUPE_BIN`);
  }
  return path;
}

/** Reject after `ms` with a message naming what was awaited. */
export async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`timed out after ${ms} ms waiting for ${what}`));
    }, ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolve with the first stdout line of `proc` matching `pattern` (bounded by `ms`). */
export function waitForLine(proc: ChildProcess, pattern: RegExp, ms: number, what: string): Promise<RegExpExecArray> {
  const stdout = proc.stdout;
  if (stdout === null) return Promise.reject(new Error(`${what}: process has no stdout pipe`));
  const lines = createInterface({ input: stdout });
  const found = new Promise<RegExpExecArray>((resolveLine, reject) => {
    lines.on("line", (line) => {
      const m = pattern.exec(line);
      if (m !== null) {
        lines.close();
        resolveLine(m);
      }
    });
    proc.once("exit", (code, signal) => {
      reject(new Error(`${what}: process exited (${code ?? signal ?? "?"}) before printing ${pattern.source}`));
    });
  });
  return within(ms, what, found);
}

const HOST_WAIT_MS = 200;
// A daemon requires tokens only when a test gives them: never ones the test run
// happens to have in its environment.
const TOKEN_ENV = ["TROUPE_API_TOKEN", "TROUPE_APP_TOKEN"];
// Nor TLS: daemons, clients and apps all read these, so they are dropped from the
// test process too; TLS tests set them around what they construct.
const TLS_ENV = ["TROUPE_TLS_CA", "TROUPE_TLS_CERT", "TROUPE_TLS_KEY"];
for (const name of TLS_ENV) Reflect.deleteProperty(process.env, name);
const DAEMON_ENV_DROPPED = [...TOKEN_ENV, ...TLS_ENV];

/** A running `troupe serve` on a fixed data dir; restartable on the same port. */
export class Daemon {
  readonly dir: string;
  readonly extraArgs: readonly string[];
  #env: NodeJS.ProcessEnv;
  port = 0;
  #proc: ChildProcess | undefined;
  #listeningAt = 0;

  /** `env` is added to the daemon's environment (and only to its own), e.g. TROUPE_API_TOKEN. */
  constructor(extraArgs: readonly string[] = [], env: Readonly<Record<string, string>> = {}) {
    this.dir = mkdtempSync(join(tmpdir(), "troupe-ts-test-"));
    this.extraArgs = extraArgs;
    const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !DAEMON_ENV_DROPPED.includes(k)));
    this.#env = { ...inherited, ...env };
  }

  /** `env` is added to the daemon's environment from its next start (a rotated token, say). */
  setEnv(env: Readonly<Record<string, string>>): void {
    this.#env = { ...this.#env, ...env };
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get logPath(): string {
    return join(this.dir, "daemon.log");
  }

  /** Start the daemon (port 0 the first time, then the same port) and wait until it listens. */
  async start(): Promise<void> {
    const log = createWriteStream(this.logPath, { flags: "a" });
    const proc = spawn(
      troupeBin(),
      ["serve", "--listen", `127.0.0.1:${this.port}`, "--data-dir", join(this.dir, "data"), ...this.#hostWait(), ...this.extraArgs],
      { stdio: ["ignore", "pipe", "pipe"], env: this.#env },
    );
    proc.stderr.pipe(log);
    this.#proc = proc;
    const m = await waitForLine(proc, /^troupe listening on 127\.0\.0\.1:(\d+)$/, 20_000, "the daemon to listen");
    this.port = Number(m[1]);
    this.#listeningAt = performance.now();
    proc.stdout.resume();
  }

  /** The tests' short start-up grace, unless the test set its own (the flag may be given once). */
  #hostWait(): string[] {
    return this.extraArgs.includes("--host-wait") ? [] : ["--host-wait", `${HOST_WAIT_MS}ms`];
  }

  /**
   * Resolve once the daemon's start-up grace (--host-wait 200ms) is over. Until
   * then it answers calls to unregistered types with UNAVAILABLE (apps may be
   * re-connecting after a restart), and only afterwards with NOT_FOUND. The grace
   * is a fixed time with no event to await, hence the timer.
   */
  async pastHostWait(): Promise<void> {
    const left = this.#listeningAt + HOST_WAIT_MS + 50 - performance.now();
    if (left > 0) await new Promise((r) => setTimeout(r, left));
  }

  /** SIGTERM the daemon and wait for it to exit; resolves to its exit code. */
  async stop(): Promise<number | null> {
    const proc = this.#proc;
    this.#proc = undefined;
    if (proc === undefined || proc.exitCode !== null) return proc?.exitCode ?? 0;
    const exited = new Promise<number | null>((res) => {
      proc.once("exit", (code) => {
        res(code);
      });
    });
    proc.kill("SIGTERM");
    try {
      return await within(20_000, "the daemon to exit after SIGTERM", exited);
    } catch (e) {
      proc.kill("SIGKILL");
      throw e;
    }
  }

  /** Stop the daemon (SIGKILL if needed) and remove its directory. */
  async dispose(): Promise<void> {
    try {
      await this.stop();
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }

  logTail(lines = 40): string {
    try {
      return readFileSync(this.logPath, "utf8").split("\n").slice(-lines).join("\n");
    } catch {
      return "";
    }
  }
}

/** Start a daemon for a test (with `env` added to its environment); dispose of it when done. */
export async function startDaemon(extraArgs: readonly string[] = [], env: Readonly<Record<string, string>> = {}): Promise<Daemon> {
  const d = new Daemon(extraArgs, env);
  await d.start();
  return d;
}

/** An App hosting `actors` at `address`, registered (bounded wait). Close it when done. */
export async function host(address: string, ...actors: ActorClass[]): Promise<App> {
  const app = new App({ actors, address, appName: "node-test", logger: quietLogger });
  await app.start({ timeout: 15 });
  return app;
}

export const quietLogger = { warn: () => undefined, info: () => undefined, debug: () => undefined };

/** A promise with its resolve function, for events a test awaits. */
export function signal<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolveFn!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolveFn = r;
  });
  return { promise, resolve: resolveFn };
}

/** Binds `server` to a free loopback port, for a fake daemon; resolves with the port. */
export function bindLoopback(server: grpc.Server): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => {
      if (err === null) resolve(port);
      else reject(err);
    });
  });
}
