// The calls shared by Client and an actor's Context: invoke, tell, getState, and
// the transport every ActorClient RPC goes through (CallTransport).
import * as grpc from "@grpc/grpc-js";
import type { Actor } from "./actor.js";
import { type Duration, toMillis } from "./duration.js";
import { fromRpcError, InvalidArgument } from "./errors.js";
import {
  type ActorClientClient,
  ActorClientService,
  type GetStateResponse,
  type InvokeRequest,
  type InvokeResponse,
  type TellRequest,
  type TellResponse,
} from "./gen/troupe/v1/client.js";
import { type CallChain, Delivery } from "./gen/troupe/v1/common.js";
import { decodeResult, decodeState, encodeCall, Kwargs, splitArgs } from "./payload.js";
import {
  callKey,
  checkKeyType,
  DEFAULT_RETRY_BUDGET,
  madeKeyRetentionMs,
  passedKeyRetentionMs,
  type RetryBudget,
  RetryThrottle,
  sendWithRetries,
} from "./retry.js";
import { toWireInstant } from "./schedule.js";
import { Tracing } from "./tracing.js";
import { callDeadline, type CallStop, callStop, chainForCall } from "./turn.js";


/** Options of one call. */
export interface CallOptions {
  /**
   * Deadline of the call (seconds, or a string: "500ms", "5s", "PT1M"...); becomes
   * the gRPC deadline, and bounds the retries of an invoke or tell.
   */
  timeout?: Duration;
  /** Delivered to the actor with the call (the turn's `metadata`). */
  metadata?: Readonly<Record<string, string>>;
  /**
   * Names this logical call (1 to 256 bytes of printable UTF-8) for `invoke` and
   * `tell`; left out, the SDK sends a fresh UUID. Every retry of the call resends
   * it, and a daemon that records keys answers a call with a key it has seen with
   * the recorded answer instead of running the method again. Pass your own to
   * make a call you repeat yourself (e.g. after your process restarted) count
   * once. Not for handles, whose calls each need their own.
   */
  idempotencyKey?: string;
  /**
   * How long you may send `idempotencyKey` again (only with it): the daemon keeps
   * the call's answer that long, at least a minute and at most its
   * `--idempotency-retention` (a day by default). Left out, the answer keeps the
   * daemon's whole retention. A shorter one spares the daemon's store and memory
   * when your own resends end sooner, e.g. with a job's retries.
   */
  idempotencyRetention?: Duration;
  /**
   * Aborting it ends the call: the promise rejects with the signal's reason, and
   * the daemon cancels the actor's turn if it is running (its `ctx.signal` aborts).
   * Calls made while a turn runs also end when that turn is cancelled, with
   * {@link TurnCancelled}: a cancelled turn cancels the turns it waits on.
   */
  signal?: AbortSignal;
}

/**
 * Options of `tell` (and of a handle, for its tells).
 */
export interface TellOptions extends CallOptions {
  /**
   * `true`: resolve once the call is stored in the actor's inbox, from where it is
   * delivered at least once, in order per caller, across crashes, restarts and
   * hand-offs; its state changes apply once (docs/delivery.md). `false`: best
   * effort. Left out: the actor type's `durableTells` option decides.
   */
  durable?: boolean;
  /**
   * Deliver the call this long from now (`"10m"`, milliseconds, ...) instead of at
   * once: it is stored at once and waits as a reminder of the actor, whose name
   * `tell` then resolves to (`"$tell:"` and its idempotency key; `deleteReminder`
   * with it cancels the tell, `getReminder` reads it), and is delivered as a durable
   * tell when due. A retry with the same `idempotencyKey` keeps the one that waits.
   * Cannot be combined with `durable: false`.
   */
  delay?: Duration;
  /**
   * Deliver the call at this time (a `Date`, or an RFC 3339 string) instead of at
   * once, read against the daemon's clock (the test kit's clock under
   * `@troupe/sdk/testing`); otherwise as `delay`. A time already past delivers it at
   * once. Not with `delay`.
   */
  at?: Date | string;
}

/** Options of a handle (`client.actor(...)`, `ctx.actor(...)`): those of its calls, each with its own key. */
export type HandleOptions = Omit<TellOptions, "idempotencyKey" | "idempotencyRetention" | "delay" | "at">;

