// Calling actors from any program.
import type { TracerProvider } from "@opentelemetry/api";
import { type ActorClass, type ActorInstance, actorTypeName } from "./actor.js";
import { CHANNEL_OPTIONS, grpcTarget, resolveAddress } from "./address.js";
import { API_TOKEN_ENV, resolveToken, tokenClientOptions, tokenMetadata } from "./auth.js";
import {
  type ActorHandle,
  type CallOptions,
  type HandleOptions,
  handleOptions,
  type TellOptions,
  Caller,
  type CallTransport,
  type GetStateExpiryOptions,
  type GetStateOptions,
  makeHandle,
  type Params,
  splitParams,
  stubTransport,
  type UntypedActor,
} from "./caller.js";
import { type Duration, toMillis } from "./duration.js";
import { type ActorEventStream, openWatch, type WatchOptions, type WatchTypeOptions } from "./events.js";
import { ActorClientClient } from "./gen/troupe/v1/client.js";
import {
  type AlarmOptions,
  type ListRemindersOptions,
  type Reminder,
  type ReminderOptions,
  Scheduler,
  type ScheduleTime,
  type TimerOptions,
} from "./schedule.js";
import { checkRetryBudget, type RetryBudget } from "./retry.js";
import { channelCredentials, resolveTls, tlsBytes, type TlsFiles, type TlsOptions } from "./tls.js";
import { type NativeAddon, nativeCore } from "./core.js";
import { NativeCalls } from "./native_calls.js";
import { Tracing } from "./tracing.js";

type TypeOrClass = string | ActorClass;

function typeName(typeOrClass: TypeOrClass): string {
  return typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
}

/** Options of {@link Client}. */
export interface ClientOptions extends TlsOptions {
  /** Daemon address; defaults to `$TROUPE_ADDR`, then `127.0.0.1:7420`. */
  address?: string;
  /** Default deadline of every call; none waits as long as the daemon lets the call run. */
  timeout?: Duration;
  /**
   * Records a CLIENT span per call (default: OpenTelemetry's global provider).
   * Each call is a child of the active span and carries the W3C trace context
   * to the daemon.
   */
  tracerProvider?: TracerProvider;
  /**
   * The client API token of a daemon that requires one, sent with every call
   * as `authorization: Bearer <token>`. Defaults to the first token in
   * `tokenFile`, then the first in `$TROUPE_API_TOKEN` (comma- or
   * newline-separated), else none. A daemon that requires none ignores it. The
   * Client keeps it out of its messages, logs and `util.inspect` output.
   */
  token?: string;
  /**
   * A file holding the token, one per line (blank lines and `#` comments
   * skipped; the first is sent), as the daemon's `--api-token-file`. Read
   * once, when the Client is created; throws if it cannot be read or holds no
   * token. Ignored when `token` is given.
   */
  tokenFile?: string;
  /**
   * Resend an invoke or tell that failed with UNAVAILABLE (the daemon
   * restarting, a forward to another daemon that broke, a refused or reset
   * connection), with the same idempotency key, after 50 ms, doubling up to 1 s
   * (jittered), while the call's timeout leaves time (without one: for up to
   * 10 s); then reject with the last error, which says how often it retried.
   * A RESOURCE_EXHAUSTED the daemon marks as having run nothing (a full
   * mailbox, memory near its limit: it sends gRPC's retry pushback) is resent
   * the same way, never sooner than the pushback asks, so a call waits out a
   * short overload instead of rejecting with `Overloaded`. Other errors,
   * a message over a size limit among them, are never retried. Default true;
   * false sends each call once.
   */
  retry?: boolean;
  /**
   * Bounds the retries of all the client's calls together, as gRPC's retry
   * throttling does (gRFC A6; see {@link RetryBudget}): each refusal worth
   * resending takes a token from a budget of `maxTokens`, each call that
   * succeeds puts back `tokenRatio`, and no call is resent while half the
   * budget or less is left; it rejects with its last error, which says the
   * retry budget was exhausted. So when the daemon is down or overloaded the
   * client's calls make a few retries between them and then fail at once,
   * instead of each resending until its timeout and adding to the load of a
   * daemon trying to recover. Default `{ maxTokens: 100, tokenRatio: 0.1 }`:
   * some 49 retries from a full budget, so a lone call retries through a 10 s
   * restart of the daemon (about 13), a burst of 50 failing calls or more is
   * sent once each, and each retry spent comes back with 10 successful calls.
   * `false` is no budget: each call retries until its timeout.
   */
  retryBudget?: RetryBudget | false;
}

