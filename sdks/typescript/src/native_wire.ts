// The app on the native core (crates/sdk-node's NativeSession), which keeps
// the app attached itself: it re-connects with backoff, asks this side for
// each attempt's credentials, and reports each registration (a generation),
// the daemon's pushes (one DaemonBatch per wake-up, decoded here in one go)
// and each outage. NativeApp runs one Session (session.ts) per generation on
// a GenerationWire, and says what happened as the grpc-js loop in app.ts does.
// Batching answers for the daemon is the core's; this side hands over what is
// ready together in one call, tagged with its generation so an answer of a
// lost stream is dropped instead of reaching the next one.
import * as grpc from "@grpc/grpc-js";
import type { NativeAddon, NativeCredentials, NativeEvent, NativeSession, NativeStatus } from "./core.js";
import { AppMessage, DaemonBatch, Register, Registered } from "./gen/troupe/v1/app.js";
import { asBuffer, NativeCalls, serviceError } from "./native_calls.js";
import { ConnectionLost, describe, logNoConnection, refusal, Session, type SessionHost } from "./session.js";
import { TroupeError } from "./errors.js";
import type { RetryBudget } from "./retry.js";
import type { AppWire, WireHandlers } from "./wire.js";

/** One attempt's credentials, read by the App just now. */
export interface AttemptCredentials {
  /** Flat metadata (the app token) for the stream and the turns' calls. */
  metadata: readonly string[];
  ca?: Buffer | undefined;
  cert?: Buffer | undefined;
  key?: Buffer | undefined;
}

/** What NativeApp needs from its App. */
export interface NativeAppOptions {
  address: string;
  maxReceiveBytes: number | undefined;
  initialDelayMs: number;
  maxDelayMs: number;
  register: Register;
  /** Called before each attempt; a throw ends the app with that error. */
  credentials(): AttemptCredentials;
  /** The daemon's address as the sessions name it in messages. */
  target: string;
  /** The size of each connection's budget for the turns' calls, or false for none. */
  retryBudget: Readonly<Required<RetryBudget>> | false;
}

/** @internal One generation's AppWire: a stream the core registered. */
class GenerationWire implements AppWire {
  readonly calls: NativeCalls;
  readonly #session: NativeSession;
  readonly #generation: number;
  readonly #registered: Registered;
  #handlers: WireHandlers | undefined;
  #outbox: AppMessage[] = [];
  #flushScheduled = false;
  #closed = false;

  constructor(session: NativeSession, generation: number, registered: Registered, calls: NativeCalls) {
    this.#session = session;
    this.#generation = generation;
    this.#registered = registered;
    this.calls = calls;
  }

