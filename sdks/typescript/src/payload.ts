// The argument mapping shared by all SDKs (written down in docs/payloads.md).
import { ContentType, type Payload } from "./gen/troupe/v1/common.js";

/** A value that survives a JSON round trip unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A call payload or a state value does not follow docs/payloads.md. */
export class PayloadError extends Error {
  override name = "PayloadError";
}

/**
 * Keyword arguments for a call: `proxy.call("incr", kwargs({ by: 5 }))` sends
 * `{"args":[],"kwargs":{"by":5}}`, which a Python actor receives as `incr(by=5)`
 * and a TypeScript actor as one last positional argument `{ by: 5 }`.
 * Only meaningful as the last argument of a call.
 */
export class Kwargs<T extends object = Readonly<Record<string, unknown>>> {
  readonly values: T;
  constructor(values: T) {
    this.values = values;
  }
}

/** Mark an object as keyword arguments (see {@link Kwargs}). */
export function kwargs<T extends object>(values: T): Kwargs<T> {
  return new Kwargs(values);
}

const EMPTY_CALL = Buffer.from('{"args":[],"kwargs":{}}');
const NON_ASCII = /[\u0080-\uffff]/g;

function escapeNonAscii(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/**
 * Compact, ASCII-safe JSON, byte for byte what the Python SDK writes for strings,
 * lists, objects, integers and booleans. Returns undefined for values JSON cannot
 * hold (undefined, functions, symbols).
 */
export function dumps(value: unknown): Buffer | undefined {
  const text = JSON.stringify(value) as string | undefined;
  if (text === undefined) return undefined;
  return Buffer.from(text.replace(NON_ASCII, escapeNonAscii), "utf8");
}

function isBytes(value: unknown): value is Uint8Array {
  return value instanceof Uint8Array;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !isBytes(value);
}

function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Split positional arguments and a trailing {@link Kwargs} marker. */
export function splitArgs(args: readonly unknown[]): [unknown[], Readonly<Record<string, unknown>>] {
  const last = args.at(-1);
  if (last instanceof Kwargs) return [args.slice(0, -1), last.values as Readonly<Record<string, unknown>>];
  return [[...args], {}];
}

/** Encode a call: a lone Uint8Array travels raw, everything else as JSON `{"args", "kwargs"}`. */
export function encodeCall(args: readonly unknown[], kw: Readonly<Record<string, unknown>>): Payload {
  const hasKwargs = Object.keys(kw).length > 0;
  const [first] = args;
  if (args.length === 1 && !hasKwargs && isBytes(first)) {
    return { data: Buffer.from(first.buffer, first.byteOffset, first.byteLength), contentType: ContentType.CONTENT_TYPE_BYTES };
  }
  if (args.length === 0 && !hasKwargs) return { data: EMPTY_CALL, contentType: ContentType.CONTENT_TYPE_JSON };
  let data: Buffer | undefined;
  try {
    data = dumps({ args, kwargs: kw });
  } catch (e) {
    throw new TypeError(`call arguments must be JSON-serialisable (or one Uint8Array): ${describeError(e)}`);
  }
  if (data === undefined) throw new TypeError("call arguments must be JSON-serialisable");
  return { data, contentType: ContentType.CONTENT_TYPE_JSON };
}

/**
 * Decode a call's arguments into the positional arguments of a TypeScript method:
 * `args` one to one, then `kwargs` as one extra last argument when it is non-empty.
 */
export function decodeCall(payload: Payload | undefined): unknown[] {
  if (payload === undefined) return [];
  if (payload.contentType === ContentType.CONTENT_TYPE_BYTES) return [new Uint8Array(payload.data)];
  if (payload.data.length === 0) return [];
  let obj: unknown;
  try {
    obj = JSON.parse(payload.data.toString("utf8"));
  } catch (e) {
    throw new PayloadError(`call payload is not valid JSON: ${describeError(e)}`);
  }
  if (!isPlainObject(obj) || Object.keys(obj).some((k) => k !== "args" && k !== "kwargs")) {
    throw new PayloadError('a JSON call payload must be an object {"args": [...], "kwargs": {...}}');
  }
  const args = obj["args"] ?? [];
  const kw = obj["kwargs"] ?? {};
  if (!Array.isArray(args) || !isPlainObject(kw)) {
    throw new PayloadError('"args" must be a JSON array and "kwargs" a JSON object');
  }
  const out: unknown[] = [...(args as unknown[])];
  if (Object.keys(kw).length > 0) out.push(kw);
  return out;
}

/**
 * Encode a return value (or an event, which travels as one): Uint8Array travels
 * raw, anything else as JSON (undefined is null). `what` names the value in errors.
 */
export function encodeResult(value: unknown, what = "return value"): Payload {
  if (isBytes(value)) {
    return { data: Buffer.from(value.buffer, value.byteOffset, value.byteLength), contentType: ContentType.CONTENT_TYPE_BYTES };
  }
  let data: Buffer | undefined;
  try {
    data = dumps(value === undefined ? null : value);
  } catch (e) {
    throw new TypeError(`${what} must be JSON-serialisable or a Uint8Array: ${describeError(e)}`);
  }
  if (data === undefined) throw new TypeError(`${what} must be JSON-serialisable or a Uint8Array, got ${typeof value}`);
  return { data, contentType: ContentType.CONTENT_TYPE_JSON };
}

/** Decode a reply payload: BYTES as a Uint8Array, JSON as values (empty data is null). */
export function decodeResult(payload: Payload | undefined): unknown {
  if (payload === undefined) return null;
  if (payload.contentType === ContentType.CONTENT_TYPE_BYTES) return new Uint8Array(payload.data);
  if (payload.data.length === 0) return null;
  return JSON.parse(payload.data.toString("utf8")) as unknown;
}

/** Encode one state value as UTF-8 JSON. */
export function encodeState(key: string, value: unknown): Buffer {
  let data: Buffer | undefined;
  try {
    data = dumps(value);
  } catch (e) {
    throw new TypeError(`state[${JSON.stringify(key)}] must be JSON-serialisable: ${describeError(e)}`);
  }
  if (data === undefined) throw new TypeError(`state[${JSON.stringify(key)}] must be JSON-serialisable, got ${typeof value}`);
  return data;
}

/** Decode one state value stored as UTF-8 JSON. */
export function decodeState(data: Uint8Array): unknown {
  return JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8")) as unknown;
}
