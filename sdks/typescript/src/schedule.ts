// Scheduled work: reminders, the alarm and timers. Conversions between the SDK's
// options and the ActorClient messages, and the RPCs shared by Client and Context.
import * as grpc from "@grpc/grpc-js";
import { type Duration, periodWire, toMillis } from "./duration.js";
import { type CallTransport, stubTransport, type UnaryMethod } from "./caller.js";
import { fromRpcError, InvalidArgument, isServiceError } from "./errors.js";
import {
  type ActorClientClient,
  ActorClientService,
  type AlarmRef,
  MissedFirings,
  type Reminder as ReminderMessage,
  type ReminderRef,
  type RetryPolicy as RetryPolicyMessage,
  type SetAlarmRequest,
  type SetReminderRequest,
  type SetTimerRequest,
} from "./gen/troupe/v1/client.js";
import type { Payload } from "./gen/troupe/v1/common.js";
import { decodeResult, encodeResult } from "./payload.js";
import { type CallTarget, Tracing } from "./tracing.js";
import { callDeadline, callStop } from "./turn.js";

/**
 * When something fires: a {@link Duration} from now (seconds as a number, or a
 * string: `"90s"`, `"1h30m"`, `"250ms"`, ISO 8601 `"PT1M30S"`), an RFC 3339 time
 * as a string (`"2026-12-01T00:00:00Z"`), or a `Date`.
 */
export type ScheduleTime = Duration | Date;

/**
 * How often a reminder or timer repeats: a {@link Duration} (seconds as a number,
 * or a string: `"10s"`, `"PT10S"`), or (reminders) an ISO 8601 repetition `"R5/PT10S"`
 * (five firings in all).
 */
export type SchedulePeriod = Duration;

/**
 * How a failed firing (the handler threw, or no app was there) is retried, with
 * exponential backoff. Fields left out take the daemon's defaults: 3 attempts,
 * 1 s first backoff, 60 s cap.
 */
export interface RetryPolicy {
  /** Attempts of one firing in all (the first one included) before it is dropped. */
  maxAttempts?: number;
  /** Wait before the first retry, a {@link Duration} (`"1s"`, or seconds); doubles with every retry. */
  initialBackoff?: Duration;
  /** Upper bound of the wait between retries, a {@link Duration} (`"1m"`, or seconds). */
  maxBackoff?: Duration;
  /** The same as `initialBackoff`, in milliseconds (the older spelling; give one of the two). */
  initialBackoffMs?: number;
  /** The same as `maxBackoff`, in milliseconds (the older spelling; give one of the two). */
  maxBackoffMs?: number;
}

/** A stored reminder's retry policy, the daemon's defaults filled in, in milliseconds. */
export interface RetrySettings {
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
}

/**
 * What happens to firings that came due while the daemon was down:
 * `"fire_once"` (the default) fires once on recovery, `"skip"` skips to the next future firing.
 */
export type MissedFiringsPolicy = "fire_once" | "skip";

/** A reminder (or the alarm) as the daemon stores it. */
export interface Reminder {
  actorType: string;
  actorId: string;
  /** The reminder's name (the alarm has a reserved name). */
  name: string;
  /** When it fires next. */
  nextDue: Date;
  /** The period in milliseconds; null for a one-shot or calendar reminder. */
  periodMs: number | null;
  /** The cron pattern it fires at; null for a one-shot or periodic reminder. */
  cron: string | null;
  /** The IANA time zone `cron` is read in (`"UTC"` when none was given); null without `cron`. */
  timeZone: string | null;
  /** The jitter it was set with, in milliseconds; null for none. */
  jitterMs: number | null;
  /** The delay that jitter chose after each scheduled time, in milliseconds (already in `nextDue`); 0 without jitter. */
  jitterDelayMs: number;
  /** Firings left; null when unbounded. */
  remaining: number | null;
  /** No firing after this time; null when there is no end. */
  until: Date | null;
  /** The data handed to the handler: a JSON value, or a Uint8Array. */
  data: unknown;
  /** The retry policy, with the daemon's defaults filled in. */
  retry: RetrySettings;
  /** What happens to firings missed while the daemon was down. */
  missed: MissedFiringsPolicy;
  /** Failed attempts of the pending firing. */
  attempts: number;
  /** Successful firings so far. */
  fired: number;
  /** Whether this is the actor's alarm. */
  alarm: boolean;
  /** Paused (`pauseReminder`): it does not fire until resumed, and `nextDue` is when it was due. */
  paused: boolean;
  /** A delayed tell waiting to be delivered (`tell(..., { delay })`): the method it calls, `data` its argument; null for a reminder. */
  tellMethod: string | null;
}

