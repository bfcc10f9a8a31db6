// Hosting actors: App attaches to the daemon, re-connects, and hosts its
// classes through one Session (session.ts) per stream. On the native core the
// core re-connects (native_wire.ts's NativeApp); on grpc-js, #connectLoop does.
import type { TracerProvider } from "@opentelemetry/api";
import { hostname } from "node:os";
import { type ActorClass, type ActorSpec, specOf } from "./actor.js";
import { API_VERSION, channelOptions, checkReceiveLimit, grpcTarget, resolveAddress, SDK_NAME } from "./address.js";
import { APP_TOKEN_ENV, tokenClientOptions, tokenMetadata, tokenSource } from "./auth.js";
import { type Duration, toMillis } from "./duration.js";
import { type CallFilter, checkFilters } from "./filters.js";
import { TroupeError } from "./errors.js";
import { FailureKind } from "./gen/troupe/v1/common.js";
import { checkRetryBudget, type RetryBudget } from "./retry.js";
import { channelCredentials, resolveTls, tlsBytes, type TlsOptions } from "./tls.js";
import { nativeCore } from "./core.js";
import { GrpcWire } from "./grpc_wire.js";
import { NativeApp } from "./native_wire.js";
import type { AppWire } from "./wire.js";
import { Tracing } from "./tracing.js";
import { ConnectionLost, type Logger, logNoConnection, Session, type SessionHost } from "./session.js";

export type { Logger } from "./session.js";

const INITIAL_DELAY_MS = 50;


const defaultLogger: Logger = {
  warn: (m) => {
    console.warn(m);
  },
  info: () => undefined,
  debug: () => undefined,
};

/** Options of {@link App}. */
export interface AppOptions extends TlsOptions {
  /** The actor classes to host, each decorated with `@actor`. */
  actors: readonly ActorClass[];
  /** Daemon address; defaults to `$TROUPE_ADDR`, then `127.0.0.1:7420`. */
  address?: string;
  /** Shown in admin output; defaults to `hostname-pid`. */
  appName?: string;
  /** Upper bound of the exponential re-connect backoff (default 2 s). */
  maxReconnectDelay?: Duration;
  /** Where connection warnings go (default: console.warn). */
  logger?: Logger;
  /**
   * Records a SERVER span per turn (default: OpenTelemetry's global provider).
   * The W3C trace context each turn carries is continued either way.
   */
  tracerProvider?: TracerProvider;
  /**
   * The largest message the app receives from the daemon, in bytes (a turn
   * with its payload, an activation with the actor's stored state, or several
   * together); at least 65536. Left out, the app receives any size the daemon
   * sends. The app declares it when it registers, and the daemon fails work
   * that would not fit with RESOURCE_EXHAUSTED for its caller instead of
   * sending it, so the app stays attached. It also bounds replies to calls
   * made from turns, which share the app's connection.
   */
  maxReceiveBytes?: number;
  /**
   * The app token of a daemon that requires one (its `$TROUPE_APP_TOKEN` or
   * `--app-token-file`), sent as `authorization: Bearer <token>` on the app's
   * stream and with the calls its actors make from turns (the daemon takes the
   * app token for calls too). Defaults to the first token in `tokenFile`, then
   * the first in `$TROUPE_APP_TOKEN` (comma- or newline-separated), else none.
   * The client API token does not let an app register. Kept out of the App's
   * messages, logs and `util.inspect` output.
   */
  token?: string;
  /**
   * A file holding the app token, one per line (blank lines and `#` comments
   * skipped; the first is sent), as the daemon's `--app-token-file`. Read
   * when the App is created (throws if it cannot be read or holds no token)
   * and again at each (re-)connect, so a rotated file is picked up; a file
   * unusable by then ends `run()` with that error. Ignored when `token` is
   * given.
   */
  tokenFile?: string;
  /**
   * Run around every turn of the hosted actors, the first outermost: for what
   * cuts across types (authorisation from the call's metadata, logging,
   * metrics). See {@link CallFilter}.
   */
  filters?: readonly CallFilter[];
  /**
   * Bounds the retries of the calls the hosted actors make through `this.ctx`
   * (and of no others), as a Client's `retryBudget` bounds the client's
   * (see {@link RetryBudget}): one budget for all the calls made on one connection to the
   * daemon, fresh at each (re-)connect. Default the Client's,
   * `{ maxTokens: 100, tokenRatio: 0.1 }`; `false` is no budget: each call
   * retries until the turn's caller's deadline.
   */
  retryBudget?: RetryBudget | false;
}

