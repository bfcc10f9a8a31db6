// invoke and tell on the native core: each call an id, its promise settled when
// the addon hands its answer back, every answer that arrived together settled in
// one callback (core.ts, crates/sdk-node/src/client.rs).
import * as grpc from "@grpc/grpc-js";
import type { CallTransport } from "./caller.js";
import type { NativeClient, NativeStatus } from "./core.js";
import { InvokeRequest, InvokeResponse, TellRequest } from "./gen/troupe/v1/client.js";

interface Waiting {
  resolve(response: Buffer): void;
  reject(err: grpc.ServiceError): void;
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
  return Object.assign(err, { code: status.code, details: status.message, metadata });
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

/**
 * @internal invoke and tell through a NativeClient. While a call is under way a
 * timer holds the process open (the addon's wake-up does not: an idle client
 * must not keep a program from exiting).
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

  invoke(request: InvokeRequest, md: grpc.Metadata, options: Partial<grpc.CallOptions>): Promise<InvokeResponse> {
    const bytes = asBuffer(InvokeRequest.encode(request).finish());
    return this.#start((id) => {
      this.#client.invoke(id, bytes, timeoutMs(options), flatMetadata(md, this.#extra));
    }).then((response) => InvokeResponse.decode(response));
  }

  tell(request: TellRequest, md: grpc.Metadata, options: Partial<grpc.CallOptions>): Promise<void> {
    const bytes = asBuffer(TellRequest.encode(request).finish());
    return this.#start((id) => {
      this.#client.tell(id, bytes, timeoutMs(options), flatMetadata(md, this.#extra));
    }).then(() => undefined);
  }

  /** Ends the calls under way: they reject with CANCELLED. */
  close(): void {
    this.#closed = true;
    this.#client.close();
    clearInterval(this.#keepAlive);
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const w of waiting) w.reject(serviceError({ code: grpc.status.CANCELLED, message: "the client was closed", trailers: [] }));
  }

  #start(send: (id: number) => void): Promise<Buffer> {
    if (this.#closed) return Promise.reject(serviceError({ code: grpc.status.CANCELLED, message: "the client was closed", trailers: [] }));
    // Ids wrap at 2^32 (the addon's u32); a call is long done by the time its id comes round again.
    const id = (this.#next = (this.#next + 1) >>> 0);
    return new Promise<Buffer>((resolve, reject) => {
      send(id);
      if (this.#waiting.size === 0) this.#keepAlive.ref();
      this.#waiting.set(id, { resolve, reject });
    });
  }

  #settle(): void {
    for (const answer of this.#client.take()) {
      const w = this.#waiting.get(answer.id);
      if (w === undefined) continue;
      this.#waiting.delete(answer.id);
      if (answer.error !== undefined && answer.error !== null) w.reject(serviceError(answer.error));
      else w.resolve(answer.response ?? Buffer.alloc(0));
    }
    if (this.#waiting.size === 0) this.#keepAlive.unref();
  }
}