/**
 * A client for the daemon's ActorClient API.
 *
 * ```ts
 * const client = new Client();
 * await client.actor<Counter>("counter", "c1").call("incr", 5);
 * await client.invoke("counter", "c1", "incr", [5]);
 * client.close();
 * ```
 *
 * Used inside an actor's turn, its calls are made for the turn: they carry the
 * turn's call chain and end no later than the turn's caller's deadline
 * (docs/calls.md).
 *
 * Against a daemon that requires a token, calls without the right one reject
 * with {@link Unauthenticated}. A daemon with TLS on wants `tlsCa` (or
 * `$TROUPE_TLS_CA`), see {@link TlsOptions}; calls without it reject with
 * {@link Unavailable}.
 *
 * Every invoke and tell carries an idempotency key naming the logical call
 * (`{ idempotencyKey }`, else a fresh UUID) and is resent with it when the
 * daemon answers UNAVAILABLE or a marked overload, while the call's timeout leaves time (see
 * {@link ClientOptions.retry}); a daemon that honours keys runs the call once
 * and answers every attempt with its first answer (docs/delivery.md).
 */
export class Client {
  /** The daemon address this client talks to. */
  readonly address: string;
  /** Default deadline of every call. */
  readonly timeout: Duration | undefined;
  /** Whether invoke and tell are resent on UNAVAILABLE and marked overloads (see {@link ClientOptions.retry}). */
  readonly retry: boolean;
  /** The budget of the client's retries, defaults filled in, or false for none (see {@link ClientOptions.retryBudget}). */
  readonly retryBudget: Readonly<Required<RetryBudget>> | false;
  #stub: ActorClientClient | undefined;
  #stubCalls: CallTransport | undefined;
  #caller: Caller | undefined;
  #native: NativeCalls | undefined;
  readonly #addon: NativeAddon | undefined;
  readonly #scheduler: Scheduler;
  readonly #tracing: Tracing;
  // Private, so that inspecting or serialising the Client never shows it.
  readonly #token: string | undefined;
  readonly #tls: TlsFiles | undefined;
  /** What ends each open watch (closing the channel would leave its streams running). */
  readonly #watches = new Set<() => void>();

  constructor(options: ClientOptions = {}) {
    this.address = resolveAddress(options.address);
    // Read now: a bad timeout fails the constructor with InvalidArgument, not the first call.
    toMillis(options.timeout, "timeout");
    this.timeout = options.timeout;
    if (options.retry !== undefined && typeof options.retry !== "boolean") {
      throw new TypeError(`retry must be true or false, not ${JSON.stringify(options.retry)}`);
    }
    this.retry = options.retry ?? true;
    this.retryBudget = checkRetryBudget(options.retryBudget);
    this.#token = resolveToken(options, API_TOKEN_ENV);
    this.#tls = resolveTls(options);
    channelCredentials(this.#tls); // unusable files throw here; read again for each channel
    this.#tracing = new Tracing(options.tracerProvider);
    this.#addon = nativeCore();
    this.#scheduler = new Scheduler(
      () => this.#transport(),
      () => this.timeout,
      this.#tracing,
    );
  }

