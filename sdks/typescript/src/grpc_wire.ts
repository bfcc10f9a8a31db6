// The app stream on @grpc/grpc-js: the Attach duplex stream, answers batched on
// the way out (packAnswers), large daemon messages put back together from their
// pieces (Pieces), and the turns' calls on a stub sharing its channel.
import * as grpc from "@grpc/grpc-js";
import { type CallTransport, stubTransport } from "./caller.js";
import { withExactDetails } from "./errors.js";
import type { RetryBudget } from "./retry.js";
import { AppHostClient, AppMessage, DaemonMessage, type MessagePart, type Register } from "./gen/troupe/v1/app.js";
import { ActorClientClient } from "./gen/troupe/v1/client.js";
import type { AppWire, WireHandlers } from "./wire.js";

// Answers that are ready together go out in one AppBatch (many tiny HTTP/2 DATA
// frames cost the daemon far more than a few larger ones, and HTTP/2 peers limit
// how many they buffer). A batch stays well under the daemon's 64 MiB message
// limit: at most this many answers and bytes; an answer above ALONE_BYTES goes alone.
const BATCH_MESSAGES = 256;
const BATCH_BYTES = 1024 * 1024;
const ALONE_BYTES = 64 * 1024;
// What each answer adds inside AppBatch beyond its own size: the field tag (1 byte)
// and its length (at most 3 bytes for an answer of ALONE_BYTES or less).
const BATCH_ENTRY_OVERHEAD = 4;
/**
 * The writes that send `ready` (answers queued at once), in order: runs of answers
 * in one AppBatch each (at most BATCH_MESSAGES answers and BATCH_BYTES bytes), an
 * answer larger than ALONE_BYTES alone, a single answer as itself.
 * @internal exported for tests
 */
export function packAnswers(ready: readonly AppMessage[]): AppMessage[] {
  if (ready.length <= 1) return [...ready];
  const writes: AppMessage[] = [];
  let batch: AppMessage[] = [];
  let bytes = 0;
  const close = (): void => {
    const [only] = batch;
    if (batch.length > 1) writes.push({ kind: { $case: "batch", value: { messages: batch } } });
    else if (only !== undefined) writes.push(only);
    batch = [];
    bytes = 0;
  };
  for (const msg of ready) {
    const size = AppMessage.encode(msg).finish().length;
    if (size > ALONE_BYTES) {
      close();
      writes.push(msg);
      continue;
    }
    if (batch.length >= BATCH_MESSAGES || bytes + size + BATCH_ENTRY_OVERHEAD > BATCH_BYTES) close();
    batch.push(msg);
    bytes += size + BATCH_ENTRY_OVERHEAD;
  }
  close();
  return writes;
}

// The most Pieces allocates ahead on a first piece's word (as the Rust side).
const RESERVE_AT_MOST = 256 * 1024 * 1024;

/**
 * @internal The pieces (MessagePart) of the daemon message being received, joined
 * at the last one. `limit`: the app's maxReceiveBytes (undefined: no bound), which
 * the whole respects as it would have arriving in one message.
 */
export class Pieces {
  readonly limit: number | undefined;
  #buf: Buffer | undefined;
  #len = 0;

  constructor(limit: number | undefined) {
    this.limit = limit;
  }

