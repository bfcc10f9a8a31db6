// The calls shared by Client and an actor's Context: invoke, tell, getState.
import * as grpc from "@grpc/grpc-js";
import type { Actor } from "./actor.js";
import { type Duration, toMillis } from "./duration.js";
import { fromRpcError } from "./errors.js";
import type { ActorClientClient, GetStateResponse, InvokeResponse } from "./gen/troupe/v1/client.js";
import type { CallChain } from "./gen/troupe/v1/common.js";
import { decodeResult, decodeState, encodeCall, Kwargs, splitArgs } from "./payload.js";


/** Options of one call. */
export interface CallOptions {
  /** Deadline of the call (ms, or "500ms", "5s"...); becomes the gRPC deadline. */
  timeout?: Duration;
  /** Propagated to the actor with the call (e.g. `traceparent`). */
  metadata?: Readonly<Record<string, string>>;
}

/** Options of getState. */
export interface GetStateOptions {
  /** Return the stored bytes instead of JSON-decoded values. */
  raw?: boolean;
  timeout?: Duration;
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
  /** Queue a call and return once the actor's mailbox accepted it; the result is dropped. */
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

function deadline(timeout: Duration | undefined): Partial<grpc.CallOptions> {
  const ms = toMillis(timeout, "timeout");
  return ms === undefined ? {} : { deadline: Date.now() + ms };
}

/** @internal Issues ActorClient RPCs on a channel, optionally on behalf of a call chain. */
export class Caller {
  readonly #stub: ActorClientClient;

  constructor(stub: ActorClientClient) {
    this.#stub = stub;
  }

  invoke(
    type: string,
    id: string,
    method: string,
    args: readonly unknown[],
    kw: Readonly<Record<string, unknown>>,
    options: CallOptions,
    chain?: CallChain,
  ): Promise<unknown> {
    const payload = encodeCall(args, kw);
    return new Promise((resolve, reject) => {
      this.#stub.invoke(
        { actor: { type, id }, method, payload, metadata: { ...options.metadata }, chain },
        new grpc.Metadata(),
        deadline(options.timeout),
        (err: grpc.ServiceError | null, resp?: InvokeResponse) => {
          if (err !== null) reject(fromRpcError(err, `invoke ${type}/${id}.${method}`));
          else {
            try {
              resolve(decodeResult(resp?.payload));
            } catch (e) {
              reject(e instanceof Error ? e : new Error(String(e)));
            }
          }
        },
      );
    });
  }

  tell(
    type: string,
    id: string,
    method: string,
    args: readonly unknown[],
    kw: Readonly<Record<string, unknown>>,
    options: CallOptions,
    chain?: CallChain,
  ): Promise<void> {
    const payload = encodeCall(args, kw);
    return new Promise((resolve, reject) => {
      this.#stub.tell(
        { actor: { type, id }, method, payload, metadata: { ...options.metadata }, chain },
        new grpc.Metadata(),
        deadline(options.timeout),
        (err: grpc.ServiceError | null) => {
          if (err !== null) reject(fromRpcError(err, `tell ${type}/${id}.${method}`));
          else resolve();
        },
      );
    });
  }

  getState(type: string, id: string, keys: readonly string[], options: GetStateOptions): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      this.#stub.getState({ actor: { type, id }, keys: [...keys] }, new grpc.Metadata(), deadline(options.timeout), (err: grpc.ServiceError | null, resp?: GetStateResponse) => {
        if (err !== null) {
          reject(fromRpcError(err, `getState ${type}/${id}`));
          return;
        }
        const out: Record<string, unknown> = {};
        try {
          for (const [k, v] of Object.entries(resp?.entries ?? {})) out[k] = options.raw === true ? new Uint8Array(v) : decodeState(v);
        } catch (e) {
          reject(e instanceof Error ? e : new Error(String(e)));
          return;
        }
        resolve(out);
      });
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

