// Declaring actor types: the Actor base class and the @actor / @method decorators.
import type { Context } from "./context.js";
import { StateMode } from "./gen/troupe/v1/common.js";
import type { ActorTypeSpec } from "./gen/troupe/v1/app.js";
import { type Duration, toMillis } from "./duration.js";
import { declaredParams } from "./params.js";
import { State, type StateShape } from "./state.js";

/** How an actor type's state reaches storage (see PRODUCT.md). */
export type StateModeName = "write_behind" | "durable";

const STATE_MODES: Record<StateModeName, StateMode> = {
  write_behind: StateMode.STATE_MODE_WRITE_BEHIND,
  durable: StateMode.STATE_MODE_DURABLE,
};

interface Binding {
  id: string;
  state: State;
  ctx: Context | undefined;
}

// Set by the App right before it constructs an instance, so that `this.id`,
// `this.state` and `this.ctx` work in field initialisers and constructors too.
let pendingBinding: Binding | undefined;

/** @internal Construct an actor instance bound to its id, state and context. */
export function instantiate(cls: ActorClass, binding: Binding): Actor {
  pendingBinding = binding;
  try {
    return new cls() as unknown as Actor;
  } finally {
    pendingBinding = undefined;
  }
}

/**
 * Base class of actor types; decorate subclasses with {@link actor}.
 *
 * The SDK creates one instance per active actor id. `S` types `this.state`:
 *
 * ```ts
 * @actor("counter")
 * class Counter extends Actor<{ count: number }> {
 *   @method async incr(by = 1): Promise<number> {
 *     const count = this.state.get("count", 0) + by;
 *     this.state.set("count", count);
 *     return count;
 *   }
 * }
 * ```
 */
export abstract class Actor<S extends object = StateShape> {
  readonly #binding: Binding;

  constructor() {
    this.#binding = pendingBinding ?? { id: "", state: new State(), ctx: undefined };
    pendingBinding = undefined;
  }

  /** The id of this actor (the part of the address after the type). */
  get id(): string {
    return this.#binding.id;
  }

  /** This actor's persistent state; changes are saved atomically when the turn ends. */
  get state(): State<S> {
    return this.#binding.state as State<S>;
  }

  /** Calls to other actors from inside a turn (they carry the call chain). */
  get ctx(): Context {
    const ctx = this.#binding.ctx;
    if (ctx === undefined) throw new Error("this.ctx is only available in an actor hosted by an App");
    return ctx;
  }

  /** Called after the state is loaded, before the first turn. May be async. */
  onActivate(): void | Promise<void> {
    return undefined;
  }

  /** Called before the instance is dropped; state changes made here are kept. May be async. */
  onDeactivate(): void | Promise<void> {
    return undefined;
  }

  /* eslint-disable @typescript-eslint/no-unused-vars -- the defaults declare the parameters that overrides use */

  /**
   * Handles a firing of the reminder `name` (set with `this.ctx.setReminder` or
   * `client.setReminder`); `data` is the reminder's data. Runs as a turn: state
   * changes are saved when it returns. If it throws, the daemon retries the
   * firing per the reminder's retry policy. Override it to use reminders.
   */
  onReminder(name: string, data: unknown): void | Promise<void> {
    throw new Error(`${this.constructor.name} received reminder ${JSON.stringify(name)} but does not override onReminder(name, data)`);
  }

  /** Handles the actor's alarm (see `this.ctx.setAlarm`), like {@link onReminder}. Override it to use the alarm. */
  onAlarm(data: unknown): void | Promise<void> {
    throw new Error(`${this.constructor.name} received its alarm but does not override onAlarm(data)`);
  }

  /**
   * Handles a firing of the timer `name` (see `this.ctx.setTimer`). Runs as a
   * turn. Timers live in memory and end when the actor deactivates. Override it to use timers.
   */
  onTimer(name: string, data: unknown): void | Promise<void> {
    throw new Error(`${this.constructor.name} received timer ${JSON.stringify(name)} but does not override onTimer(name, data)`);
  }

  /* eslint-enable @typescript-eslint/no-unused-vars */
}

/** What every actor instance offers (implemented by {@link Actor}). */
export interface ActorInstance {
  readonly id: string;
  onActivate(): void | Promise<void>;
  onDeactivate(): void | Promise<void>;
}

/** A class that can be registered as an actor type: a subclass of {@link Actor}. */
export type ActorClass<A extends ActorInstance = ActorInstance> = new () => A;