/** Options of `setReminder`. */
export interface ReminderOptions {
  /** First firing (see {@link ScheduleTime}); default: `"10s"` from now. */
  due?: ScheduleTime;
  /** Repeat with this period (see {@link SchedulePeriod}); default: fire once. */
  period?: SchedulePeriod;
  /**
   * Fire at the matches of this cron pattern instead of every `period`: five fields
   * (minute hour day-of-month month day-of-week) such as `"0 9 * * MON-FRI"`, six with
   * seconds first, or `"@daily"`; `L`, `W` and `#` as in Quartz. The first firing is the
   * first match at or after `due`.
   */
  cron?: string;
  /**
   * The IANA time zone `cron` is read in (`"Europe/Berlin"`); default: UTC. Wall times the
   * clocks skip fire just after the change; those they pass twice fire once.
   */
  timeZone?: string;
  /**
   * Fire a fixed delay of up to this {@link Duration} (`"10m"`, or seconds) after each
   * scheduled time, chosen once per reminder from its actor and name, so that reminders set
   * alike (`"@daily"` for every user) do not all fire at once; setting it again keeps the delay.
   */
  jitter?: Duration;
  /** Fire at most this many times in all. */
  repeat?: number;
  /** No firing after this time (RFC 3339, Date, or a duration from now). */
  until?: ScheduleTime;
  /** Handed to `onReminder(name, data)`: JSON-serialisable, or a Uint8Array sent raw. */
  data?: unknown;
  /** How failed firings are retried. */
  retry?: RetryPolicy;
  /** What happens to firings missed while the daemon was down. */
  missed?: MissedFiringsPolicy;
}

/** Options of `setAlarm`. */
export interface AlarmOptions {
  /** Handed to `onAlarm(data)`: JSON-serialisable, or a Uint8Array sent raw. */
  data?: unknown;
  /** How failed firings are retried. */
  retry?: RetryPolicy;
}

/** Options of `setTimer`. */
export interface TimerOptions {
  /** First firing: a {@link Duration} from now (seconds, or a string: `"5s"`, `"PT5S"`); default: `"1s"`. */
  due?: Duration;
  /** Repeat with this period; default: fire once. */
  period?: SchedulePeriod;
  /** Handed to `onTimer(name, data)`: JSON-serialisable, or a Uint8Array sent raw. */
  data?: unknown;
  /** Whether a firing counts as activity, keeping the actor from idling out (default false). */
  keepAlive?: boolean;
}

/** Options of {@link Client.listReminders}. */
export interface ListRemindersOptions {
  /** Only reminders of this actor type. */
  actorType?: string;
  /** Only reminders of this actor (needs `actorType`). */
  actorId?: string;
  /** Reminders fetched per ListReminders page (default: the daemon's). */
  pageSize?: number;
}

/** Default first firing of a reminder (the model in docs/scheduling.md). */
export const DEFAULT_REMINDER_DUE = "10s";
/** Default first firing of a timer. */
export const DEFAULT_TIMER_DUE = "1s";

function invalid(message: string): InvalidArgument {
  return new InvalidArgument(message, grpc.status.INVALID_ARGUMENT);
}

const MISSED: Record<MissedFiringsPolicy, MissedFirings> = {
  fire_once: MissedFirings.MISSED_FIRINGS_FIRE_ONCE,
  skip: MissedFirings.MISSED_FIRINGS_SKIP,
};

// The daemon's own test: a time has a date ("-") and a time ("T"); a duration has
// neither (ISO durations start with "P").
function isRfc3339(text: string): boolean {
  return text.includes("T") && text.includes("-") && !text.startsWith("P") && !text.startsWith("p");
}

/**
 * @internal A due/until/at value as the daemon's string: a Date or an RFC 3339 string
 * as RFC 3339 (the daemon checks the string), any other as a duration from now read
 * here, sent as milliseconds.
 */
