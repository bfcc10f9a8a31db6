// Calling actors from any program.
import * as grpc from "@grpc/grpc-js";
import { type ActorClass, type ActorInstance, actorTypeName } from "./actor.js";
import { CHANNEL_OPTIONS, grpcTarget, resolveAddress } from "./address.js";
import {
  type ActorHandle,
  type CallOptions,
  Caller,
  type GetStateOptions,
  makeHandle,
  type Params,
  splitParams,
  type UntypedActor,
} from "./caller.js";
import type { Duration } from "./duration.js";
import { ActorClientClient } from "./gen/troupe/v1/client.js";

/** Options of {@link Client}. */
export interface ClientOptions {
  /** Daemon address; defaults to `$TROUPE_ADDR`, then `127.0.0.1:7420`. */
  address?: string;
  /** Default deadline of every call; none waits as long as the daemon lets the call run. */
  timeout?: Duration;
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
 */
export class Client {
  /** The daemon address this client talks to. */
  readonly address: string;
  /** Default deadline of every call. */
  readonly timeout: Duration | undefined;
  #stub: ActorClientClient | undefined;
  #caller: Caller | undefined;

  constructor(options: ClientOptions = {}) {
    this.address = resolveAddress(options.address);
    this.timeout = options.timeout;
  }

  #getCaller(): Caller {
    if (this.#caller === undefined) {
      this.#stub = new ActorClientClient(grpcTarget(this.address), grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
      this.#caller = new Caller(this.#stub);
    }
    return this.#caller;
  }

  #options(options: CallOptions | undefined): CallOptions {
    return { timeout: options?.timeout ?? this.timeout, metadata: options?.metadata };
  }

  /** Close the connection; in-flight calls fail. The client re-connects if used again. */
  close(): void {
    const stub = this.#stub;
    this.#stub = undefined;
    this.#caller = undefined;
    stub?.close();
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
  actor<A extends ActorInstance>(cls: ActorClass<A>, id: string, options?: CallOptions): ActorHandle<A>;
  actor<A = UntypedActor>(type: string, id: string, options?: CallOptions): ActorHandle<A>;
  actor<A>(typeOrClass: string | ActorClass, id: string, options?: CallOptions): ActorHandle<A> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    const opts = this.#options(options);
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

  /** Queue a call and return once the actor's mailbox accepted it; the result is dropped. */
  tell(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options?: CallOptions,
  ): Promise<void> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#getCaller().tell(type, id, method, args, kw, this.#options(options));
  }

  /**
   * Read an actor's state without running a turn: the JSON-decoded values of
   * `keys` (every key if empty), or the stored bytes with `{ raw: true }`.
   * Missing keys are absent from the result.
   */
  getState(type: string, id: string, keys: readonly string[], options: GetStateOptions & { raw: true }): Promise<Record<string, Uint8Array>>;
  getState<S extends object = Record<string, unknown>>(
    type: string,
    id: string,
    keys?: readonly string[],
    options?: GetStateOptions,
  ): Promise<Partial<S>>;
  getState(type: string, id: string, keys: readonly string[] = [], options: GetStateOptions = {}): Promise<Record<string, unknown>> {
    return this.#getCaller().getState(type, id, keys, { raw: options.raw, timeout: options.timeout ?? this.timeout });
  }
}