  #getCaller(): Caller {
    this.#caller ??= new Caller(undefined, this.#tracing, this.retry, this.#transport());
    return this.#caller;
  }

  /**
   * Every RPC's transport: the native core when it loaded (core.ts), with no
   * grpc-js channel at all; else a grpc-js stub. Made at first use.
   */
  #transport(): CallTransport {
    const addon = this.#addon;
    if (addon !== undefined) {
      if (this.#native === undefined) {
        const connect = { address: this.address, ...tlsBytes(this.#tls) };
        const budget = this.retryBudget === false ? null : { ...this.retryBudget };
        this.#native = new NativeCalls((wake) => new addon.NativeClient(connect, wake, budget), tokenMetadata(this.#token));
      }
      return this.#native;
    }
    const stub = this.#grpcStub();
    // A budget per connection: a closed client's next calls start with a full one.
    this.#stubCalls ??= stubTransport(stub, this.retryBudget);
    return this.#stubCalls;
  }

  /**
   * The client's grpc-js channel, made at first use: every RPC's on the
   * @grpc/grpc-js core; on the native core, whose client has no server
   * streams, only the watches'.
   */
  #grpcStub(): ActorClientClient {
    this.#stub ??= new ActorClientClient(grpcTarget(this.address), channelCredentials(this.#tls), {
      ...CHANNEL_OPTIONS,
      ...tokenClientOptions(this.#token),
    });
    return this.#stub;
  }

  #options(options: TellOptions | undefined): TellOptions {
    return { ...options, timeout: options?.timeout ?? this.timeout };
  }

  /** Close the connection; in-flight calls fail and watches end. The client re-connects if used again. */
  close(): void {
    const stub = this.#stub;
    const native = this.#native;
    this.#stub = undefined;
    this.#stubCalls = undefined;
    this.#caller = undefined;
    this.#native = undefined;
    for (const end of [...this.#watches]) end();
    stub?.close();
    native?.close();
  }

  /** For `using client = new Client()`. */
  [Symbol.dispose](): void {
    this.close();
  }

  /**
   * A handle on one actor. Typed by the actor class, either given as a type
   * parameter (`client.actor<Counter>("counter", "c1")`) or as the class itself
   * (`client.actor(Counter, "c1")`, which also reads the type name from `@actor`).
   */
  actor<A extends ActorInstance>(cls: ActorClass<A>, id: string, options?: HandleOptions): ActorHandle<A>;
  actor<A = UntypedActor>(type: string, id: string, options?: HandleOptions): ActorHandle<A>;
  actor<A>(typeOrClass: string | ActorClass, id: string, options?: HandleOptions): ActorHandle<A> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    const opts = this.#options(handleOptions(options));
    toMillis(opts.timeout, "timeout"); // a bad timeout fails here, not at the handle's first call
    return makeHandle<A>(
      type,
      id,
      (m, args, kw) => this.#getCaller().invoke(type, id, m, args, kw, opts),
      (m, args, kw) => this.#getCaller().tell(type, id, m, args, kw, opts),
    );
  }

  /**
   * Call `method` on the actor and return its result.
   *
   * `params` is an array of positional arguments, a plain object of keyword
   * arguments, one Uint8Array sent raw, or nothing; `kwargs` adds keyword
   * arguments to positional ones. The actor is activated on first use. Rejects
   * with {@link ActorError} if the method threw, and the other {@link TroupeError}
   * subclasses for failures of the call itself.
   *
   * Sent with `options.idempotencyKey`, else a fresh key, and retried on
   * UNAVAILABLE (and a marked overload) with that key (see {@link ClientOptions.retry}).
   */
  invoke(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options?: CallOptions,
  ): Promise<unknown> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#getCaller().invoke(type, id, method, args, kw, this.#options(options));
  }

  /**
   * Queue a call and return once the actor's mailbox accepted it; the result is
   * dropped. With `{ durable: true }` it returns once the call is stored in the
   * actor's inbox, from where it is delivered at least once (see {@link TellOptions}).
   * Keyed and retried as {@link Client.invoke}: a durable tell retried with its
   * key is stored once. With `{ delay: "10m" }` the call is delivered that long
   * from now, with `{ at }` at that time by the daemon's clock, and this resolves to
   * the name of the reminder it waits as (null without either).
   */
  tell(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options?: TellOptions,
  ): Promise<string | null> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#getCaller().tell(type, id, method, args, kw, this.#options(options));
  }

  /**
   * Read an actor's state without running a turn: the JSON-decoded values of
   * `keys` (every key if empty), or the stored bytes with `{ raw: true }`.
   * Missing keys are absent from the result, and so are expired ones (see
   * `State.set`'s `ttl`); {@link Client.getStateExpiry} says when the others expire.
   */
  getState(type: string, id: string, keys: readonly string[], options: GetStateOptions & { raw: true }): Promise<Record<string, Uint8Array>>;
  getState<S extends object = Record<string, unknown>>(
    type: string,
    id: string,
    keys?: readonly string[],
    options?: GetStateOptions,
  ): Promise<Partial<S>>;
  getState(type: string, id: string, keys: readonly string[] = [], options: GetStateOptions = {}): Promise<Record<string, unknown>> {
    return this.#getCaller().getState(type, id, keys, { raw: options.raw, timeout: options.timeout ?? this.timeout, signal: options.signal });
  }

  /**
   * When an actor's state keys that expire (`this.state.set(key, value, { ttl })`)
   * do so, by the daemon's clock: for each of `keys` (every key if empty) that has
   * an expiry. Keys that do not expire, missing keys and expired ones are absent.
   *
   * ```ts
   * await client.getStateExpiry("session", "s1"); // { token: 2026-01-05T10:30:00.000Z }
   * ```
   */
  getStateExpiry(type: string, id: string, keys: readonly string[] = [], options: GetStateExpiryOptions = {}): Promise<Record<string, Date>> {
    return this.#getCaller().getStateExpiry(type, id, keys, { timeout: options.timeout ?? this.timeout, signal: options.signal });
  }

  /**
   * Watch the events an actor publishes (`this.ctx.publish(value)` in its
   * turns), from this call on: resolves once the daemon watches the actor, so
   * every event published after that is in the stream, in the order published.
   * `T` types the events' values (JSON-decoded, as a method's result).
   *
   * ```ts
   * const stream = await client.watch<Position>("bus", "b7");
   * for await (const { value, cursor } of stream) show(value); // break, or stream.close(), to stop
   * // later, resuming after the last event seen:
   * const again = await client.watch<Position>("bus", "b7", { after: cursor });
   * ```
   *
   * Events are live, not stored: a watch sees those published while it
   * watches; with `after` it first gets those the daemon still holds (the last
   * 256 per actor, for a while after the last watcher left), and
   * `missedBefore` marks an event when some before it did not reach the
   * watcher. Watching does not activate the actor. A turn that fails publishes
   * nothing. The client's `timeout` does not apply: a watch lasts until it is
   * closed, the client is closed, `signal` aborts, or the daemon ends it (the
   * iteration then throws). Rejects with {@link InvalidArgument} for a bad type,
   * id or cursor, and as other calls for the rest ({@link Unavailable},
   * {@link Unauthenticated}...).
   *
   * With `{ reconnect: true }` the watch outlives a daemon restart or a broken
   * connection: once it began, a stream that fails with {@link Unavailable} or
   * that the daemon ends is opened again by itself after the last event's
   * cursor (100 ms doubling to 5 s between attempts, jittered, back to 100 ms
   * once an event comes or a stream stays open 5 s, until it is closed), and the iteration throws only other errors. The first event after
   * a re-open that may have lost some says `missedBefore`. The first open is
   * not retried: this still rejects when the daemon cannot be reached.
   *
   * ```ts
   * const live = await client.watch<Position>("bus", "b7", { reconnect: true });
   * for await (const e of live) show(e.value); // goes on across daemon restarts
   * ```
   */
  watch<T = unknown>(actorType: TypeOrClass, actorId: string, options: WatchOptions = {}): Promise<ActorEventStream<T>> {
    // On the native core too, grpc-js carries the stream: the addon's client has no server streams.
    return openWatch<T>(this.#grpcStub(), { type: typeName(actorType), id: actorId }, options, this.#watches);
  }

  /**
   * Watch the events every actor of a type publishes, on every daemon that
   * hosts it, from this call on: {@link Client.watch} for all the type's
   * actors at once (a map of every bus). Each event's `actorType` and
   * `actorId` name the actor that published it; one actor's events arrive in
   * the order it published them, different actors' interleaved as they come.
   * The stream's `actor` is the type name. Resolves once the daemon watches the
   * type.
   *
   * ```ts
   * const events = await client.watchType<Position>("bus");
   * for await (const e of events) show(e.actorId, e.value); // break, or events.close(), to stop
   * // later, resuming after the last event seen (a cursor of this type's watch):
   * const again = await client.watchType<Position>("bus", { after: lastCursor });
   * // one tenant's carts only, left out by each daemon before they travel:
   * const carts = await client.watchType("cart", { idPrefix: "tenant-42/" });
   * ```
   *
   * As {@link Client.watch} otherwise: live, not stored (with `after`, each
   * daemon first sends what it still holds of the type's recent events, and
   * `missedBefore` marks an event when some before it did not reach the
   * watcher); it activates no actor; the client's `timeout` does not apply;
   * `close()`, `signal`, and the client's `close()` end it; `{ reconnect: true }`
   * re-opens it after a daemon restart or a broken connection (keeping its
   * `idPrefix`). Rejects with
   * {@link InvalidArgument} for an empty type, a bad cursor or an `idPrefix`
   * longer than any id,
   * {@link NotFound} for a type no app registered, and as other calls for
   * the rest.
   */
  watchType<T = unknown>(actorType: TypeOrClass, options: WatchTypeOptions = {}): Promise<ActorEventStream<T>> {
    // grpc-js carries the stream on the native core too, as for watch().
    const target = { type: typeName(actorType), idPrefix: options.idPrefix };
    return openWatch<T>(this.#grpcStub(), target, options, this.#watches);
  }

  /**
   * Set (or replace) the durable reminder `name` of an actor: it fires the
   * actor's `onReminder(name, data)`, activating the actor if needed, and
   * survives daemon restarts.
   *
   * ```ts
   * await client.setReminder("invoice", "i1", "remind", { due: "90s", period: "1h", repeat: 3, data: { n: 1 } });
   * ```
   *
   * Rejects with {@link InvalidArgument} for a bad name, due time or period.
   */
  setReminder(actorType: TypeOrClass, actorId: string, name: string, options: ReminderOptions = {}): Promise<Reminder> {
    return this.#scheduler.setReminder(typeName(actorType), actorId, name, options);
  }

  /** An actor's reminder `name`, or null if it has none of that name. */
  getReminder(actorType: TypeOrClass, actorId: string, name: string): Promise<Reminder | null> {
    return this.#scheduler.getReminder(typeName(actorType), actorId, name);
  }

  /** Delete an actor's reminder `name`; resolves to whether it existed. */
  deleteReminder(actorType: TypeOrClass, actorId: string, name: string): Promise<boolean> {
    return this.#scheduler.deleteReminder(typeName(actorType), actorId, name);
  }

  /**
   * Hold an actor's reminder `name`, keeping its schedule, until `resumeReminder`;
   * setting it again keeps it paused. Resolves to it, or null if there is none.
   */
  pauseReminder(actorType: TypeOrClass, actorId: string, name: string): Promise<Reminder | null> {
    return this.#scheduler.pauseReminder(typeName(actorType), actorId, name);
  }

  /**
   * Let a paused reminder fire again from when it was due (past that, its `missed`
   * rule applies). Resolves to it, or null if there is none.
   */
  resumeReminder(actorType: TypeOrClass, actorId: string, name: string): Promise<Reminder | null> {
    return this.#scheduler.resumeReminder(typeName(actorType), actorId, name);
  }

  /**
   * Reminders (alarms included, with `alarm: true`) of every actor, of one actor
   * type (`{ actorType }`) or of one actor (`{ actorType, actorId }`); pages
   * through ListReminders until the end.
   */
  listReminders(options: ListRemindersOptions = {}): Promise<Reminder[]> {
    return this.#scheduler.listReminders(options);
  }

  /** Set (or replace) an actor's alarm: its `onAlarm(data)` runs at `at` (RFC 3339, Date, or a duration from now). */
  setAlarm(actorType: TypeOrClass, actorId: string, at: ScheduleTime, options: AlarmOptions = {}): Promise<Reminder> {
    return this.#scheduler.setAlarm(typeName(actorType), actorId, at, options);
  }

  /** An actor's alarm, or null if none is set. */
  getAlarm(actorType: TypeOrClass, actorId: string): Promise<Reminder | null> {
    return this.#scheduler.getAlarm(typeName(actorType), actorId);
  }

  /** Delete an actor's alarm; resolves to whether there was one. */
  deleteAlarm(actorType: TypeOrClass, actorId: string): Promise<boolean> {
    return this.#scheduler.deleteAlarm(typeName(actorType), actorId);
  }

  /**
   * Set an in-memory timer on an active actor (its `onTimer(name, data)`).
   * Rejects with {@link FailedPrecondition} when the actor is not active:
   * timers are usually set from inside a turn with `this.ctx.setTimer`.
   */
  setTimer(actorType: TypeOrClass, actorId: string, name: string, options: TimerOptions = {}): Promise<void> {
    return this.#scheduler.setTimer(typeName(actorType), actorId, name, options);
  }

  /** Delete an actor's timer `name`; resolves to whether it existed. */
  deleteTimer(actorType: TypeOrClass, actorId: string, name: string): Promise<boolean> {
    return this.#scheduler.deleteTimer(typeName(actorType), actorId, name);
  }
}
