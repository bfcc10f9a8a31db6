// `this.ctx`: what an actor can do beyond its own state.
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import { type ActorClass, type ActorInstance, actorTypeName } from "./actor.js";
import { type ActorHandle, type CallOptions, type Caller, makeHandle, type Params, splitParams, type UntypedActor } from "./caller.js";
import type { ActorRef, CallChain } from "./gen/troupe/v1/common.js";

/**
 * @internal The call chain of the turn running in the current async context. Each
 * turn runs in its own context, so concurrent turns of different actors never
 * see each other's chain, and work a turn starts inherits it.
 */
export const currentChain = new AsyncLocalStorage<CallChain | undefined>();

function newChainId(): string {
  return randomUUID().replaceAll("-", "");
}

/**
 * Calls to other actors made from inside a turn. Calls carry the turn's call
 * chain with this actor appended, so the daemon can allow re-entry for reentrant
 * types and detect deadlock cycles for the others.
 */
export class Context {
  readonly #caller: Caller;
  readonly #self: ActorRef;

  /** @internal */
  constructor(caller: Caller, type: string, id: string) {
    this.#caller = caller;
    this.#self = { type, id };
  }

  #chain(): CallChain {
    const incoming = currentChain.getStore();
    if (incoming === undefined) return { id: newChainId(), actors: [this.#self] };
    return { id: incoming.id === "" ? newChainId() : incoming.id, actors: [...incoming.actors, this.#self] };
  }

  /** A handle on another actor: `await this.ctx.actor<Counter>("counter", "c2").call("incr", 1)`. */
  actor<A extends ActorInstance>(cls: ActorClass<A>, id: string, options?: CallOptions): ActorHandle<A>;
  actor<A = UntypedActor>(type: string, id: string, options?: CallOptions): ActorHandle<A>;
  actor<A>(typeOrClass: string | ActorClass, id: string, options: CallOptions = {}): ActorHandle<A> {
    const type = typeof typeOrClass === "string" ? typeOrClass : actorTypeName(typeOrClass);
    return makeHandle<A>(
      type,
      id,
      (m, args, kw) => this.#caller.invoke(type, id, m, args, kw, options, this.#chain()),
      (m, args, kw) => this.#caller.tell(type, id, m, args, kw, options, this.#chain()),
    );
  }

  /** Call a method on another actor and return its result (see {@link Client.invoke}). */
  invoke(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options: CallOptions = {},
  ): Promise<unknown> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#caller.invoke(type, id, method, args, kw, options, this.#chain());
  }

  /** Queue a call on another actor without waiting for its result. */
  tell(
    type: string,
    id: string,
    method: string,
    params?: Params,
    kwargs?: Readonly<Record<string, unknown>>,
    options: CallOptions = {},
  ): Promise<void> {
    const [args, kw] = splitParams(params, kwargs);
    return this.#caller.tell(type, id, method, args, kw, options, this.#chain());
  }
}
