// The app stream on the native core (crates/sdk-node's NativeSession): Register
// and answers go in serialized, and what the daemon pushes comes out one
// DaemonBatch per wake-up, decoded here in one go. Batching answers for the
// daemon is the core's; this side hands over what is ready together in one call.
import * as grpc from "@grpc/grpc-js";
import type { NativeAddon, NativeConnect, NativeSession } from "./core.js";
import { AppMessage, DaemonBatch, Register, Registered } from "./gen/troupe/v1/app.js";
import { ActorClientClient } from "./gen/troupe/v1/client.js";
import { asBuffer, NativeCalls, serviceError } from "./native_calls.js";
import type { AppWire, WireHandlers } from "./wire.js";

/** @internal The native AppWire. */
export class NativeWire implements AppWire {
  readonly stub: ActorClientClient;
  readonly calls: NativeCalls;
  readonly #session: NativeSession;
  readonly #metadata: readonly string[];
  // A running stream holds the process open, as a grpc-js stream's socket does;
  // the addon's wake-up does not.
  readonly #keepAlive: NodeJS.Timeout;
  #handlers: WireHandlers | undefined;
  #outbox: AppMessage[] = [];
  #flushScheduled = false;
  #closed = false;

  /**
   * `metadata` (flat: the app token) goes with the stream and with the turns'
   * invoke and tell; `stub` carries their other calls on grpc-js.
   */
  constructor(addon: NativeAddon, connect: NativeConnect, metadata: readonly string[], stub: ActorClientClient) {
    this.#session = new addon.NativeSession(connect, () => {
      this.#deliver();
    });
    this.#metadata = metadata;
    this.stub = stub;
    this.calls = new NativeCalls((wake) => this.#session.client(wake), metadata);
    this.#keepAlive = setInterval(() => undefined, 1 << 30);
  }

  open(register: Register, handlers: WireHandlers): void {
    this.#handlers = handlers;
    this.#session.attach(asBuffer(Register.encode(register).finish()), [...this.#metadata]);
  }

  setBatching(): void {
    // The core batches as the daemon's Registered allows.
  }

  send(msg: AppMessage): void {
    if (this.#closed) return;
    this.#outbox.push(msg);
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    setImmediate(() => {
      this.#flushScheduled = false;
      this.#flush();
    });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#outbox = [];
    clearInterval(this.#keepAlive);
    this.#session.close();
    this.calls.close();
    this.stub.close();
    // As a cancelled grpc-js stream does: the stream's end, reported once, is
    // what ends the Session's run().
    const handlers = this.#handlers;
    this.#handlers = undefined;
    handlers?.error(serviceError({ code: grpc.status.CANCELLED, message: "Cancelled on client", trailers: [] }));
  }

  #flush(): void {
    const ready = this.#outbox;
    this.#outbox = [];
    if (this.#closed || ready.length === 0) return;
    // One call for what is ready together: an AppBatch, which the core unpacks and re-batches.
    const [only] = ready;
    const msg: AppMessage = ready.length === 1 && only !== undefined ? only : { kind: { $case: "batch", value: { messages: ready } } };
    this.#session.send(asBuffer(AppMessage.encode(msg).finish()));
  }

  #isClosed(): boolean {
    return this.#closed;
  }

  #deliver(): void {
    const handlers = this.#handlers;
    if (handlers === undefined || this.#closed) return;
    const events = this.#session.take();
    if (events.registered !== undefined && events.registered !== null) {
      handlers.data({ kind: { $case: "registered", value: Registered.decode(events.registered) } });
    }
    // A handler may have closed the wire (a Registered it refuses).
    if (events.messages !== undefined && events.messages !== null && !this.#isClosed()) {
      handlers.data({ kind: { $case: "batch", value: DaemonBatch.decode(events.messages) } });
    }
    const end = events.end;
    if (end === undefined || end === null || this.#isClosed()) return;
    this.#handlers = undefined;
    if (end.stage === "ended" && end.status.code === grpc.status.OK) handlers.end();
    else handlers.error(serviceError(end.status));
  }
}