/** Options of {@link actor}; those left out use the daemon's defaults. */
export interface ActorOptions {
  /** Time without a turn before the actor is deactivated (seconds, or "30s", "5m"...). */
  idleTimeout?: Duration;
  /** `"write_behind"` (reply at once, flush in batches) or `"durable"` (reply once stored). */
  state?: StateModeName;
  /** Calls queued per actor before callers get {@link Overloaded}. */
  maxMailbox?: number;
  /** Let a call chain re-enter this actor (A -> B -> A). */
  reentrant?: boolean;
  /** Upper bound for one turn (reserved by the daemon). */
  turnTimeout?: Duration;
  /**
   * Tells to this type sent without `durable` are durable: stored in the actor's
   * inbox before the sender hears back, delivered at least once (docs/delivery.md).
   * A sender's `{ durable: false }` still opts out.
   */
  durableTells?: boolean;
  /**
   * Erase an actor nothing has reached for this long (`"90d"`): its state, reminders
   * and everything else `troupe actors purge` erases, counted from the end of its last
   * activation (docs/retention.md). At least a minute; left out, actors are kept
   * until purged.
   */
  retention?: Duration;
}

/** The daemon's lower bound on a type's retention. */
const MIN_RETENTION_MS = 60_000;

/** Options of {@link method}. */
export interface MethodOptions {
  /** The name callers use; defaults to the method's name. */
  name?: string;
  /**
   * The method never changes `this.state`, so the daemon may run it concurrently
   * with other read-only calls of the same actor. Its turn sends no state changes.
   */
  readonly?: boolean;
}

/** @internal What @actor recorded about a class. */
export interface ActorSpec {
  name: string;
  cls: ActorClass;
  /** wire name -> property name */
  methods: Map<string, string>;
  readonly: Set<string>;
  /** wire name -> the most arguments the method declares; absent: any number (a rest parameter). */
  maxArgs: Map<string, number>;
  proto: ActorTypeSpec;
}

interface MethodInfo {
  name: string;
  readonly: boolean;
}

const METHOD_INFO = Symbol("troupe.method");
const SPECS = new WeakMap<object, ActorSpec>();
const propertyNames = new WeakMap<object, string>();
const NAME_RE = /^[^\s/]{1,256}$/u;

type Marked = { [METHOD_INFO]?: MethodInfo };
type AnyMethod = (this: never, ...args: never[]) => unknown;

function markMethod<F extends AnyMethod>(fn: F, context: ClassMethodDecoratorContext, options: MethodOptions): F {
  if (context.static) throw new TypeError("@method cannot decorate a static method");
  if (context.private || typeof context.name !== "string") {
    throw new TypeError("@method cannot decorate a private (#name) or symbol-named method");
  }
  const wire = options.name ?? context.name;
  if (!NAME_RE.test(wire) || wire.startsWith("_")) {
    throw new TypeError(`method names must be 1-256 characters without spaces or '/', and not start with '_': ${JSON.stringify(wire)}`);
  }
  const info: MethodInfo = { name: wire, readonly: options.readonly ?? false };
  const existing = (fn as Marked)[METHOD_INFO];
  if (existing !== undefined && existing.name !== wire) {
    throw new TypeError(`method ${context.name} is already exposed as ${JSON.stringify(existing.name)}`);
  }
  Object.defineProperty(fn, METHOD_INFO, { value: info, configurable: true });
  // Remember the property name too: the function may be stored under another name.
  propertyNames.set(fn, context.name);
  return fn;
}

/**
 * Expose an actor method to callers (async or plain). Use bare, `@method`, or
 * with options, `@method({ name: "get", readonly: true })`.
 */
export function method<F extends AnyMethod>(value: F, context: ClassMethodDecoratorContext): F;
export function method(options: MethodOptions): <F extends AnyMethod>(value: F, context: ClassMethodDecoratorContext) => F;
export function method<F extends AnyMethod>(
  valueOrOptions: F | MethodOptions,
  context?: ClassMethodDecoratorContext,
): F | (<G extends AnyMethod>(value: G, context: ClassMethodDecoratorContext) => G) {
  if (typeof valueOrOptions === "function") {
    if (context === undefined) throw new TypeError("@method is a decorator: write it above a method");
    return markMethod(valueOrOptions, context, {});
  }
  const options = valueOrOptions;
  return <G extends AnyMethod>(value: G, ctx: ClassMethodDecoratorContext): G => markMethod(value, ctx, options);
}