/**
 * @internal A handle's options, refusing a key: one key on every call of the
 * handle would make the daemon answer each of them with the first one's answer.
 */
export function handleOptions(options: HandleOptions | undefined): HandleOptions {
  // Read untyped: HandleOptions has no such field, but a JavaScript caller may pass one.
  for (const option of ["idempotencyKey", "idempotencyRetention"]) {
    if (options !== undefined && Reflect.get(options, option) !== undefined) {
      throw new InvalidArgument(
        `${option}: an idempotency key names one call, so a handle, whose calls are many, cannot take one: pass it to invoke() or tell() instead`,
      );
    }
  }
  for (const option of ["delay", "at"]) {
    if (options !== undefined && Reflect.get(options, option) !== undefined) {
      throw new InvalidArgument(`${option}: a handle's options apply to all its calls, invokes too, which cannot wait: pass it to tell() instead`);
    }
  }
  return options ?? {};
}

/** The wire delivery mode of `durable`. */
function delivery(durable: boolean | undefined): Delivery {
  if (durable === undefined) return Delivery.DELIVERY_UNSPECIFIED;
  return durable ? Delivery.DELIVERY_DURABLE : Delivery.DELIVERY_BEST_EFFORT;
}

/** Options of getState. */
export interface GetStateOptions {
  /** Return the stored bytes instead of JSON-decoded values. */
  raw?: boolean;
  timeout?: Duration;
  /** Aborting it ends the read, which rejects with the signal's reason (see {@link CallOptions.signal}). */
  signal?: AbortSignal;
}

/** Options of getStateExpiry. */
export interface GetStateExpiryOptions {
  timeout?: Duration;
  /** Aborting it ends the read, which rejects with the signal's reason (see {@link CallOptions.signal}). */
  signal?: AbortSignal;
}

/**
 * Arguments of `invoke`/`tell`: an array of positional arguments, a plain object
 * of keyword arguments (as a Python dict), one Uint8Array sent raw, or nothing.
 */
export type Params = readonly unknown[] | Uint8Array | Kwargs | Readonly<Record<string, unknown>> | undefined;

declare const untypedBrand: unique symbol;
/** The actor type parameter of a handle whose actor class is not known. */
export interface UntypedActor {
  readonly [untypedBrand]: true;
}

type BaseMember = keyof Actor;
type AnyFn = (...args: never[]) => unknown;

/** Names of the callable methods of actor class `A` (any string when untyped). */
export type MethodName<A> = A extends UntypedActor
  ? string
  : { [K in keyof A]: K extends BaseMember ? never : A[K] extends AnyFn ? K : never }[keyof A] & string;

/**
 * The argument list `P`, or with its last (object) argument sent as keyword
 * arguments: `kwargs({...})`. A TS actor receives both the same way; a Python
 * actor needs the keyword form for `def m(self, a, b)`.
 */
export type WithKwargs<P extends unknown[]> = P extends [...infer Init, infer Last] ? (Last extends object ? P | [...Init, Kwargs<Last>] : P) : P;

/** Argument list of method `M` of `A` (anything when untyped). */
export type MethodArgs<A, M> = A extends UntypedActor
  ? unknown[]
  : M extends keyof A
    ? A[M] extends (...args: infer P) => unknown
      ? WithKwargs<P>
      : never
    : never;

/** Result of method `M` of `A` (`unknown` when untyped). */
export type MethodResult<A, M> = A extends UntypedActor
  ? unknown
  : M extends keyof A
    ? A[M] extends (...args: never[]) => infer R
      ? Awaited<R>
      : never
    : never;

/**
 * A handle on one actor. With the actor class as type parameter, method names,
 * arguments and results are checked: `client.actor<Counter>("counter", "c1").call("incr", 5)`.
 */
export interface ActorHandle<A = UntypedActor> {
  readonly type: string;
  readonly id: string;
  /** Invoke `method` with positional arguments (end with `kwargs({...})` for keyword ones). */
  call<M extends MethodName<A>>(method: M, ...args: MethodArgs<A, M>): Promise<MethodResult<A, M>>;
  /**
   * Queue a call and return once the actor's mailbox accepted it (with the handle's
   * `durable: true`, once it is stored in the actor's inbox); the result is dropped.
   */
  tell<M extends MethodName<A>>(method: M, ...args: MethodArgs<A, M>): Promise<void>;
}

