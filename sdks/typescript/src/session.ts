// One Attach stream to the daemon (Session): registration, the turns it pushes
// and their answers, batched on the way out. Re-connects are App's on grpc-js
// (app.ts) and the native core's otherwise (native_wire.ts).
import * as grpc from "@grpc/grpc-js";
import { type Actor, type ActorSpec, instantiate } from "./actor.js";
import { API_VERSION, SDK_NAME } from "./address.js";
import { Caller } from "./caller.js";
import { Context } from "./context.js";
import { API_VERSION_TRAILER, ApiVersionMismatch, errorForCode, INSTALL_MATCHING, rpcDetails, TroupeError } from "./errors.js";
import {
  type Activate,
  type ActivateResult,
  type AppMessage,
  type DaemonMessage,
  type Deactivate,
  type DeactivateResult,
  type Register,
  type Registered,
  type Turn,
  type TurnResult,
} from "./gen/troupe/v1/app.js";
import { type ActorFailure, FailureKind, type Payload, TurnKind } from "./gen/troupe/v1/common.js";
import { type CallFilter, runFiltered, type TurnKindName } from "./filters.js";
import { decodeCall, encodeResult } from "./payload.js";
import { decodeData, Scheduler } from "./schedule.js";
import { commitState, endTurn, expireState, refuseState, rollbackState, State } from "./state.js";
import { Tracing } from "./tracing.js";
import { callersMistake, failure } from "./turn_failure.js";
import { currentTurn, TurnScope } from "./turn.js";
import type { AppWire } from "./wire.js";

// The tests of packAnswers import it from here.
export { packAnswers } from "./grpc_wire.js";

// Registration failures that a retry cannot fix: report them instead of looping.
// A missing or wrong token is one: the app reads its token once.
const FATAL_CODES = new Set<grpc.status>([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.ALREADY_EXISTS,
  grpc.status.FAILED_PRECONDITION,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNAUTHENTICATED,
  grpc.status.UNIMPLEMENTED,
]);


/** Where the App reports connection trouble; `console` by default. */
export interface Logger {
  warn(message: string): void;
  info(message: string): void;
  debug(message: string): void;
}

export class ConnectionLost extends Error {
  override name = "ConnectionLost";
}

/** An attempt to attach failed: the first failure of an outage loudly, the retries quietly. */
export function logNoConnection(logger: Logger, address: string, err: unknown, first: boolean): void {
  const line = `troupe: no connection to daemon at ${address} (${describe(err)}); retrying`;
  if (first) logger.warn(line);
  else logger.debug(line);
}

export function describe(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as Partial<grpc.ServiceError>).code;
    if (typeof code === "number" && "details" in err) return `${grpc.status[code]}: ${rpcDetails(err as grpc.ServiceError)}`;
    return err.message === "" ? err.name : err.message;
  }
  return String(err);
}

/**
 * The error of a registration the daemon refused for good (see FATAL_CODES), or
 * undefined for one a re-connect may fix. A FAILED_PRECONDITION with the
 * troupe-api-version trailer is the daemon refusing this SDK's API version.
 */
export function refusal(err: grpc.ServiceError): TroupeError | undefined {
  if (!FATAL_CODES.has(err.code)) return undefined;
  const message = `daemon refused the registration: ${rpcDetails(err)}`;
  const [daemonVersion] = err.metadata.get(API_VERSION_TRAILER);
  if (err.code === grpc.status.FAILED_PRECONDITION && daemonVersion !== undefined) {
    const text = typeof daemonVersion === "string" ? daemonVersion : daemonVersion.toString("utf8");
    return new ApiVersionMismatch(message, { sdkApiVersion: API_VERSION, daemonApiVersion: /^\d+$/.test(text) ? Number(text) : 0 });
  }
  return errorForCode(err.code, message);
}

/**
 * An ApiVersionMismatch unless the daemon at `address` speaks this SDK's app API
 * version. A daemon of another version would have refused our Register; one that
 * answers anyway either takes several versions, or is from before API versions (0),
 * and then what it lacks is unknown: stopping with a clear message beats failing
 * later on a message one side misreads.
 */