function collectMethods(cls: ActorClass, name: string): [Map<string, string>, Set<string>, Map<string, number>] {
  const chain: object[] = [];
  for (let p: unknown = cls.prototype; p !== null && p !== Actor.prototype && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    chain.push(p as object);
  }
  const methods = new Map<string, string>();
  const readonly = new Set<string>();
  const maxArgs = new Map<string, number>();
  for (const proto of chain.reverse()) {
    for (const key of Object.getOwnPropertyNames(proto)) {
      const desc = Object.getOwnPropertyDescriptor(proto, key);
      const fn: unknown = desc?.value;
      if (typeof fn !== "function") continue;
      const info = (fn as Marked)[METHOD_INFO];
      if (info === undefined) continue;
      methods.set(info.name, propertyNames.get(fn) ?? key);
      if (info.readonly) readonly.add(info.name);
      else readonly.delete(info.name);
      const declared = declaredParams(fn as AnyMethod);
      if (declared === undefined) maxArgs.delete(info.name);
      else maxArgs.set(info.name, declared);
    }
  }
  if (methods.size === 0) throw new TypeError(`actor type ${JSON.stringify(name)} (${cls.name}) has no @method methods`);
  return [methods, readonly, maxArgs];
}

/**
 * Declare an {@link Actor} subclass as the actor type `name`:
 *
 * ```ts
 * @actor("counter", { idleTimeout: "5m", state: "durable", maxMailbox: 1000 })
 * class Counter extends Actor<{ count: number }> { ... }
 * ```
 */
export function actor(name: string, options: ActorOptions = {}) {
  if (typeof name !== "string" || !NAME_RE.test(name)) {
    throw new TypeError(`actor type name must be 1-256 characters without spaces or '/', got ${JSON.stringify(name)}`);
  }
  if (options.state !== undefined && !(options.state in STATE_MODES)) {
    throw new TypeError(`state must be "write_behind" or "durable", got ${JSON.stringify(options.state)}`);
  }
  const { maxMailbox } = options;
  if (maxMailbox !== undefined && (!Number.isInteger(maxMailbox) || maxMailbox <= 0 || maxMailbox > 0xffffffff)) {
    throw new TypeError(`maxMailbox must be a positive integer, got ${String(maxMailbox)}`);
  }
  const idleTimeoutMs = toMillis(options.idleTimeout, "idleTimeout") ?? 0;
  const turnTimeoutMs = toMillis(options.turnTimeout, "turnTimeout") ?? 0;
  const retentionMs = toMillis(options.retention, "retention");
  if (retentionMs !== undefined && retentionMs < MIN_RETENTION_MS) {
    // Most likely days or hours given as a bare number, which reads as seconds.
    throw new TypeError(
      `retention must be at least a minute, got ${JSON.stringify(options.retention)} (${retentionMs} ms); ` +
        `a bare number is seconds: write e.g. "30d" for thirty days`,
    );
  }

  return function (cls: ActorClass): void {
    if (!(cls.prototype instanceof Actor)) {
      throw new TypeError(`@actor(${JSON.stringify(name)}) must decorate a subclass of Actor`);
    }
    // Method decorators have run already; collect what they marked once the
    // class is complete (static initialisers cannot add prototype methods).
    const [methods, readonly, maxArgs] = collectMethods(cls, name);
    SPECS.set(cls, {
      name,
      cls,
      methods,
      readonly,
      maxArgs,
      proto: {
        name,
        idleTimeoutMs: BigInt(idleTimeoutMs),
        maxMailbox: maxMailbox ?? 0,
        reentrant: options.reentrant ?? false,
        stateMode: options.state === undefined ? StateMode.STATE_MODE_UNSPECIFIED : STATE_MODES[options.state],
        readonlyMethods: [...readonly].sort(),
        turnTimeoutMs: BigInt(turnTimeoutMs),
        // Not an option of this SDK yet: the daemon's --max-pending-per-type.
        maxPendingCalls: 0,
        durableTells: options.durableTells ?? false,
        retentionMs: BigInt(retentionMs ?? 0),
      },
    });
  };
}

/** @internal The spec recorded by @actor, or an error explaining how to add it. */
export function specOf(cls: ActorClass): ActorSpec {
  const spec = SPECS.get(cls);
  if (spec === undefined) {
    throw new TypeError(`${cls.name} is not an actor type: decorate it with @actor("name")`);
  }
  return spec;
}

/** The type name a class was registered under with @actor. */
export function actorTypeName(cls: ActorClass): string {
  return specOf(cls).name;
}