function isBytes(v: unknown): v is Uint8Array {
  return v instanceof Uint8Array;
}

/** @internal A dict means keyword arguments, an array positional ones, bytes one raw argument. */
export function splitParams(
  params: Params,
  kw: Readonly<Record<string, unknown>> | undefined,
): [readonly unknown[], Readonly<Record<string, unknown>>] {
  let args: readonly unknown[];
  let named: Readonly<Record<string, unknown>> = {};
  if (params === undefined) args = [];
  else if (isBytes(params)) args = [params];
  else if (Array.isArray(params)) [args, named] = splitArgs(params as readonly unknown[]);
  else if (params instanceof Kwargs) [args, named] = [[], params.values];
  else [args, named] = [[], params as Readonly<Record<string, unknown>>];
  if (kw !== undefined && Object.keys(kw).length > 0) {
    if (Object.keys(named).length > 0) throw new TypeError("keyword arguments given twice (params object and kwargs)");
    named = kw;
  }
  return [args, named];
}

function deadline(timeout: Duration | undefined, what: string): Partial<grpc.CallOptions> {
  return callDeadline(toMillis(timeout, "timeout"), what);
}

/** What stops a call made now with `signal`; throws its reason if it already did, so nothing is sent. */
function stopped(signal: AbortSignal | undefined): CallStop | undefined {
  const stop = callStop(signal);
  if (stop?.reason !== undefined) throw stop.reason;
  return stop;
}

/** The absolute deadline (unix ms) in call options, if any. */
function deadlineMs(options: Partial<grpc.CallOptions>): number | undefined {
  const d = options.deadline;
  return d === undefined ? undefined : d instanceof Date ? d.getTime() : d;
}

/** @internal How an invoke or tell is keyed and retried, and named in its errors. */
export interface Keyed {
  /** The caller's idempotency key; undefined: a fresh one. */
  key: string | undefined;
  /** Resend on UNAVAILABLE, or a RESOURCE_EXHAUSTED with a retry pushback, while the deadline leaves time. */
  retry: boolean;
  /** The call, for error messages: "invoke counter/c1.incr". */
  what: string;
}

/** @internal One of the ActorClient's unary methods, as ts-proto describes it for grpc-js. */
export type UnaryMethod<Req, Resp> = grpc.MethodDefinition<Req, Resp>;

/**
 * @internal How the ActorClient RPCs reach the daemon: a grpc-js stub
 * (stubTransport, with the keys and retries of retry.ts) or the native core
 * (native_calls.ts, whose core keys and retries invoke and tell itself).
 */
export interface CallTransport {
  /** Invoke with its key and retries; rejects with the SDK's error (TroupeError), or with `stop`'s reason once it stopped the call. */
  invoke(request: InvokeRequest, md: grpc.Metadata, options: Partial<grpc.CallOptions>, keyed: Keyed, stop?: CallStop): Promise<InvokeResponse>;
  /** Tell, as invoke. */
  tell(request: TellRequest, md: grpc.Metadata, options: Partial<grpc.CallOptions>, keyed: Keyed, stop?: CallStop): Promise<TellResponse>;
  /** One of the rarer RPCs, sent once; rejects with a grpc.ServiceError (or an error shaped like one), or with `stop`'s reason. */
  unary<Req, Resp>(method: UnaryMethod<Req, Resp>, request: Req, md: grpc.Metadata, options: Partial<grpc.CallOptions>, stop?: CallStop): Promise<Resp>;
}

/**
 * @internal The ActorClient RPCs on a grpc-js stub; invoke and tell keyed and
 * retried here (retry.ts), all within one retry budget (`retryBudget`, false:
 * none): one per transport, so per channel, as gRPC throttles.
 */
