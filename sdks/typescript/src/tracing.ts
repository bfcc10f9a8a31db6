// W3C trace context through the daemon: a SERVER span per turn, a CLIENT span per call.
//
// Only @opentelemetry/api is used. Until the application registers an
// OpenTelemetry SDK the spans are non-recording, but a non-recording span still
// carries its parent's context, so a trace that comes in with a turn leaves with
// every call the handler makes: it passes through an app that records nothing.
import * as grpc from "@grpc/grpc-js";
import {
  type Attributes,
  type Context,
  context,
  createTraceState,
  isSpanContextValid,
  isValidSpanId,
  isValidTraceId,
  ROOT_CONTEXT,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
  type TracerProvider,
} from "@opentelemetry/api";
import { AsyncLocalStorage } from "node:async_hooks";
import { SDK_VERSION } from "./address.js";
import type { Turn } from "./gen/troupe/v1/app.js";
import { TurnKind } from "./gen/troupe/v1/common.js";

const INSTRUMENTATION_NAME = "troupe";
const SERVICE = "troupe.v1.ActorClient";
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
// W3C limits: longer headers are dropped rather than parsed.
const MAX_TRACEPARENT = 512;
const MAX_TRACESTATE = 512;

/**
 * The context of the turn running in the current async context. OpenTelemetry's
 * `context.active()` follows async calls only when the application registered a
 * context manager; this store does so regardless, so calls from a handler
 * continue the turn's trace in an app without an OpenTelemetry SDK too.
 */
const turnContext = new AsyncLocalStorage<Context>();

/** @internal The span context in a W3C `traceparent` (and `tracestate`), or undefined if malformed. */
export function parseTraceparent(traceparent: string, tracestate = ""): SpanContext | undefined {
  if (traceparent.length > MAX_TRACEPARENT) return undefined;
  const m = TRACEPARENT.exec(traceparent.trim());
  if (m === null) return undefined;
  const [, version = "", traceId = "", spanId = "", flags = "", rest] = m;
  // Version ff is invalid; version 00 has exactly four fields, later versions may add more.
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (!isValidTraceId(traceId) || !isValidSpanId(spanId)) return undefined;
  const sc: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
  if (tracestate !== "" && tracestate.length <= MAX_TRACESTATE) sc.traceState = createTraceState(tracestate);
  return sc;
}

/** @internal The W3C `traceparent` of a span context (version 00). */
export function formatTraceparent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/**
 * @internal The context holding the remote span of a W3C `traceparent` and
 * `tracestate` the daemon passed on; the root context when there is none or it
 * is malformed.
 */
export function remoteContext(traceparent: string, tracestate: string): Context {
  // On the root, not context.active(): what continues is the daemon's trace,
  // never whatever happens to be active where it is read.
  const sc = traceparent === "" ? undefined : parseTraceparent(traceparent, tracestate);
  return sc === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, sc);
}

/** @internal The context a turn continues: the daemon's span for it, or a fresh root when untraced. */
export function turnParent(msg: Pick<Turn, "traceparent" | "tracestate">): Context {
  return remoteContext(msg.traceparent, msg.tracestate);
}

/** Where calls made now belong: the active context if it has a span, else the running turn's. */
function callerContext(): Context {
  const active = context.active();
  if (trace.getSpan(active) !== undefined) return active;
  return turnContext.getStore() ?? active;
}

function recordError(span: ReturnType<Tracer["startSpan"]>, err: unknown): void {
  if (!span.isRecording()) return;
  const e = err instanceof Error ? err : new Error(String(err));
  span.recordException(e);
  span.setStatus({ code: SpanStatusCode.ERROR, message: `${e.name}: ${e.message}` });
}

const KIND_NAMES: Partial<Record<TurnKind, string>> = {
  [TurnKind.TURN_KIND_UNSPECIFIED]: "call",
  [TurnKind.TURN_KIND_CALL]: "call",
  [TurnKind.TURN_KIND_REMINDER]: "reminder",
  [TurnKind.TURN_KIND_TIMER]: "timer",
  [TurnKind.TURN_KIND_ALARM]: "alarm",
};

const HOOKS: Partial<Record<TurnKind, string>> = {
  [TurnKind.TURN_KIND_REMINDER]: "onReminder",
  [TurnKind.TURN_KIND_TIMER]: "onTimer",
  [TurnKind.TURN_KIND_ALARM]: "onAlarm",
};

/** @internal What a client span is about. */
export interface CallTarget {
  /** The ActorClient RPC (`Invoke`, `SetReminder`, ...). */
  rpc: string;
  type?: string;
  id?: string;
  /** The actor method, for Invoke and Tell. */
  method?: string;
}

/** @internal The tracer of one Client or App: the provider it was given, else the global one. */
export class Tracing {
  readonly #tracer: Tracer;

  constructor(provider?: TracerProvider) {
    // Without a provider this is the API's proxy tracer, which follows the global
    // provider, including one registered after the Client or App was created.
    this.#tracer = (provider ?? trace).getTracer(INSTRUMENTATION_NAME, SDK_VERSION);
  }

  /** Run one ActorClient RPC in a CLIENT span, with the metadata that carries it to the daemon. */
  async call<T>(target: CallTarget, rpc: (metadata: grpc.Metadata) => Promise<T>): Promise<T> {
    const what = target.method ?? target.rpc;
    const attributes: Attributes = { "rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": target.rpc };
    if (target.type !== undefined && target.type !== "") attributes["troupe.actor.type"] = target.type;
    if (target.id !== undefined && target.id !== "") attributes["troupe.actor.id"] = target.id;
    if (target.method !== undefined) attributes["troupe.method"] = target.method;
    const name = target.type !== undefined && target.type !== "" ? `${target.type}/${what}` : `${INSTRUMENTATION_NAME}/${what}`;
    const span = this.#tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, callerContext());
    const metadata = new grpc.Metadata();
    const sc = span.spanContext();
    if (isSpanContextValid(sc)) {
      metadata.set("traceparent", formatTraceparent(sc));
      const state = sc.traceState?.serialize() ?? "";
      if (state !== "") metadata.set("tracestate", state);
    }
    try {
      return await rpc(metadata);
    } catch (e) {
      recordError(span, e);
      throw e;
    } finally {
      span.end();
    }
  }

  /**
   * Run one turn in a SERVER span, child of the trace context the turn carries.
   * The span is active while the handler runs: through `context.with` for
   * applications with a context manager, and through the SDK's own async-local
   * store for the calls the handler makes.
   */
  async turn<T>(msg: Turn, run: () => Promise<T>): Promise<T> {
    const ref = msg.actor ?? { type: "", id: "" };
    const hook = HOOKS[msg.kind];
    const attributes: Attributes = {
      "troupe.actor.type": ref.type,
      "troupe.actor.id": ref.id,
      "troupe.turn.kind": KIND_NAMES[msg.kind] ?? String(msg.kind),
    };
    if (hook === undefined) attributes["troupe.method"] = msg.name;
    else if (msg.kind === TurnKind.TURN_KIND_REMINDER) attributes["troupe.reminder.name"] = msg.name;
    else if (msg.kind === TurnKind.TURN_KIND_TIMER) attributes["troupe.timer.name"] = msg.name;
    const parent = turnParent(msg);
    const span = this.#tracer.startSpan(`${ref.type}/${hook ?? msg.name}`, { kind: SpanKind.SERVER, attributes }, parent);
    const ctx = trace.setSpan(parent, span);
    try {
      return await turnContext.run(ctx, () => context.with(ctx, run));
    } catch (e) {
      recordError(span, e);
      throw e;
    } finally {
      span.end();
    }
  }
}