  /** The whole message at its last piece, else undefined; throws a RangeError past the limit. */
  push(part: MessagePart): DaemonMessage | undefined {
    const size = this.#len + part.data.length;
    const announced = Number(part.wholeBytes);
    if (this.limit !== undefined && (size > this.limit || announced > this.limit)) {
      this.#buf = undefined;
      this.#len = 0;
      throw new RangeError(
        `the daemon sent a message in pieces larger than this app's maxReceiveBytes=${String(this.limit)}; ` +
          "raise maxReceiveBytes, or send smaller payloads",
      );
    }
    if (this.#buf === undefined && part.last) return DaemonMessage.decode(part.data);
    // Sized by the first piece's wholeBytes, so each piece is copied in once; without
    // a limit, taken on trust only up to RESERVE_AT_MOST (a larger whole grows).
    let buf = this.#buf ?? Buffer.allocUnsafe(Math.max(Math.min(announced, RESERVE_AT_MOST), size));
    if (buf.length < size) {
      const bigger = Buffer.allocUnsafe(Math.max(size, 2 * buf.length));
      buf.copy(bigger, 0, 0, this.#len);
      buf = bigger;
    }
    part.data.copy(buf, this.#len);
    this.#len = size;
    this.#buf = buf;
    if (!part.last) return undefined;
    this.#buf = undefined;
    this.#len = 0;
    return DaemonMessage.decode(buf.subarray(0, size));
  }
}

/** @internal The grpc-js AppWire. */
export class GrpcWire implements AppWire {
  readonly stub: ActorClientClient;
  readonly calls: CallTransport;
  readonly #host: AppHostClient;
  readonly #debug: (message: string) => void;
  #call: grpc.ClientDuplexStream<AppMessage, DaemonMessage> | undefined;
  #closed = false;
  // Answers not yet written: they go out together at the next flush.
  #outbox: AppMessage[] = [];
  // Writes handed to the stream whose callback has not come yet; while there are
  // some, answers wait in #outbox (they would wait in the stream's buffer anyway).
  #writesInFlight = 0;
  #flushScheduled = false;
  // Whether answers may go out in an AppBatch: the daemon says so in Registered.
  // An older one would end the stream on an AppBatch (to it an empty AppMessage).
  #batchAnswers = false;

  constructor(
    target: string,
    creds: grpc.ChannelCredentials,
    options: grpc.ClientOptions,
    retryBudget: Readonly<Required<RetryBudget>> | false,
    debug: (message: string) => void,
  ) {
    this.#host = new AppHostClient(target, creds, options);
    // Calls made from turns (this.ctx) share the host's channel, and its token.
    this.stub = new ActorClientClient(target, creds, { ...options, channelOverride: this.#host.getChannel() });
    // With the App's retry budget: one per wire, so per app connection.
    this.calls = stubTransport(this.stub, retryBudget);
    this.#debug = debug;
  }

  open(register: Register, handlers: WireHandlers): void {
    const call = this.#host.attach();
    this.#call = call;
    const limit = register.maxReceiveBytes === 0n ? undefined : Number(register.maxReceiveBytes);
    const pieces = new Pieces(limit);
    call.on("data", (msg: DaemonMessage) => {
      if (msg.kind?.$case !== "part") {
        handlers.data(msg);
        return;
      }
      // A large message comes in pieces, with other actors' small messages between
      // them; it runs once its last piece is in.
      let whole: DaemonMessage | undefined;
      try {
        whole = pieces.push(msg.kind.value);
      } catch (e) {
        // As grpc-js ends a stream whose message is over the channel's limit.
        const details = e instanceof Error ? e.message : String(e);
        const err = withExactDetails(
          Object.assign(new Error(details), {
            code: grpc.status.RESOURCE_EXHAUSTED,
            details,
            metadata: new grpc.Metadata(),
          }),
        );
        handlers.error(err);
        call.cancel();
        return;
      }
      if (whole !== undefined) handlers.data(whole);
    });
    call.on("error", (err: grpc.ServiceError) => {
      handlers.error(err);
    });
    call.on("end", () => {
      handlers.end();
    });
    call.write({ kind: { $case: "register", value: register } });
  }

  setBatching(on: boolean): void {
    this.#batchAnswers = on;
  }

  /**
   * The answers queued by the time the stream can take them go out together
   * (see packAnswers; one by one until the daemon has said it takes batches):
   * once the synchronous work under way (this turn of the event loop) is done,
   * or, while earlier writes are still being sent, as soon as they are. Nothing
   * waits for more answers to come.
   */
  send(msg: AppMessage): void {
    if (this.#closed || this.#call === undefined) return;
    this.#outbox.push(msg);
    if (this.#flushScheduled || this.#writesInFlight > 0) return;
    this.#flushScheduled = true;
    setImmediate(() => {
      this.#flushScheduled = false;
      this.#flush();
    });
  }

  close(): void {
    this.#closed = true;
    this.#outbox = [];
    this.#call?.cancel();
    this.stub.close();
    this.#host.close();
  }

  #flush(): void {
    const call = this.#call;
    const ready = this.#outbox;
    this.#outbox = [];
    if (this.#closed || call === undefined) return;
    for (const msg of this.#batchAnswers ? packAnswers(ready) : ready) {
      this.#writesInFlight += 1;
      try {
        call.write(msg, () => {
          this.#writesInFlight -= 1;
          if (this.#writesInFlight === 0 && this.#outbox.length > 0) this.#flush();
        });
      } catch (e) {
        this.#writesInFlight -= 1;
        this.#debug(`troupe: could not send a reply: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
  }
}