function versionMismatch(address: string, registered: Registered): ApiVersionMismatch | undefined {
  const daemonApiVersion = registered.apiVersion;
  if (daemonApiVersion === API_VERSION) return undefined;
  const daemon = `the daemon at ${address} (troupe ${registered.daemonVersion || "?"})`;
  const speaks = daemonApiVersion === 0 ? `${daemon} is from before app API versions (it names none)` : `${daemon} speaks app API version ${String(daemonApiVersion)}`;
  return new ApiVersionMismatch(`${speaks}, this SDK (${SDK_NAME}) speaks version ${String(API_VERSION)}: ${INSTALL_MATCHING}`, {
    sdkApiVersion: API_VERSION,
    daemonApiVersion,
  });
}

/** A caller waits for a turn of this kind (unless the daemon marks it unanswered: a tell). */
function callKind(kind: TurnKind): boolean {
  return kind === TurnKind.TURN_KIND_UNSPECIFIED || kind === TurnKind.TURN_KIND_CALL;
}

function namedError(name: string, message: string): Error {
  const e = new Error(message);
  e.name = name;
  return e;
}

/**
 * How long ago (ms) the placement lease a Turn or Activate was sent under ended, or
 * undefined while it lasts (or when there is none: 0, a single daemon). Past the
 * lease another daemon may own the actor, so the work must not start. The daemon
 * and the app share the host's clock, hence wall-clock time.
 */
function leaseLateMs(leaseDeadlineUnixMs: bigint): number | undefined {
  if (leaseDeadlineUnixMs === 0n) return undefined;
  const late = Date.now() - Number(leaseDeadlineUnixMs);
  return late >= 0 ? late : undefined;
}

/** What a turn runs, for messages: "call incr", "reminder expire", "alarm". */
function turnLabel(msg: Turn): string {
  switch (msg.kind) {
    case TurnKind.TURN_KIND_UNSPECIFIED:
    case TurnKind.TURN_KIND_CALL:
      return `call ${msg.name}`;
    case TurnKind.TURN_KIND_REMINDER:
      return `reminder ${msg.name}`;
    case TurnKind.TURN_KIND_TIMER:
      return `timer ${msg.name}`;
    case TurnKind.TURN_KIND_ALARM:
      return "alarm";
    default:
      return `turn of kind ${String(msg.kind)}`;
  }
}

/** What a call filter is told a turn is. */
const KINDS = new Map<TurnKind, TurnKindName>([
  [TurnKind.TURN_KIND_CALL, "call"],
  [TurnKind.TURN_KIND_REMINDER, "reminder"],
  [TurnKind.TURN_KIND_TIMER, "timer"],
  [TurnKind.TURN_KIND_ALARM, "alarm"],
]);

function key(type: string, id: string): string {
  return `${type}\u0000${id}`;
}

export interface SessionHost {
  /** The daemon's address, for messages. */
  readonly address: string;
  readonly specs: ReadonlyMap<string, ActorSpec>;
  readonly logger: Logger;
  readonly tracing: Tracing;
  /** A new connection for a session: on grpc-js or on the native core (core.ts). */
  openWire(target: string): AppWire;
  setRegistered(registered: boolean, daemonVersion?: string): void;
  registerMessage(): Register;
  unknownType(name: string): ActorFailure;
  /** Run around every turn (App's `filters`), the first outermost. */
  readonly filters: readonly CallFilter[];
}

/** One Attach stream: the instances it hosts. */
export class Session {
  readonly #app: SessionHost;
  readonly #wire: AppWire;
  readonly #caller: Caller;
  readonly #scheduler: Scheduler;
  readonly #instances = new Map<string, Actor>();
  /** The turns running, by call id, for the daemon's CancelTurn. */
  readonly #running = new Map<bigint, TurnScope>();
  #closed = false;

  constructor(app: SessionHost, target: string) {
    this.#app = app;
    this.#wire = app.openWire(target);
    this.#caller = new Caller(undefined, app.tracing, true, this.#wire.calls);
    this.#scheduler = new Scheduler(() => this.#wire.calls, undefined, app.tracing);
  }

