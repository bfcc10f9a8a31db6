// What a Session (session.ts) needs from the connection under it: the Attach
// stream and the client calls its turns make. Two implementations: grpc-js
// (grpc_wire.ts) and the native core (native_wire.ts); the App picks one (core.ts).
import type * as grpc from "@grpc/grpc-js";
import type { CallTransport } from "./caller.js";
import type { AppMessage, DaemonMessage, Register } from "./gen/troupe/v1/app.js";

/** Where the stream's events go: as grpc-js delivers a duplex stream's. */
export interface WireHandlers {
  /** Each message the daemon sends, Registered first; a DaemonBatch may come as one. */
  data(msg: DaemonMessage): void;
  /** The stream failed (or was refused) with this status. */
  error(err: grpc.ServiceError): void;
  /** The daemon closed the stream. */
  end(): void;
}

/** @internal One app stream's connection. */
export interface AppWire {
  /** How the calls turns make reach the daemon: invoke, tell, state reads, reminders, timers. */
  readonly calls: CallTransport;
  /** Opens the stream; `register` is its first message. */
  open(register: Register, handlers: WireHandlers): void;
  /** Whether answers may go out in an AppBatch (the daemon says so in Registered). */
  setBatching(on: boolean): void;
  /** Queues an answer: the answers queued together go out together. Never blocks. */
  send(msg: AppMessage): void;
  /** Ends the stream and the connection; queued answers are dropped. */
  close(): void;
}