export function stubTransport(stub: ActorClientClient, retryBudget: Readonly<Required<RetryBudget>> | false = DEFAULT_RETRY_BUDGET): CallTransport {
  const throttle = retryBudget === false ? undefined : new RetryThrottle(retryBudget);
  const unary = <Req, Resp>(method: UnaryMethod<Req, Resp>, request: Req, md: grpc.Metadata, options: Partial<grpc.CallOptions>, stop?: CallStop): Promise<Resp> =>
    new Promise<Resp>((resolve, reject) => {
      if (stop?.reason !== undefined) {
        reject(stop.reason);
        return;
      }
      let stopped = false;
      const call = stub.makeUnaryRequest(method.path, method.requestSerialize, method.responseDeserialize, request, md, options, (err: grpc.ServiceError | null, r?: Resp) => {
        forget();
        if (stopped) return;
        if (err !== null) reject(err);
        else if (r === undefined) reject(new Error(`${method.path}: no answer and no error`));
        else resolve(r);
      });
      // Cancelling resets the call's stream: the daemon sees its caller leave.
      const forget =
        stop?.listen((reason) => {
          stopped = true;
          reject(reason);
          call.cancel();
        }) ?? (() => undefined);
    });
  // A key made here was never sent, so the first attempt says so (the daemon
  // then need not look for it); a retry's may be recorded by now. No one but
  // these retries sends it, so its answer need not outlive them by much; a
  // caller's key keeps what the caller asked (Caller).
  const attempts = <T extends { idempotencyKey: string; newKey: boolean; keyRetentionMs: bigint }>(
    request: T,
    keyed: Keyed,
    options: Partial<grpc.CallOptions>,
  ): (() => T) => {
    const made = keyed.key === undefined;
    const until = deadlineMs(options);
    const keyRetentionMs = made ? madeKeyRetentionMs(until === undefined ? undefined : until - Date.now()) : request.keyRetentionMs;
    let next: T = { ...request, idempotencyKey: callKey(keyed.key), newKey: made, keyRetentionMs };
    return () => {
      const req = next;
      next = { ...req, newKey: false };
      return req;
    };
  };
  return {
    invoke: async (request, md, options, keyed, stop) => {
      const req = attempts(request, keyed, options);
      // A copy of the metadata per attempt: interceptors may edit what they are given.
      return sendWithRetries(() => unary(ActorClientService.invoke, req(), md.clone(), options, stop), deadlineMs(options), { ...keyed, throttle, stop });
    },
    tell: async (request, md, options, keyed, stop) => {
      const req = attempts(request, keyed, options);
      return sendWithRetries(() => unary(ActorClientService.tell, req(), md.clone(), options, stop), deadlineMs(options), { ...keyed, throttle, stop });
    },
    unary,
  };
}

/**
 * @internal Issues ActorClient RPCs through a CallTransport. An RPC made while
 * a turn runs (in its async context) is made on the turn's behalf: invoke and
 * tell carry its call chain, and every RPC's deadline is cut to the turn's
 * caller's (turn.ts).
 *
 * Invoke and tell carry an idempotency key, the caller's or a fresh one per
 * call, and with `retry` are resent with the same key and deadline on
 * UNAVAILABLE while the deadline leaves time and the transport's retry budget
 * allows. getState is sent once.
 */
export class Caller {
  readonly #calls: CallTransport;
  readonly #tracing: Tracing;
  readonly #retry: boolean;

  /** `calls` carries every RPC (default: on `stub`, which may then be undefined only if `calls` is given). */
  constructor(stub: ActorClientClient | undefined, tracing: Tracing = new Tracing(), retry = true, calls?: CallTransport) {
    if (calls === undefined && stub === undefined) throw new Error("a Caller needs a stub or a CallTransport");
    this.#calls = calls ?? stubTransport(stub as ActorClientClient);
    this.#tracing = tracing;
    this.#retry = retry;
  }