  /** Register, then serve until the stream ends; always rejects (ConnectionLost or a fatal TroupeError). */
  run(): Promise<never> {
    return new Promise<never>((_resolve, reject) => {
      let registered = false;
      this.#wire.open(this.#app.registerMessage(), {
        data: (msg: DaemonMessage) => {
          const kind = msg.kind;
          if (!registered) {
            if (kind?.$case !== "registered") {
              reject(new ConnectionLost(`expected Registered first, got ${kind?.$case ?? "nothing"}`));
              this.#wire.close();
              return;
            }
            registered = true;
            const mismatch = versionMismatch(this.#app.address, kind.value);
            if (mismatch !== undefined) {
              reject(mismatch);
              this.#wire.close();
              return;
            }
            this.#wire.setBatching(kind.value.acceptsBatches);
            this.#app.setRegistered(true, kind.value.daemonVersion);
            return;
          }
          if (kind?.$case === "batch") {
            // Work that was ready together: each message runs as if it came alone, in
            // order (each starts before the next one's).
            for (const inner of kind.value.messages) this.#dispatch(inner, " in a batch");
          } else {
            this.#dispatch(msg, "");
          }
        },
        error: (err: grpc.ServiceError) => {
          const refused = registered ? undefined : refusal(err);
          reject(refused ?? new ConnectionLost(describe(err)));
        },
        end: () => {
          reject(new ConnectionLost("daemon closed the stream"));
        },
      });
    });
  }

  #dispatch(msg: DaemonMessage, where: string): void {
    const kind = msg.kind;
    switch (kind?.$case) {
      case "turn":
        void this.#turn(kind.value);
        break;
      case "activate":
        void this.#activate(kind.value);
        break;
      case "deactivate":
        void this.#deactivate(kind.value);
        break;
      case "cancel":
        this.#running.get(kind.value.callId)?.cancel();
        break;
      default:
        this.#app.logger.warn(`troupe: ignoring unexpected daemon message ${kind?.$case ?? "(empty)"}${where}`);
    }
  }

  close(): void {
    this.#closed = true;
    this.#wire.close();
    // The daemon re-activates these actors from stored state on the next session.
    this.#instances.clear();
  }

  /** Queue an answer: the wire sends the answers queued together in one write (see AppWire.send). */
  #send(msg: AppMessage): void {
    if (this.#closed) return;
    this.#wire.send(msg);
  }

  async #activate(msg: Activate): Promise<void> {
    const ref = msg.actor ?? { type: "", id: "" };
    const result: ActivateResult = { callId: msg.callId, error: undefined, changes: [], leaseExpired: false };
    // Checked here, where the activation starts (nothing is awaited before the
    // constructor and onActivate run), not when the message arrived.
    const late = leaseLateMs(msg.leaseDeadlineUnixMs);
    if (late !== undefined) {
      this.#app.logger.warn(
        `troupe: not activating ${ref.type}/${ref.id}: its daemon's placement lease ended ${String(late)} ms before the activation could start; answered leaseExpired`,
      );
      result.leaseExpired = true;
      this.#send({ kind: { $case: "activated", value: result } });
      return;
    }
    const spec = this.#app.specs.get(ref.type);
    if (spec === undefined) {
      result.error = this.#app.unknownType(ref.type);
    } else {
      try {
        const state = new State(msg.state);
        const scope = new TurnScope(state, `${ref.type}/${ref.id}`, "onActivate");
        try {
          // The constructor is part of the activation: state it reads or sets there is the activation's.
          const obj = currentTurn.run(scope, () => instantiate(spec.cls, { id: ref.id, state, ctx: new Context(this.#caller, this.#scheduler, ref.type, ref.id) }));
          await currentTurn.run(scope, () => obj.onActivate());
          result.changes = commitState(state, scope);
          this.#instances.set(key(ref.type, ref.id), obj);
        } finally {
          endTurn(state, scope);
        }
      } catch (e) {
        result.error = failure(e);
      }
    }
    this.#send({ kind: { $case: "activated", value: result } });
  }

  async #turn(msg: Turn): Promise<void> {
    const result: TurnResult = { callId: msg.callId, outcome: undefined, changes: [], leaseExpired: false, events: [] };
    if (msg.expiredKeys.length > 0) {
      // The daemon deleted these keys whatever becomes of this turn (even one not
      // run below), and tells of them once: drop them before any handler runs.
      const ref = msg.actor ?? { type: "", id: "" };
      const obj = this.#instances.get(key(ref.type, ref.id));
      if (obj !== undefined) expireState(obj.state, msg.expiredKeys);
    }
    // Checked here, where the turn starts (nothing is awaited between this and the
    // handler), not when the message arrived: no outcome, no changes, no span.
    const late = leaseLateMs(msg.leaseDeadlineUnixMs);
    if (late !== undefined) {
      const ref = msg.actor ?? { type: "", id: "" };
      this.#app.logger.warn(
        `troupe: not running ${turnLabel(msg)} of ${ref.type}/${ref.id}: its daemon's placement lease ended ${String(late)} ms before the turn could start; answered leaseExpired`,
      );
      result.leaseExpired = true;
      this.#send({ kind: { $case: "turnResult", value: result } });
      return;
    }
    try {
      const reply = await this.#app.tracing.turn(msg, () => this.#runTurn(msg, result));
      result.outcome = { $case: "reply", value: reply };
    } catch (e) {
      // A failed turn publishes nothing, as it changes nothing.
      result.changes = [];
      result.events = [];
      const failed = failure(e);
      result.outcome = { $case: "error", value: failed };
      if (msg.unanswered || !callKind(msg.kind)) this.#logUnheard(msg, failed);
    }
    this.#send({ kind: { $case: "turnResult", value: result } });
  }

  /**
   * Logs a failed turn no caller hears of: a best-effort tell's, or a reminder's,
   * timer's or alarm's (the daemon retries a reminder as its policy says, and logs only
   * the last failure). Without this line nobody would see where it threw.
   */
  #logUnheard(msg: Turn, failed: ActorFailure): void {
    const ref = msg.actor ?? { type: "", id: "" };
    const label = msg.unanswered ? `tell ${msg.name}` : turnLabel(msg);
    const where = failed.details === "" ? "" : `\n${failed.details}`;
    this.#app.logger.warn(`troupe: ${label} of ${ref.type}/${ref.id} raised ${failed.type}: ${failed.message} (no caller hears of it)${where}`);
  }

  async #runTurn(msg: Turn, result: TurnResult): Promise<Payload> {
    const ref = msg.actor ?? { type: "", id: "" };
    const obj = this.#instances.get(key(ref.type, ref.id));
    if (obj === undefined) throw namedError("LookupError", `actor ${ref.type}/${ref.id} is not active in this app`);
    switch (msg.kind) {
      case TurnKind.TURN_KIND_UNSPECIFIED:
      case TurnKind.TURN_KIND_CALL:
        break;
      case TurnKind.TURN_KIND_REMINDER:
      case TurnKind.TURN_KIND_ALARM:
      case TurnKind.TURN_KIND_TIMER:
        return this.#runScheduled(obj, msg, result);
      default:
        throw namedError("NotImplementedError", `${SDK_NAME} does not handle turns of kind ${String(msg.kind)}`);
    }
    const spec = this.#app.specs.get(ref.type) as ActorSpec;
    const prop = spec.methods.get(msg.name);
    if (prop === undefined) {
      throw callersMistake(
        new TypeError(
          `actor type ${JSON.stringify(ref.type)} has no method ${JSON.stringify(msg.name)}; its methods are: ${[...spec.methods.keys()].sort().join(", ")}`,
        ),
        FailureKind.FAILURE_KIND_NO_SUCH_METHOD,
      );
    }
    let args: unknown[];
    try {
      args = decodeCall(msg.payload);
    } catch (e) {
      throw e instanceof Error ? callersMistake(e, FailureKind.FAILURE_KIND_BAD_ARGUMENTS) : e;
    }
    const most = spec.maxArgs.get(msg.name);
    if (most !== undefined && args.length > most) {
      // JS would drop the extra arguments and run with the wrong values; Python raises
      // TypeError for the same call, so the caller sees ActorError("TypeError") from either.
      throw callersMistake(
        new TypeError(
          `${ref.type}.${msg.name} takes at most ${most} argument${most === 1 ? "" : "s"} but was called with ${args.length}` +
            " (keyword arguments, when there are any, count as one last argument: docs/payloads.md); call it with fewer",
        ),
        FailureKind.FAILURE_KIND_BAD_ARGUMENTS,
      );
    }
    const fn = (obj as unknown as Record<string, unknown>)[prop];
    if (typeof fn !== "function") throw new TypeError(`${spec.cls.name}.${prop} is not a function`);
    return this.#inScope(obj, msg, msg.name, spec.readonly.has(msg.name), result, args, () => (fn as (...a: unknown[]) => unknown).apply(obj, args));
  }

  /**
   * Run a handler as this turn, then settle its state: the changes of a writing
   * turn, or what a read-only one changed in place (which the daemon refuses);
   * after a throw, its changes are undone.
   */
  async #inScope(obj: Actor, msg: Turn, name: string, readonly: boolean, result: TurnResult, args: readonly unknown[], handler: () => unknown): Promise<Payload> {
    const state = obj.state;
    const ref = msg.actor ?? { type: "", id: "" };
    // The daemon may run this turn beside others of the same actor (read-only ones,
    // or one nested in a turn waiting on a chain that called back into this
    // reentrant actor): the scope keeps this turn's chain, deadline and changes apart.
    const scope = new TurnScope(state, `${ref.type}/${ref.id}`, name, readonly, msg.chain, msg.deadlineUnixMs, msg.metadata);
    scope.events = [];
    const filters = this.#app.filters;
    const run =
      filters.length === 0
        ? handler
        : () =>
            runFiltered(
              filters,
              { actorType: ref.type, actorId: ref.id, actor: obj, method: name, kind: KINDS.get(msg.kind) ?? "call", args, metadata: { ...msg.metadata }, readonly },
              handler,
            );
    this.#running.set(msg.callId, scope);
    try {
      const value: unknown = await currentTurn.run(scope, run);
      // A scheduled turn has no caller: its reply is JSON null.
      const reply = encodeResult(callKind(msg.kind) ? value : null);
      result.changes = readonly ? refuseState(state, scope) : commitState(state, scope);
      result.events = scope.events;
      return reply;
    } catch (e) {
      rollbackState(state, scope);
      throw e;
    } finally {
      this.#running.delete(msg.callId);
      endTurn(state, scope);
    }
  }

  /** A reminder, alarm or timer firing: runs the actor's hook like a writing method turn; the reply is null. */
  async #runScheduled(obj: Actor, msg: Turn, result: TurnResult): Promise<Payload> {
    const data = decodeData(msg.payload);
    const [hook, args, run] =
      msg.kind === TurnKind.TURN_KIND_REMINDER
        ? ["onReminder", [msg.name, data], () => obj.onReminder(msg.name, data)]
        : msg.kind === TurnKind.TURN_KIND_ALARM
          ? ["onAlarm", [data], () => obj.onAlarm(data)]
          : ["onTimer", [msg.name, data], () => obj.onTimer(msg.name, data)];
    return this.#inScope(obj, msg, hook, false, result, args, run);
  }

  async #deactivate(msg: Deactivate): Promise<void> {
    const ref = msg.actor ?? { type: "", id: "" };
    const result: DeactivateResult = { callId: msg.callId, changes: [] };
    const k = key(ref.type, ref.id);
    const obj = this.#instances.get(k);
    if (obj !== undefined) {
      const scope = new TurnScope(obj.state, `${ref.type}/${ref.id}`, "onDeactivate");
      try {
        await currentTurn.run(scope, () => obj.onDeactivate());
        result.changes = commitState(obj.state, scope);
      } catch (e) {
        this.#app.logger.warn(`troupe: onDeactivate of ${ref.type}/${ref.id} threw: ${describe(e)}`);
        rollbackState(obj.state, scope);
      } finally {
        endTurn(obj.state, scope);
      }
      this.#instances.delete(k);
    }
    this.#send({ kind: { $case: "deactivated", value: result } });
  }
}