/** Options of {@link App.waitRegistered}. */
export interface WaitRegisteredOptions {
  /** Wait until the app has registered at least this many times (default 1). */
  sessions?: number;
  /** Give up after this long with a TroupeError. */
  timeout?: Duration;
}

/** The stream to the daemon ended or could not be opened: the App re-connects. */
interface Waiter {
  sessions: number;
  resolve: () => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout | undefined;
}

/** What a Session needs from its App. */
/**
 * Hosts actor types behind the daemon.
 *
 * ```ts
 * const app = new App({ actors: [Counter] });
 * await app.start();        // resolves once the daemon accepted the types
 * ...
 * await app.close();
 * ```
 *
 * The app re-connects by itself, with exponential backoff up to
 * `maxReconnectDelay`, when the daemon restarts or the stream drops; actors
 * active at that moment are dropped here and re-activated by the daemon from
 * stored state on their next call. It stops, and `start`/`run` reject, when
 * the daemon refuses it for good: with {@link Unauthenticated} when the
 * daemon requires an app token and the app has none or a wrong one, and
 * with {@link TlsConfigError} when its TLS files cannot be read at a re-connect.
 */
export class App {
  readonly address: string;
  readonly appName: string;
  /** The budget of the retries of the actors' calls, defaults filled in, or false for none (see {@link AppOptions.retryBudget}). */
  readonly retryBudget: Readonly<Required<RetryBudget>> | false;
  /** Version of the daemon of the current (or last) session. */
  daemonVersion = "";
  readonly #specs = new Map<string, ActorSpec>();
  readonly #logger: Logger;
  readonly #host: SessionHost;
  readonly #maxDelayMs: number;
  #registered = false;
  #sessions = 0;
  #waiters = new Set<Waiter>();
  #stopping = false;
  #loop: Promise<void> | undefined;
  #session: Session | undefined;
  #wake: (() => void) | undefined;
  /** Starts a run on the native core; undefined on grpc-js. */
  #startNative: (() => { run: NativeApp; done: Promise<void> }) | undefined;
  #native: NativeApp | undefined;

