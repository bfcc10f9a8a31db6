// The ActorClient RPCs on the native core: each call an id, its promise settled
// when the addon hands its answer back, every answer that arrived together
// settled in one callback (core.ts, crates/sdk-node/src/client.rs). The core
// keys and retries invoke and tell itself; their failures come back with what
// the retries did, worded here as on the grpc-js core (retry.ts).
import * as grpc from "@grpc/grpc-js";
import type { CallTransport, Keyed, UnaryMethod } from "./caller.js";
import type { NativeAnswer, NativeClient, NativeStatus } from "./core.js";
import { fromRpcError, InvalidArgument, withExactDetails } from "./errors.js";
import { InvokeRequest, InvokeResponse, TellRequest, TellResponse } from "./gen/troupe/v1/client.js";
import { failureNote, logRetry, type GaveUp } from "./retry.js";
import type { CallStop } from "./turn.js";

interface Waiting {
  resolve(response: Buffer): void;
  reject(err: Error): void;
  /** Names an invoke or tell in its error; undefined for the rarer RPCs, which reject with the status. */
  what: string | undefined;
  /** Forgets the call's CallStop listener. */
  forget: (() => void) | undefined;
}

/** The bytes of an encoded message as a Buffer, without a copy. */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A status from the native core as the grpc-js error the rest of the SDK reads. */
export function serviceError(status: NativeStatus): grpc.ServiceError {
  const metadata = new grpc.Metadata();
  for (let i = 0; i + 1 < status.trailers.length; i += 2) metadata.add(status.trailers[i] ?? "", status.trailers[i + 1] ?? "");
  // As grpc-js words its errors' messages.
  const err = new Error(`${String(status.code)} ${grpc.status[status.code]}: ${status.message}`);
  // The core decodes grpc-message in full: unlike grpc-js's, this text needs no repair.
  return withExactDetails(Object.assign(err, { code: status.code, details: status.message, metadata }));
}

/** A failed call's error: the status for a rarer RPC, else the SDK's error for an invoke or tell, saying how often it was retried. */
function failure(answer: NativeAnswer, status: NativeStatus, what: string | undefined): Error {
  const err = serviceError(status);
  if (what === undefined) return err;
  const r = answer.retried;
  const note =
    r === undefined || r === null
      ? ""
      : failureNote(r.retries, r.elapsedMs, r.lastRefusal ?? undefined, (r.gaveUp ?? undefined) as GaveUp | undefined, status.code === grpc.status.RESOURCE_EXHAUSTED);
  return fromRpcError(err, what, note);
}

/** Call metadata as the addon takes it, flat: the call's entries (trace context), then `extra` (the token). */
function flatMetadata(md: grpc.Metadata, extra: readonly string[]): string[] {
  const flat: string[] = [];
  for (const [key, value] of Object.entries(md.getMap())) {
    // Binary entries (-bin) carry nothing the daemon reads from an SDK.
    if (typeof value === "string") flat.push(key, value);
  }
  flat.push(...extra);
  return flat;
}

/** The call's timeout from now in ms, from its absolute deadline; undefined: none. */
function timeoutMs(options: Partial<grpc.CallOptions>): number | undefined {
  const d = options.deadline;
  if (d === undefined) return undefined;
  const at = d instanceof Date ? d.getTime() : d;
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : undefined;
}

const closed = (): grpc.ServiceError => serviceError({ code: grpc.status.CANCELLED, message: "the client was closed", trailers: [] });

/**
 * @internal The ActorClient RPCs through a NativeClient. While a call is under
 * way a timer holds the process open (the addon's wake-up does not: an idle
 * client must not keep a program from exiting).
 */
export class NativeCalls implements CallTransport {
  readonly #client: NativeClient;
  readonly #extra: readonly string[];
  readonly #waiting = new Map<number, Waiting>();
  readonly #keepAlive: NodeJS.Timeout;
  #next = 0;
  #closed = false;