export function toWireTime(value: ScheduleTime | undefined, what: string): string {
  if (value === undefined) return "";
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw invalid(`${what} is an invalid Date`);
    return value.toISOString();
  }
  if (typeof value === "string" && isRfc3339(value.trim())) return value.trim();
  return `${String(toMillis(value, what, true))}ms`;
}

/**
 * @internal A point in time only, a Date or an RFC 3339 string, as the daemon's string;
 * a duration is refused, since `what` has a sibling option that takes one.
 */
export function toWireInstant(value: Date | string | undefined, what: string, sibling: string): string {
  if (value === undefined) return "";
  if (value instanceof Date || (typeof value === "string" && isRfc3339(value.trim()))) return toWireTime(value, what);
  throw invalid(`${what} ${JSON.stringify(value)} is not a time: give a Date or an RFC 3339 string such as "2026-12-01T09:00:00Z" (for a duration from now, use ${sibling})`);
}

/** @internal A period as the daemon's string: `"1500ms"`, or `"R5/10000ms"` for a reminder's repetition. */
export function toWirePeriod(value: SchedulePeriod | undefined, what = "period", repetitions = true): string {
  return value === undefined ? "" : periodWire(value, what, repetitions);
}

function backoffMs(retry: RetryPolicy, name: "initialBackoff" | "maxBackoff"): bigint {
  const given = retry[name];
  const ms = retry[`${name}Ms`];
  if (given !== undefined && ms !== undefined) {
    throw invalid(`retry.${name} and retry.${name}Ms are the same setting; give one of them`);
  }
  if (ms !== undefined) return BigInt(uint(ms, `retry.${name}Ms`, Number.MAX_SAFE_INTEGER));
  return BigInt(toMillis(given, `retry.${name}`) ?? 0);
}

function uint(value: number | undefined, what: string, max: number): number {
  if (value === undefined) return 0;
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw invalid(`${what} must be an integer from 0 to ${max}, got ${String(value)}`);
  }
  return value;
}

/** @internal */
export function retryToProto(retry: RetryPolicy | undefined): RetryPolicyMessage | undefined {
  if (retry === undefined) return undefined;
  return {
    maxAttempts: uint(retry.maxAttempts, "retry.maxAttempts", 0xffffffff),
    initialBackoffMs: backoffMs(retry, "initialBackoff"),
    maxBackoffMs: backoffMs(retry, "maxBackoff"),
  };
}

/** @internal */
export function missedToProto(missed: MissedFiringsPolicy | undefined): MissedFirings {
  if (missed === undefined) return MissedFirings.MISSED_FIRINGS_UNSPECIFIED;
  const value = MISSED[missed] as MissedFirings | undefined;
  if (value === undefined) throw invalid(`missed must be "fire_once" or "skip", got ${JSON.stringify(missed)}`);
  return value;
}