  constructor(options: AppOptions) {
    for (const cls of options.actors) {
      const spec = specOf(cls);
      if (this.#specs.has(spec.name)) throw new TypeError(`two classes declare actor type ${JSON.stringify(spec.name)}`);
      this.#specs.set(spec.name, spec);
    }
    if (this.#specs.size === 0) throw new TypeError("App needs at least one actor class");
    this.address = resolveAddress(options.address);
    this.appName = options.appName ?? `${hostname()}-${process.pid}`;
    this.#maxDelayMs = toMillis(options.maxReconnectDelay, "maxReconnectDelay") ?? 2000;
    this.#logger = options.logger ?? defaultLogger;
    const retryBudget = checkRetryBudget(options.retryBudget);
    this.retryBudget = retryBudget;
    const maxReceiveBytes = options.maxReceiveBytes;
    checkReceiveLimit(maxReceiveBytes);
    const tls = resolveTls(options);
    channelCredentials(tls); // unusable files throw here; read again at each (re-)connect
    const addon = nativeCore();
    // An unusable token throws here; a token file is read again at each (re-)connect
    // too, so a rotated Secret is picked up. The token lives only in these closures, out
    // of reach of inspection.
    const token = tokenSource(options, APP_TOKEN_ENV);
    const openWire = (target: string): AppWire => {
      const clientOptions = { ...channelOptions(maxReceiveBytes), ...tokenClientOptions(token()) };
      return new GrpcWire(target, channelCredentials(tls), clientOptions, retryBudget, (m) => {
        this.#logger.debug(m);
      });
    };
    if (addon !== undefined) {
      // The native core keeps the stream attached itself (its backoff is this one),
      // asking for the token and the TLS files again before each attempt.
      this.#startNative = () => {
        const run = new NativeApp(this.#host, {
          address: this.address,
          maxReceiveBytes,
          initialDelayMs: INITIAL_DELAY_MS,
          maxDelayMs: this.#maxDelayMs,
          register: this.#host.registerMessage(),
          credentials: () => ({ metadata: tokenMetadata(token()), ...tlsBytes(tls) }),
          target: grpcTarget(this.address),
          retryBudget,
        });
        return { run, done: run.run(addon) };
      };
    }
    this.#host = {
      address: this.address,
      specs: this.#specs,
      logger: this.#logger,
      tracing: new Tracing(options.tracerProvider),
      filters: checkFilters(options.filters),
      openWire,
      setRegistered: (registered, version) => {
        this.#setRegistered(registered, version);
      },
      registerMessage: () => ({
        appName: this.appName,
        types: [...this.#specs.values()].map((spec) => spec.proto),
        sdk: SDK_NAME,
        apiVersion: API_VERSION,
        acceptsBatches: true,
        // Both wires put a large message's pieces back together (grpc_wire.ts's
        // Pieces, the native core's reader).
        acceptsParts: true,
        // A turn whose caller stopped waiting gets its ctx.signal aborted.
        acceptsCancel: true,
        // 0: no limit of the app's own (the channel takes any size).
        maxReceiveBytes: BigInt(maxReceiveBytes ?? 0),
      }),
      unknownType: (name) => ({
        type: "LookupError",
        message: `this app does not host actor type ${JSON.stringify(name)}; it hosts ${[...this.#specs.keys()].join(", ")}`,
        details: "",
        kind: FailureKind.FAILURE_KIND_UNSPECIFIED,
      }),
    };
  }