  /** `make` builds the addon's client with the wake-up; `extra` is flat metadata every call carries. */
  constructor(make: (wake: () => void) => NativeClient, extra: readonly string[] = []) {
    this.#client = make(() => {
      this.#settle();
    });
    this.#extra = extra;
    this.#keepAlive = setInterval(() => undefined, 1 << 30);
    this.#keepAlive.unref();
  }

  invoke(request: InvokeRequest, md: grpc.Metadata, options: Partial<grpc.CallOptions>, keyed: Keyed, stop?: CallStop): Promise<InvokeResponse> {
    const bytes = asBuffer(InvokeRequest.encode(request).finish());
    return this.#start(
      keyed.what,
      (id) => {
        this.#client.invoke(id, bytes, keyed.key, timeoutMs(options), flatMetadata(md, this.#extra), keyed.retry);
      },
      stop,
    ).then((response) => InvokeResponse.decode(response));
  }

  tell(request: TellRequest, md: grpc.Metadata, options: Partial<grpc.CallOptions>, keyed: Keyed, stop?: CallStop): Promise<TellResponse> {
    const bytes = asBuffer(TellRequest.encode(request).finish());
    return this.#start(
      keyed.what,
      (id) => {
        this.#client.tell(id, bytes, keyed.key, timeoutMs(options), flatMetadata(md, this.#extra), keyed.retry);
      },
      stop,
    ).then((response) => TellResponse.decode(response));
  }

  unary<Req, Resp>(method: UnaryMethod<Req, Resp>, request: Req, md: grpc.Metadata, options: Partial<grpc.CallOptions>, stop?: CallStop): Promise<Resp> {
    const bytes = method.requestSerialize(request);
    return this.#start(
      undefined,
      (id) => {
        this.#client.unary(id, method.path, bytes, timeoutMs(options), flatMetadata(md, this.#extra));
      },
      stop,
    ).then((response) => method.responseDeserialize(response));
  }

  /** Ends the calls under way: they reject with CANCELLED. */
  close(): void {
    this.#closed = true;
    this.#client.close();
    clearInterval(this.#keepAlive);
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const w of waiting) {
      w.forget?.();
      w.reject(w.what === undefined ? closed() : fromRpcError(closed(), w.what));
    }
  }

  #start(what: string | undefined, send: (id: number) => void, stop: CallStop | undefined): Promise<Buffer> {
    if (this.#closed) return Promise.reject(what === undefined ? closed() : fromRpcError(closed(), what));
    if (stop?.reason !== undefined) return Promise.reject(stop.reason);
    // Ids wrap at 2^32 (the addon's u32); a call is long done by the time its id comes round again.
    const id = (this.#next = (this.#next + 1) >>> 0);
    return new Promise<Buffer>((resolve, reject) => {
      try {
        send(id);
      } catch (e) {
        // The addon refuses a bad idempotency key before sending anything (code InvalidArg).
        if (e instanceof Error && (e as Error & { code?: unknown }).code === "InvalidArg") throw new InvalidArgument(e.message);
        throw e;
      }
      if (this.#waiting.size === 0) this.#keepAlive.ref();
      const waiting: Waiting = { resolve, reject, what, forget: undefined };
      this.#waiting.set(id, waiting);
      // The addon drops the call, which resets its stream: the daemon sees its caller leave.
      waiting.forget = stop?.listen((reason) => {
        if (!this.#waiting.delete(id)) return;
        this.#client.cancel(id);
        if (this.#waiting.size === 0) this.#keepAlive.unref();
        reject(reason);
      });
    });
  }

  #settle(): void {
    for (const answer of this.#client.take()) {
      const w = this.#waiting.get(answer.id);
      if (w === undefined) continue;
      const r = answer.retrying;
      if (r !== undefined && r !== null) {
        logRetry(w.what ?? "call", r.details, r.retry, r.pauseMs);
        continue;
      }
      this.#waiting.delete(answer.id);
      w.forget?.();
      if (answer.error !== undefined && answer.error !== null) w.reject(failure(answer, answer.error, w.what));
      else w.resolve(answer.response ?? Buffer.alloc(0));
    }
    if (this.#waiting.size === 0) this.#keepAlive.unref();
  }
}