/** @internal Scheduled data travels like a method result: Uint8Array raw, anything else as JSON. */
export function encodeData(data: unknown): Payload | undefined {
  if (data === undefined) return undefined;
  try {
    return encodeResult(data);
  } catch (e) {
    throw invalid(`data must be JSON-serialisable or a Uint8Array: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** @internal The data of a scheduled turn (or of a stored reminder). */
export function decodeData(payload: Payload | undefined): unknown {
  return decodeResult(payload);
}

/** @internal */
export function setReminderRequest(type: string, id: string, name: string, options: ReminderOptions): SetReminderRequest {
  const cron = options.cron ?? "";
  const timeZone = (options.timeZone ?? "").trim();
  if (typeof cron !== "string") throw invalid(`cron must be a string such as "0 9 * * MON-FRI", got ${typeof cron}`);
  if (cron !== "" && options.period !== undefined) {
    throw invalid(
      `reminder ${JSON.stringify(name)} has both a period and a cron schedule; give one: period for a fixed interval, cron for calendar times`,
    );
  }
  if (timeZone !== "" && cron.trim() === "") {
    throw invalid(`timeZone ${JSON.stringify(timeZone)} is given without cron; a time zone only says how cron is read`);
  }
  return {
    actor: { type, id },
    name,
    due: toWireTime(options.due ?? DEFAULT_REMINDER_DUE, "due"),
    period: toWirePeriod(options.period),
    repeat: uint(options.repeat, "repeat", 0xffffffff),
    until: toWireTime(options.until, "until"),
    payload: encodeData(options.data),
    retry: retryToProto(options.retry),
    missed: missedToProto(options.missed),
    cron,
    timeZone,
    jitter: options.jitter === undefined ? "" : `${String(toMillis(options.jitter, "jitter"))}ms`,
  };
}

/** @internal */
export function setAlarmRequest(type: string, id: string, at: ScheduleTime, options: AlarmOptions): SetAlarmRequest {
  return { actor: { type, id }, at: toWireTime(at, "at"), payload: encodeData(options.data), retry: retryToProto(options.retry) };
}

/** @internal */
export function setTimerRequest(type: string, id: string, name: string, options: TimerOptions): SetTimerRequest {
  return {
    actor: { type, id },
    name,
    due: `${String(toMillis(options.due ?? DEFAULT_TIMER_DUE, "due", true))}ms`,
    period: toWirePeriod(options.period, "period", false),
    payload: encodeData(options.data),
    keepAlive: options.keepAlive ?? false,
  };
}

function num(v: bigint): number {
  return Number(v);
}

/** @internal The SDK's view of a Reminder message. */
export function reminderFromProto(msg: ReminderMessage): Reminder {
  const retry = msg.retry;
  return {
    actorType: msg.actor?.type ?? "",
    actorId: msg.actor?.id ?? "",
    name: msg.name,
    nextDue: new Date(num(msg.nextDueUnixMs)),
    periodMs: msg.periodMs === 0n ? null : num(msg.periodMs),
    cron: msg.cron === "" ? null : msg.cron,
    timeZone: msg.cron === "" ? null : msg.timeZone || "UTC",
    jitterMs: msg.jitterMs === 0n ? null : num(msg.jitterMs),
    jitterDelayMs: num(msg.jitterDelayMs),
    remaining: msg.remaining === 0 ? null : msg.remaining,
    until: msg.untilUnixMs === 0n ? null : new Date(num(msg.untilUnixMs)),
    data: decodeData(msg.payload),
    retry: {
      maxAttempts: retry?.maxAttempts ?? 0,
      initialBackoffMs: num(retry?.initialBackoffMs ?? 0n),
      maxBackoffMs: num(retry?.maxBackoffMs ?? 0n),
    },
    missed: msg.missed === MissedFirings.MISSED_FIRINGS_SKIP ? "skip" : "fire_once",
    attempts: msg.attempts,
    fired: num(msg.fired),
    alarm: msg.alarm,
    paused: msg.paused,
    tellMethod: msg.tellMethod === "" ? null : msg.tellMethod,
  };
}

/** @internal Issues the scheduling RPCs of the ActorClient service, through a CallTransport (caller.ts). */
export class Scheduler {
  readonly #transport: () => CallTransport;
  readonly #timeout: () => Duration | undefined;
  readonly #tracing: Tracing;

  /**
   * `transport` gives the transport of each call (a grpc-js stub is wrapped
   * with stubTransport): the native core's, or grpc-js.
   */
  constructor(transport: () => CallTransport | ActorClientClient, timeout: () => Duration | undefined = () => undefined, tracing: Tracing = new Tracing()) {
    this.#transport = () => {
      const t = transport();
      return t instanceof grpc.Client ? stubTransport(t) : t;
    };
    this.#timeout = timeout;
    this.#tracing = tracing;
  }

  /** One unary RPC; with `ifNotFound`, NOT_FOUND resolves to it instead of rejecting. */
  async #unary<Req, Resp, Out>(what: string, target: CallTarget, method: UnaryMethod<Req, Resp>, request: Req, convert: (resp: Resp) => Out, ifNotFound?: { value: Out }): Promise<Out> {
    const ms = toMillis(this.#timeout(), "timeout");
    const transport = this.#transport();
    return this.#tracing.call(target, async (md) => {
      let resp: Resp;
      try {
        // A cancelled turn's scheduling ends with it, as its calls do.
        resp = await transport.unary(method, request, md, callDeadline(ms, what), callStop(undefined));
      } catch (err) {
        if (ifNotFound !== undefined && isServiceError(err) && err.code === grpc.status.NOT_FOUND) return ifNotFound.value;
        throw fromRpcError(err, what);
      }
      return convert(resp);
    });
  }

  async setReminder(type: string, id: string, name: string, options: ReminderOptions = {}): Promise<Reminder> {
    const req = setReminderRequest(type, id, name, options);
    return this.#unary(`setReminder ${type}/${id} ${JSON.stringify(name)}`, { rpc: "SetReminder", type, id }, ActorClientService.setReminder, req, reminderFromProto);
  }

  async getReminder(type: string, id: string, name: string): Promise<Reminder | null> {
    return this.#unary<ReminderRef, ReminderMessage, Reminder | null>(
      `getReminder ${type}/${id} ${JSON.stringify(name)}`,
      { rpc: "GetReminder", type, id },
      ActorClientService.getReminder,
      { actor: { type, id }, name },
      reminderFromProto,
      { value: null },
    );
  }

  async deleteReminder(type: string, id: string, name: string): Promise<boolean> {
    return this.#unary(
      `deleteReminder ${type}/${id} ${JSON.stringify(name)}`,
      { rpc: "DeleteReminder", type, id },
      ActorClientService.deleteReminder,
      { actor: { type, id }, name },
      (r) => r.deleted,
    );
  }

  async pauseReminder(type: string, id: string, name: string): Promise<Reminder | null> {
    return this.#unary<ReminderRef, ReminderMessage, Reminder | null>(
      `pauseReminder ${type}/${id} ${JSON.stringify(name)}`,
      { rpc: "PauseReminder", type, id },
      ActorClientService.pauseReminder,
      { actor: { type, id }, name },
      reminderFromProto,
      { value: null },
    );
  }

  async resumeReminder(type: string, id: string, name: string): Promise<Reminder | null> {
    return this.#unary<ReminderRef, ReminderMessage, Reminder | null>(
      `resumeReminder ${type}/${id} ${JSON.stringify(name)}`,
      { rpc: "ResumeReminder", type, id },
      ActorClientService.resumeReminder,
      { actor: { type, id }, name },
      reminderFromProto,
      { value: null },
    );
  }

  async listReminders(options: ListRemindersOptions = {}): Promise<Reminder[]> {
    const type = options.actorType ?? "";
    const id = options.actorId ?? "";
    if (id !== "" && type === "") throw invalid("listReminders: actorId needs actorType");
    const pageSize = uint(options.pageSize, "pageSize", 0xffffffff);
    const out: Reminder[] = [];
    let pageToken = "";
    for (;;) {
      const page = await this.#unary("listReminders", { rpc: "ListReminders", type, id }, ActorClientService.listReminders, { type, id, pageSize, pageToken }, (r) => r);
      for (const r of page.reminders) out.push(reminderFromProto(r));
      if (page.nextPageToken === "" || page.nextPageToken === pageToken) return out;
      pageToken = page.nextPageToken;
    }
  }

  async setAlarm(type: string, id: string, at: ScheduleTime, options: AlarmOptions = {}): Promise<Reminder> {
    const req = setAlarmRequest(type, id, at, options);
    return this.#unary(`setAlarm ${type}/${id}`, { rpc: "SetAlarm", type, id }, ActorClientService.setAlarm, req, reminderFromProto);
  }

  async getAlarm(type: string, id: string): Promise<Reminder | null> {
    return this.#unary<AlarmRef, ReminderMessage, Reminder | null>(
      `getAlarm ${type}/${id}`,
      { rpc: "GetAlarm", type, id },
      ActorClientService.getAlarm,
      { actor: { type, id } },
      reminderFromProto,
      { value: null },
    );
  }

  async deleteAlarm(type: string, id: string): Promise<boolean> {
    return this.#unary(`deleteAlarm ${type}/${id}`, { rpc: "DeleteAlarm", type, id }, ActorClientService.deleteAlarm, { actor: { type, id } }, (r) => r.deleted);
  }

  async setTimer(type: string, id: string, name: string, options: TimerOptions = {}): Promise<void> {
    const req = setTimerRequest(type, id, name, options);
    return this.#unary(`setTimer ${type}/${id} ${JSON.stringify(name)}`, { rpc: "SetTimer", type, id }, ActorClientService.setTimer, req, () => undefined);
  }

  async deleteTimer(type: string, id: string, name: string): Promise<boolean> {
    return this.#unary(
      `deleteTimer ${type}/${id} ${JSON.stringify(name)}`,
      { rpc: "DeleteTimer", type, id },
      ActorClientService.deleteTimer,
      { actor: { type, id }, name },
      (r) => r.deleted,
    );
  }
}