  // async: a bad key, timeout or payload rejects the call's promise, never throws.
  async invoke(
    type: string,
    id: string,
    method: string,
    args: readonly unknown[],
    kw: Readonly<Record<string, unknown>>,
    options: CallOptions,
    chain?: CallChain,
  ): Promise<unknown> {
    const what = `invoke ${type}/${id}.${method}`;
    const keyed = { key: checkKeyType(options.idempotencyKey), retry: this.#retry, what };
    const callOptions = deadline(options.timeout, what);
    const stop = stopped(options.signal);
    const keyRetentionMs = passedKeyRetentionMs(keyed.key, options.idempotencyRetention);
    const request = { actor: { type, id }, method, payload: encodeCall(args, kw), metadata: { ...options.metadata }, chain: chain ?? chainForCall(), idempotencyKey: "", newKey: false, keyRetentionMs };
    // One span for the logical call: its retries are not separate calls.
    return this.#tracing.call({ rpc: "Invoke", type, id, method }, async (md) => {
      const resp = await this.#calls.invoke(request, md, callOptions, keyed, stop);
      return decodeResult(resp.payload);
    });
  }

  async tell(
    type: string,
    id: string,
    method: string,
    args: readonly unknown[],
    kw: Readonly<Record<string, unknown>>,
    options: TellOptions,
    chain?: CallChain,
  ): Promise<string | null> {
    const what = `tell ${type}/${id}.${method}`;
    const keyed = { key: checkKeyType(options.idempotencyKey), retry: this.#retry, what };
    const callOptions = deadline(options.timeout, what);
    const stop = stopped(options.signal);
    const delayMs = toMillis(options.delay, "delay") ?? 0;
    const deliverAt = toWireInstant(options.at, "at", "delay");
    if (options.delay !== undefined && options.at !== undefined) {
      throw new InvalidArgument(`${what}: give delay (from now) or at (a time), not both`);
    }
    if ((delayMs > 0 || deliverAt !== "") && options.durable === false) {
      throw new InvalidArgument(`${what}: a delayed tell is stored until it is due, so it cannot be best effort; leave durable unset (or true) with delay or at`);
    }
    const request = {
      actor: { type, id },
      method,
      payload: encodeCall(args, kw),
      metadata: { ...options.metadata },
      chain: chain ?? chainForCall(),
      delivery: delivery(options.durable),
      idempotencyKey: "",
      newKey: false,
      keyRetentionMs: passedKeyRetentionMs(keyed.key, options.idempotencyRetention),
      delayMs: BigInt(delayMs),
      deliverAt,
    };
    const answer = await this.#tracing.call({ rpc: "Tell", type, id, method }, (md) => this.#calls.tell(request, md, callOptions, keyed, stop));
    return answer.reminder === "" ? null : answer.reminder;
  }

  async getState(type: string, id: string, keys: readonly string[], options: GetStateOptions): Promise<Record<string, unknown>> {
    const resp = await this.#getState(type, id, keys, options, `getState ${type}/${id}`);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(resp.entries)) out[k] = options.raw === true ? new Uint8Array(v) : decodeState(v);
    return out;
  }

  async getStateExpiry(type: string, id: string, keys: readonly string[], options: GetStateExpiryOptions): Promise<Record<string, Date>> {
    const resp = await this.#getState(type, id, keys, options, `getStateExpiry ${type}/${id}`);
    const out: Record<string, Date> = {};
    for (const [k, ms] of Object.entries(resp.expiresUnixMs)) out[k] = new Date(Number(ms));
    return out;
  }

  #getState(type: string, id: string, keys: readonly string[], options: GetStateExpiryOptions, what: string): Promise<GetStateResponse> {
    const callOptions = deadline(options.timeout, what);
    const stop = stopped(options.signal);
    return this.#tracing.call({ rpc: "GetState", type, id }, async (md) => {
      try {
        return await this.#calls.unary(ActorClientService.getState, { actor: { type, id }, keys: [...keys] }, md, callOptions, stop);
      } catch (err) {
        throw fromRpcError(err, what);
      }
    });
  }
}

type InvokeFn = (method: string, args: readonly unknown[], kw: Readonly<Record<string, unknown>>) => Promise<unknown>;

/** @internal */
export function makeHandle<A>(type: string, id: string, invoke: InvokeFn, tell: InvokeFn): ActorHandle<A> {
  const handle = {
    type,
    id,
    call(method: string, ...rest: unknown[]): Promise<unknown> {
      const [args, kw] = splitArgs(rest);
      return invoke(method, args, kw);
    },
    async tell(method: string, ...rest: unknown[]): Promise<void> {
      const [args, kw] = splitArgs(rest);
      await tell(method, args, kw);
    },
  };
  return handle as unknown as ActorHandle<A>;
}