  /** The actor type names this app hosts. */
  get actorTypes(): string[] {
    return [...this.#specs.keys()];
  }

  /** Whether the app is attached to the daemon and its types are registered right now. */
  get registered(): boolean {
    return this.#registered;
  }

  /** How many times the app has registered with a daemon (re-connects included). */
  get sessions(): number {
    return this.#sessions;
  }

  /** Whether the app's connect loop is running (between start/run and close/stop). */
  get running(): boolean {
    return this.#loop !== undefined;
  }

  /**
   * Start hosting in the background and resolve once the daemon accepted the
   * actor types. Keeps re-connecting afterwards until {@link close}. Rejects with
   * {@link ApiVersionMismatch} if the daemon speaks another app API version
   * (install matching versions), {@link InvalidArgument}, {@link Unauthenticated}
   * (or another TroupeError) if the daemon refuses the registration, which
   * retrying would not fix.
   */
  async start(options: Omit<WaitRegisteredOptions, "sessions"> = {}): Promise<void> {
    const loop = this.#ensureLoop();
    const stopped = loop.then(() => {
      throw new TroupeError("the app was stopped before it registered");
    });
    await Promise.race([this.waitRegistered({ sessions: this.#registered ? this.#sessions : this.#sessions + 1, timeout: options.timeout }), stopped]);
  }

  /**
   * Host actors until {@link stop} or {@link close}; rejects if the registration
   * is refused (with {@link Unauthenticated} for a missing or wrong token,
   * {@link ApiVersionMismatch} for a daemon of another app API version).
   */
  run(): Promise<void> {
    return this.#ensureLoop();
  }

  /** {@link run} until SIGINT or SIGTERM, then close and resolve. */
  async runForever(): Promise<void> {
    const onSignal = (): void => {
      this.stop();
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      await this.run();
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    }
  }

  /** Ask the app to stop: the stream is closed; results of turns still running are dropped. */
  stop(): void {
    this.#stopping = true;
    this.#session?.close();
    this.#native?.stop();
    this.#wake?.();
  }

  /** Stop and wait until the connection is closed. Never rejects. */
  async close(): Promise<void> {
    this.stop();
    await this.#loop?.catch(() => undefined);
  }

  /**
   * Wait until the app is registered and has registered at least `sessions`
   * times (`app.sessions + 1` waits for the next re-connect).
   */
  waitRegistered(options: WaitRegisteredOptions = {}): Promise<void> {
    const sessions = options.sessions ?? 1;
    if (this.#registered && this.#sessions >= sessions) return Promise.resolve();
    const timeoutMs = toMillis(options.timeout, "timeout");
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { sessions, resolve, reject, timer: undefined };
      if (timeoutMs !== undefined) {
        waiter.timer = setTimeout(() => {
          this.#waiters.delete(waiter);
          reject(new TroupeError(`app not registered with the daemon at ${this.address} within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this.#waiters.add(waiter);
    });
  }

  #setRegistered(registered: boolean, daemonVersion = ""): void {
    this.#registered = registered;
    if (!registered) return;
    this.#sessions += 1;
    this.daemonVersion = daemonVersion;
    this.#logger.info(`troupe: registered ${[...this.#specs.keys()].join(", ")} with daemon ${daemonVersion || "?"} at ${this.address}`);
    for (const w of [...this.#waiters]) {
      if (this.#sessions >= w.sessions) {
        this.#waiters.delete(w);
        clearTimeout(w.timer);
        w.resolve();
      }
    }
  }

  #ensureLoop(): Promise<void> {
    if (this.#loop === undefined) {
      this.#stopping = false;
      const loop = this.#connectLoop().finally(() => {
        this.#loop = undefined;
      });
      this.#loop = loop;
      // Waiters learn about the end of the loop (stop or a refused registration).
      loop.then(
        () => {
          this.#failWaiters(new TroupeError("the app was stopped before it registered"));
        },
        (e: unknown) => {
          this.#failWaiters(e instanceof Error ? e : new TroupeError(String(e)));
        },
      );
    }
    return this.#loop;
  }

  #failWaiters(err: Error): void {
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.reject(err);
    }
    this.#waiters.clear();
  }

  #isStopping(): boolean {
    return this.#stopping;
  }

  async #runNative(start: () => { run: NativeApp; done: Promise<void> }): Promise<void> {
    if (this.#isStopping()) return;
    const { run, done } = start();
    this.#native = run;
    try {
      await done;
    } finally {
      this.#native = undefined;
      if (this.#registered) this.#setRegistered(false);
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.#wake = done;
    }).finally(() => {
      this.#wake = undefined;
    });
  }

  async #connectLoop(): Promise<void> {
    if (this.#startNative !== undefined) {
      await this.#runNative(this.#startNative);
      return;
    }
    const target = grpcTarget(this.address);
    let delay = INITIAL_DELAY_MS;
    let quiet = false;
    while (!this.#isStopping()) {
      const session = new Session(this.#host, target);
      this.#session = session;
      const before = this.#sessions;
      let error: unknown;
      try {
        await session.run();
      } catch (e) {
        error = e;
      } finally {
        session.close();
        this.#session = undefined;
      }
      const wasRegistered = this.#registered;
      if (wasRegistered) this.#setRegistered(false);
      if (this.#isStopping()) break;
      if (error instanceof TroupeError) throw error; // a refused registration
      if (!(error instanceof ConnectionLost)) throw error instanceof Error ? error : new Error(String(error));
      if (this.#sessions > before) quiet = false;
      logNoConnection(this.#logger, this.address, error, !quiet);
      quiet = true;
      if (wasRegistered) delay = INITIAL_DELAY_MS;
      // Jitter keeps many apps from reconnecting to a restarted daemon in lockstep.
      await this.#sleep(delay * (0.8 + Math.random() * 0.4));
      delay = Math.min(delay * 2, this.#maxDelayMs);
    }
  }
}
