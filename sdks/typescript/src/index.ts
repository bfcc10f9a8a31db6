/**
 * Troupe: virtual actors hosted by the `troupe` sidecar daemon.
 *
 * Host actors:
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
 * await new App({ actors: [Counter] }).runForever();
 * ```
 *
 * Call them:
 *
 * ```ts
 * const client = new Client();
 * await client.actor<Counter>("counter", "c1").call("incr", 5);
 * ```
 *
 * @module
 */
export { Actor, actor, method, actorTypeName } from "./actor.js";
export type { ActorClass, ActorInstance, ActorOptions, MethodOptions, StateModeName } from "./actor.js";
export { App } from "./app.js";
export type { AppOptions, Logger, WaitRegisteredOptions } from "./app.js";
export type { ActorHandle, CallOptions, GetStateExpiryOptions, GetStateOptions, HandleOptions, MethodArgs, MethodName, MethodResult, Params, TellOptions, UntypedActor, WithKwargs } from "./caller.js";
export { Client } from "./client.js";
export type { ClientOptions } from "./client.js";
export { Context } from "./context.js";
export { ActorEventStream, eventContext } from "./events.js";
export type { ActorEvent, WatchOptions, WatchTypeOptions } from "./events.js";
export { TurnCancelled } from "./turn.js";
export { daemonPackage, daemonPath, DaemonNotFound, platformKey } from "./daemon.js";
export type { CallFilter, IncomingCall, Next, TurnKindName } from "./filters.js";
export type { Duration } from "./duration.js";
export type { FailureKind } from "./errors.js";
export {
  ActorError,
  ApiVersionMismatch,
  DeadlineExceeded,
  FailedPrecondition,
  InvalidArgument,
  NotFound,
  Overloaded,
  ReadOnlyStateError,
  TlsConfigError,
  TroupeError,
  Unauthenticated,
  Unavailable,
} from "./errors.js";
export type { ApiVersions } from "./errors.js";
export { Kwargs, kwargs, PayloadError } from "./payload.js";
export type { JsonValue } from "./payload.js";
export type {
  AlarmOptions,
  ListRemindersOptions,
  MissedFiringsPolicy,
  Reminder,
  ReminderOptions,
  RetryPolicy,
  RetrySettings,
  SchedulePeriod,
  ScheduleTime,
  TimerOptions,
} from "./schedule.js";
export type { RetryBudget } from "./retry.js";
export { State } from "./state.js";
export type { StateSetOptions, StateShape } from "./state.js";
export type { TlsOptions } from "./tls.js";
export { API_VERSION, DEFAULT_ADDRESS, SDK_NAME, SDK_VERSION } from "./address.js";
