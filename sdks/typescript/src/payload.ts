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
 * hold (undefined, functions, symbols). Throws TypeError for a Map or Set at any
 * depth, which JSON.stringify would turn into `{}` without a word.
 */
export function dumps(value: unknown): Buffer | undefined {
  const text = jsonText(value, "");
  return text === undefined ? undefined : asciiJson(text);
}

function asciiJson(text: string): Buffer {
  return Buffer.from(text.replace(NON_ASCII, escapeNonAscii), "utf8");
}

/** JSON.stringify, refusing a Map or Set; `path` is where `value` lies, for the error. */
function jsonText(value: unknown, path: string): string | undefined {
  const text = JSON.stringify(value) as string | undefined;
  // A Map or Set comes out as "{}": only then is the value walked to look for
  // one, so most values pay for one substring search.
  if (text?.includes("{}") === true) {
    const found = mapOrSet(value, "");
    if (found !== undefined) throw new TypeError(jsonless(found[1], path + found[0]));
  }
  return text;
}

/**
 * @internal Why `value` itself cannot travel as JSON though JSON.stringify
 * takes it (a Map or a Set); undefined when that is not so. Nested ones are
 * found where the value is encoded (dumps).
 */
export function jsonlessTopLevel(value: unknown): string | undefined {
  return value instanceof Map || value instanceof Set ? jsonless(value, "") : undefined;
}

function jsonless(value: Map<unknown, unknown> | Set<unknown>, path: string): string {
  const [kind, convert] = value instanceof Map ? ["Map", "Object.fromEntries(map), or [...map] for its entries"] : ["Set", "[...set]"];
  const where = path === "" ? `it is a ${kind}` : `it holds a ${kind} at ${path}`;
  return `${where}, which JSON has no form for (it would arrive as {}); convert it first, e.g. with ${convert}`;
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/**
 * Where `value` (the property `key` of its holder) holds a Map or Set as
 * JSON.stringify walks it (through toJSON, over own enumerable keys): the
 * path from `value` and the one found. A walk of its own rather than a second
 * JSON.stringify with a replacer, which costs several times more.
 */
function mapOrSet(value: unknown, key: string): [string, Map<unknown, unknown> | Set<unknown>] | undefined {
  let v = value;
  if (typeof v === "object" && v !== null && typeof (v as { toJSON?: unknown }).toJSON === "function") {
    v = (v as { toJSON(key: string): unknown }).toJSON(key);
  }
  if (typeof v !== "object" || v === null) return undefined;
  if (v instanceof Map || v instanceof Set) return ["", v];
  if (Array.isArray(v)) {
    const items = v as unknown[];
    for (let i = 0; i < items.length; i++) {
      const found = mapOrSet(items[i], String(i));
      if (found !== undefined) return [`[${String(i)}]${found[0]}`, found[1]];
    }
    return undefined;
  }
  const record = v as Record<string, unknown>;
  for (const k of Object.keys(record)) {
    const found = mapOrSet(record[k], k);
    if (found !== undefined) return [`${IDENTIFIER.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`}${found[0]}`, found[1]];
  }
  return undefined;
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
  // In two parts, so that the empty kwargs of a call with none ("{}") send
  // the arguments to no search for a Map or Set (jsonText).
  let argsText: string | undefined;
  let kwText: string | undefined;
  try {
    argsText = jsonText(args, ".args");
    kwText = hasKwargs ? jsonText(kw, ".kwargs") : "{}";
  } catch (e) {
    throw new TypeError(`call arguments must be JSON-serialisable (or one Uint8Array): ${describeError(e)}`);
  }
  if (argsText === undefined || kwText === undefined) throw new TypeError("call arguments must be JSON-serialisable");
  return { data: asciiJson(`{"args":${argsText},"kwargs":${kwText}}`), contentType: ContentType.CONTENT_TYPE_JSON };
}

/** What a parsed JSON value is, in JSON's words. */
function jsonKind(value: unknown): string {
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return "a string";
  if (typeof value === "number") return "a number";
  if (typeof value === "boolean") return String(value);
  return "null";
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
  if (!isPlainObject(obj)) {
    throw new PayloadError(`a JSON call payload must be an object {"args": [...], "kwargs": {...}}, not ${jsonKind(obj)}`);
  }
  const extra = Object.keys(obj)
    .filter((k) => k !== "args" && k !== "kwargs")
    .sort();
  if (extra.length > 0) {
    throw new PayloadError(`a JSON call payload holds only "args" and "kwargs"; this one also has ${extra.map((k) => JSON.stringify(k)).join(", ")}`);
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