  /** The stream is registered already: its Registered is the first message the Session sees. */
  open(_register: Register, handlers: WireHandlers): void {
    this.#handlers = handlers;
    handlers.data({ kind: { $case: "registered", value: this.#registered } });
  }

  setBatching(): void {
    // The core batches as the daemon's Registered allows.
  }

  deliver(batch: DaemonBatch): void {
    if (this.#closed) return;
    this.#handlers?.data({ kind: { $case: "batch", value: batch } });
  }

  /** The stream ended: reported once, as grpc-js reports a stream's end. */
  lost(outage: string, status: NativeStatus): void {
    const handlers = this.#handlers;
    this.#handlers = undefined;
    if (outage === "closed") handlers?.end();
    else handlers?.error(serviceError(status));
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
    this.calls.close();
    // As a cancelled grpc-js stream does: the end, reported once, settles the Session's run().
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
    this.#session.send(this.#generation, asBuffer(AppMessage.encode(msg).finish()));
  }
}

interface Generation {
  generation: number;
  wire: GenerationWire;
  session: Session;
}

/** @internal One App run on the native core. */
export class NativeApp {
  readonly #host: SessionHost;
  readonly #options: NativeAppOptions;
  #native: NativeSession | undefined;
  #current: Generation | undefined;
  #attempt: AttemptCredentials | undefined;
  #credentialsError: Error | undefined;
  #settle: { resolve: () => void; reject: (e: Error) => void } | undefined;
  #stopped = false;

  constructor(host: SessionHost, options: NativeAppOptions) {
    this.#host = host;
    this.#options = options;
  }

  /** Resolves when stopped; rejects when the app is refused for good or its credentials fail. */
  run(addon: NativeAddon): Promise<void> {
    const o = this.#options;
    // A running app holds the process open, as a grpc-js stream's socket does; the
    // addon's wake-up does not.
    const alive = setInterval(() => undefined, 1 << 30);
    return new Promise<void>((resolve, reject) => {
      this.#settle = { resolve, reject };
      this.#native = new addon.NativeSession(
        { address: o.address, maxReceiveBytes: o.maxReceiveBytes, initialDelayMs: o.initialDelayMs, maxDelayMs: o.maxDelayMs },
        asBuffer(Register.encode(o.register).finish()),
        () => this.#credentials(),
        () => {
          this.#deliver();
        },
        o.retryBudget === false ? null : { ...o.retryBudget },
      );
      if (this.#stopped) this.#native.stop();
    }).finally(() => {
      clearInterval(alive);
    });
  }

  /** Ends the stream, an attempt or the pause between two at once. */
  stop(): void {
    this.#stopped = true;
    this.#native?.stop();
  }

  /** On the event loop, before each attempt: the App's credentials as they are now. */
  #credentials(): NativeCredentials {
    try {
      const attempt = this.#options.credentials();
      this.#attempt = attempt;
      return { metadata: [...attempt.metadata], ca: attempt.ca, cert: attempt.cert, key: attempt.key };
    } catch (e) {
      this.#credentialsError = e instanceof Error ? e : new TroupeError(String(e));
      return { metadata: [], failed: describe(e) };
    }
  }

  #deliver(): void {
    const native = this.#native;
    if (native === undefined) return;
    for (const event of native.take()) this.#handle(native, event);
  }

  #handle(native: NativeSession, event: NativeEvent): void {
    const generation = event.generation ?? 0;
    switch (event.kind) {
      case "registered":
        // After a stop or a failure nothing is hosted any more (and the core has no channel to give).
        if (this.#settle === undefined || this.#stopped || event.data === undefined || event.data === null) break;
        try {
          this.#registered(native, generation, Registered.decode(event.data));
        } catch (e) {
          this.#fail(e instanceof Error ? e : new Error(String(e)));
        }
        break;
      case "messages":
        if (this.#current?.generation === generation && event.data !== undefined && event.data !== null) {
          this.#current.wire.deliver(DaemonBatch.decode(event.data));
        }
        break;
      case "lost":
        this.#lost(event.outage ?? "failed", event.status ?? { code: grpc.status.UNKNOWN, message: "", trailers: [] }, event.first === true);
        break;
      case "ended":
        this.#ended(event.why ?? "stopped", event.status ?? undefined);
        break;
    }
  }

  #registered(native: NativeSession, generation: number, registered: Registered): void {
    const o = this.#options;
    const metadata = this.#attempt?.metadata ?? [];
    const calls = new NativeCalls((wake) => native.client(wake), metadata);
    const wire = new GenerationWire(native, generation, registered, calls);
    const session = new Session({ ...this.#host, openWire: () => wire }, o.target);
    this.#current = { generation, wire, session };
    session.run().catch((e: unknown) => {
      // A lost stream is reported by the core's "lost" (handled there); anything else
      // (a daemon of another API version) ends the app.
      if (!(e instanceof ConnectionLost)) this.#fail(e instanceof Error ? e : new Error(String(e)));
    });
  }

  #lost(outage: string, status: NativeStatus, first: boolean): void {
    const current = this.#current;
    this.#current = undefined;
    const lost = outage === "closed" ? new ConnectionLost("daemon closed the stream") : serviceError(status);
    if (current !== undefined) {
      current.wire.lost(outage, status);
      // The daemon re-activates these actors from stored state on the next stream.
      current.session.close();
    }
    this.#host.setRegistered(false);
    logNoConnection(this.#host.logger, this.#host.address, lost, first);
  }

  #ended(why: string, status: NativeStatus | undefined): void {
    this.#current?.session.close();
    this.#current = undefined;
    const message = status?.message ?? "";
    if (why === "refused" && status !== undefined) {
      const err = serviceError(status);
      this.#fail(refusal(err) ?? new ConnectionLost(describe(err)));
    } else if (why === "credentials") {
      this.#fail(this.#credentialsError ?? new TroupeError(message));
    } else if (why === "connect") {
      this.#fail(new Error(message));
    } else {
      const settle = this.#settle;
      this.#settle = undefined;
      settle?.resolve();
    }
  }

  #fail(err: Error): void {
    this.#native?.stop();
    this.#current?.session.close();
    this.#current = undefined;
    const settle = this.#settle;
    this.#settle = undefined;
    settle?.reject(err);
  }
}
