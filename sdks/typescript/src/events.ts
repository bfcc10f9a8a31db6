// Watching events (docs/events.md): one actor's (ActorClient.Watch) or every
// actor's of a type (ActorClient.WatchType), as the stream a Client opens, an
// async iterable. It always runs on a @grpc/grpc-js channel, on the native core
// too, whose client has no server streams (a watch carries few messages, so its
// speed does not matter).
import * as grpc from "@grpc/grpc-js";
import type { Context as OtelContext } from "@opentelemetry/api";
import { debuglog } from "node:util";
import { fromRpcError, rpcDetails, TroupeError } from "./errors.js";
import { type ActorClientClient, type ActorEvent as WireEvent, ActorClientService } from "./gen/troupe/v1/client.js";
import { decodeResult } from "./payload.js";
import { remoteContext } from "./tracing.js";
import { abortError } from "./turn.js";

/** One event an actor published (`this.ctx.publish(value)`), as a watcher receives it. */
export interface ActorEvent<T = unknown> {
  /** What the actor published: JSON-decoded, or a Uint8Array for bytes (as a method's result). */
  value: T;
  /** The type of the actor that published it. */
  actorType: string;
  /** The id of the actor that published it: in a {@link Client.watchType} stream, which of the type's actors. */
  actorId: string;
  /**
   * Where the event is in the watched stream: the same watch resumes after it
   * with `{ after: cursor }` (`watch(type, id, ...)` with a cursor of that
   * actor's watch, `watchType(type, ...)` with one of that type's watch; the
   * two kinds of cursor are not interchangeable).
   */
  cursor: string;
  /**
   * Events published before this one (since the watch began, or since its
   * `after` cursor) may not have reached this watcher: it fell behind by more
   * than the daemon holds, the actor moved to another daemon or that daemon
   * restarted, or the cursor was one the daemon no longer knows.
   */
  missedBefore: boolean;
  /** When the turn that published it ended, in unix milliseconds by the clock of the daemon that ran it. */
  publishedAtUnixMs: number;
  /**
   * The W3C `traceparent` of the turn that published it, as that turn was
   * handed it (the daemon's turn span with trace export on, else the caller's
   * own); `""` when that turn was not traced. {@link eventContext} continues it.
   */
  traceparent: string;
  /** The W3C `tracestate` that goes with {@link ActorEvent.traceparent} (`""` if none). */
  tracestate: string;
}

/**
 * The OpenTelemetry context of the turn that published `event`, so that the
 * work it causes joins that call's trace: start a span in it to make it a
 * child of the publishing turn (`tracer.startActiveSpan("project", {},
 * eventContext(event), ...)`), or link to it (`links: [{ context:
 * trace.getSpanContext(eventContext(event)) }]`, when defined).
 *
 * The root context when the turn was not traced: a span started in it begins
 * a new trace (rather than joining whatever is active), and
 * `trace.getSpanContext` of it is undefined.
 */
export function eventContext(event: Pick<ActorEvent, "traceparent" | "tracestate">): OtelContext {
  return remoteContext(event.traceparent, event.tracestate);
}

/** Options of {@link Client.watch} and {@link Client.watchType}. */
export interface WatchOptions {
  /**
   * Resume after this event: the `cursor` of an {@link ActorEvent} a watch
   * received. The stream then starts with the events published since that
   * the daemon still holds; left out (or empty), only events published from now on.
   */
  after?: string;
  /**
   * Aborting it ends the watch: `watch()` (or `watchType()`) rejects with the
   * signal's reason while it waits for the daemon, and afterwards the
   * iteration throws it.
   */
  signal?: AbortSignal;
  /**
   * Keep watching across a daemon restart or a broken connection (default
   * false): once the watch has begun, a stream that fails with
   * {@link Unavailable} or that the daemon ends (it shut down) is opened again
   * by itself, after the cursor of the last event received (or the `after`
   * given, when none came yet), waiting 100 ms doubling to 5 s (jittered)
   * between attempts, with no limit: it lasts until closed. The iteration
   * throws only the other errors ({@link InvalidArgument}, {@link NotFound},
   * {@link Unauthenticated}...), a re-open's included. The daemon marks
   * `missedBefore` on the first event after a re-open when events may be lost
   * (it restarted, say); a watch that had no cursor yet (no event, no `after`)
   * re-opens from then on, and the SDK marks its next event `missedBefore`
   * itself. The first open is not retried: `watch()` rejects as without it.
   * Each re-open is logged with `NODE_DEBUG=troupe`.
   */
  reconnect?: boolean;
}

/** Options of {@link Client.watchType}: those of a watch, and which actors. */
export interface WatchTypeOptions extends WatchOptions {
  /**
   * Only the actors whose id starts with this (`"tenant-42/"`: one tenant's
   * carts); each daemon leaves the others' events out before they travel.
   * Resume such a watch with the same prefix. Left out (or empty): every actor.
   */
  idPrefix?: string;
}

// Events the stream holds for a reader that does not keep up before it stops
// reading from the connection (HTTP/2 flow control then holds the daemon back),
// and how few it must hold again before reading resumes.
const PAUSE_AT = 32;
const RESUME_BELOW = 8;

// A reconnecting watch's wait before each re-open: doubling from the first to
// the last across outages, each jittered by a factor in [0.5, 1]; back to the
// first only once the daemon shows it watches again (an event comes, or a
// stream stays open for the longest wait), so a daemon that answers each
// re-open and then drops the stream is not re-opened ten times a second.
const REOPEN_FIRST_MS = 100;
const REOPEN_MAX_MS = 5000;

// NODE_DEBUG=troupe prints it, as the client's retries (retry.ts).
const debug = debuglog("troupe");

/** @internal What a reconnecting watch waits with: the real timers and Math.random, or a test's. */
export interface WatchClock {
  /** Calls `callback` after `ms`; the function returned cancels it. */
  after(ms: number, callback: () => void): () => void;
  /** A number in [0, 1). */
  random(): number;
  /** Milliseconds since some fixed point, never going back. */
  now(): number;
}

const systemClock: WatchClock = {
  after(ms, callback) {
    const timer = setTimeout(callback, ms);
    return () => {
      clearTimeout(timer);
    };
  },
  random: () => Math.random(),
  now: () => performance.now(),
};

/**
 * The events of one watched actor, in the order it published them, or of every
 * actor of a watched type (each actor's in the order it published them,
 * different actors' interleaved as they come):
 * `for await (const event of stream)`. Ends when {@link close}d (a `break` out
 * of the loop closes it too). When the daemon ends the watch (it shut down,
 * the connection broke...) the iteration throws the SDK's error for it
 * ({@link Unavailable}, say) once the events received before it were read; a
 * new watch with `after` set to the last cursor read resumes, or the watch
 * does so itself when opened with `{ reconnect: true }` ({@link WatchOptions}).
 * It can be iterated once.
 */
export class ActorEventStream<T = unknown> implements AsyncIterableIterator<ActorEvent<T>> {
  /**
   * What is watched: `type/id` of the watched actor ({@link Client.watch}), or
   * the type name for a watch of every actor of a type ({@link Client.watchType}).
   * Each event's `actorType` and `actorId` name the actor that published it.
   */
  readonly actor: string;
  readonly #target: WatchTarget;
  /** The call the events come from: the first, then each re-open's of a reconnecting watch. */
  #call: grpc.ClientReadableStream<WireEvent> | undefined;
  readonly #queue: ActorEvent<T>[] = [];
  #waiter: { resolve: (r: IteratorResult<ActorEvent<T>>) => void; reject: (e: Error) => void } | undefined;
  /** Set once the watch is over; `error` is thrown by the next read, once. */
  #ended: { error: Error | undefined } | undefined;
  #paused = false;
  #onEnd: (() => void) | undefined;

  /** @internal Opened by {@link openWatch}, which feeds it. */
  constructor(target: WatchTarget, onEnd: () => void) {
    this.actor = target.id === undefined ? target.type : `${target.type}/${target.id}`;
    this.#target = target;
    this.#onEnd = onEnd;
  }

  /**
   * @internal The call events now come from (the first, or a re-open's): held
   * back at once while the reader has not caught up with those already queued.
   */
  attach(call: grpc.ClientReadableStream<WireEvent>): void {
    this.#call = call;
    if (this.#paused) call.pause();
  }

  /** Whether the watch is over (closed, or ended by the daemon); events received before may still be read. */
  get ended(): boolean {
    return this.#ended !== undefined;
  }

  /** @internal An event from the daemon. */
  push(wire: WireEvent): void {
    if (this.#ended !== undefined) return;
    const what = watchLabel(this.#target);
    // A daemon older than ActorEvent.actor leaves it out of a one-actor watch,
    // whose actor is known; a type watch needs it (and such a daemon has no WatchType).
    const publisher = wire.actor ?? (this.#target.id === undefined ? undefined : { type: this.#target.type, id: this.#target.id });
    if (publisher === undefined) {
      this.#fail(
        new TroupeError(
          `${what}: the daemon sent the event at cursor ${JSON.stringify(wire.cursor)} without the actor that published it; ` +
            "run a daemon of the same version as the SDK",
        ),
      );
      return;
    }
    let event: ActorEvent<T>;
    try {
      event = {
        value: decodeResult(wire.payload) as T,
        actorType: publisher.type,
        actorId: publisher.id,
        cursor: wire.cursor,
        missedBefore: wire.missedBefore,
        publishedAtUnixMs: Number(wire.publishedUnixMs),
        traceparent: wire.traceparent,
        tracestate: wire.tracestate,
      };
    } catch (e) {
      this.#fail(
        new TroupeError(
          `${what}: the event ${publisher.type}/${publisher.id} published at cursor ${JSON.stringify(wire.cursor)} is not JSON (${e instanceof Error ? e.message : String(e)}), ` +
            "so it was not published with a troupe SDK's ctx.publish; watch again with { after } set to that cursor to skip it",
        ),
      );
      return;
    }
    const waiter = this.#waiter;
    if (waiter !== undefined) {
      this.#waiter = undefined;
      waiter.resolve({ value: event, done: false });
      return;
    }
    this.#queue.push(event);
    if (!this.#paused && this.#queue.length >= PAUSE_AT) {
      this.#paused = true;
      this.#call?.pause();
    }
  }

  /** Ends the watch with `error` and leaves the call: the daemon sent what the stream cannot pass on. */
  #fail(error: Error): void {
    this.end(error);
    this.#call?.cancel();
  }

  /** @internal The watch is over: `error` undefined for a plain end (or a close). Only the first end counts. */
  end(error: Error | undefined): void {
    if (this.#ended !== undefined) return;
    this.#ended = { error };
    const onEnd = this.#onEnd;
    this.#onEnd = undefined;
    onEnd?.();
    const waiter = this.#waiter;
    this.#waiter = undefined;
    if (waiter === undefined) return;
    // A reader waits only on an empty queue: the end is what it reads.
    this.#ended.error = undefined;
    if (error === undefined) waiter.resolve({ value: undefined, done: true });
    else waiter.reject(error);
  }

  next(): Promise<IteratorResult<ActorEvent<T>>> {
    const event = this.#queue.shift();
    if (event !== undefined) {
      if (this.#paused && this.#queue.length < RESUME_BELOW && this.#ended === undefined) {
        this.#paused = false;
        // Between a reconnecting watch's calls, the next one starts unpaused.
        this.#call?.resume();
      }
      return Promise.resolve({ value: event, done: false });
    }
    const ended = this.#ended;
    if (ended !== undefined) {
      // The error is thrown once; later reads see the end.
      const error = ended.error;
      ended.error = undefined;
      return error === undefined ? Promise.resolve({ value: undefined, done: true }) : Promise.reject(error);
    }
    if (this.#waiter !== undefined) {
      return Promise.reject(new TypeError(`${watchLabel(this.#target)}: next() was called again before the previous read settled; read the stream from one loop`));
    }
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  /** Ends the iteration (a `break` out of `for await`): closes the watch. */
  return(): Promise<IteratorResult<ActorEvent<T>>> {
    this.close();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Stop watching: the daemon stops sending and the iteration ends. Idempotent. */
  close(): void {
    if (this.#ended !== undefined) return;
    this.end(undefined);
    this.#call?.cancel();
  }

  /** For `using stream = await client.watch(...)` (or `client.watchType(...)`). */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** @internal What a watch watches: one actor (`id` set: Watch), or every actor of `type` (WatchType). */
export interface WatchTarget {
  type: string;
  id?: string | undefined;
  /** A type watch's: only the actors whose id starts with it. */
  idPrefix?: string | undefined;
}

/** How errors name a watch: `watch bus/b7`, `watchType bus`, `watchType bus idPrefix="t1/"`. */
function watchLabel(target: WatchTarget): string {
  if (target.id !== undefined) return `watch ${target.type}/${target.id}`;
  const prefix = target.idPrefix ?? "";
  return prefix === "" ? `watchType ${target.type}` : `watchType ${target.type} idPrefix=${JSON.stringify(prefix.slice(0, 64))}`;
}

/**
 * @internal Opens a watch of `target` on `stub`: resolves once the daemon sent
 * the response headers, which it does once it watches the actor (the type, for
 * WatchType), so that every event published after that reaches the stream. Rejects with the SDK's error
 * (fromRpcError) when the daemon refuses the watch, with the signal's reason, or
 * when the client is closed first. With `options.reconnect`, a watch under way
 * whose call fails with UNAVAILABLE or ends is opened again (WatchOptions.reconnect),
 * waiting on `clock` in between.
 */
export function openWatch<T>(
  stub: ActorClientClient,
  target: WatchTarget,
  options: WatchOptions,
  /** The client's open watches, which its close() ends: this one is in it until it ends. */
  watches: Set<() => void>,
  clock: WatchClock = systemClock,
): Promise<ActorEventStream<T>> {
  const what = watchLabel(target);
  const after: unknown = options.after ?? "";
  if (typeof after !== "string") {
    return Promise.reject(new TypeError(`${what}: after must be the cursor (a string) of an event a watch received, not ${String(after)}`));
  }
  const reconnect: unknown = options.reconnect ?? false;
  if (typeof reconnect !== "boolean") {
    return Promise.reject(new TypeError(`${what}: reconnect must be true or false, not ${String(reconnect)}`));
  }
  const signal = options.signal;
  if (signal?.aborted === true) return Promise.reject(abortError(signal.reason));
  const { type, id } = target;
  const idPrefix: unknown = target.idPrefix ?? "";
  if (typeof idPrefix !== "string") {
    return Promise.reject(new TypeError(`${what}: idPrefix must be a string, not ${String(idPrefix)}`));
  }
  // No deadline, not even the client's timeout: a watch lasts until it is closed.
  const open = (from: string): grpc.ClientReadableStream<WireEvent> => {
    if (id === undefined) {
      const method = ActorClientService.watchType;
      return stub.makeServerStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, { type, after: from, idPrefix }, new grpc.Metadata(), {});
    }
    const method = ActorClientService.watch;
    return stub.makeServerStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, { actor: { type, id }, after: from }, new grpc.Metadata(), {});
  };
  // Said when a daemon without WatchType refuses one, instead of a bare UNIMPLEMENTED.
  const unimplementedNote = id === undefined ? "; this daemon has no WatchType: run a daemon of the same version as the SDK" : "";
  return new Promise<ActorEventStream<T>>((resolve, reject) => {
    let began = false;
    /** The call under way (or the last one, while a reconnecting watch waits to re-open). */
    let current: grpc.ClientReadableStream<WireEvent> | undefined;
    /** Where a re-open resumes: the `after` given, then the cursor of each event received. */
    let cursor = after;
    let reopenMs = REOPEN_FIRST_MS;
    /** When the current call began (its headers came), by `clock.now()`. */
    let openedAt = 0;
    /** Cancels the wait before the next re-open, while there is one. */
    let cancelWait: (() => void) | undefined;
    /** A re-open without a cursor resumed from then on: its first event says some may be missing. */
    let markMissed = false;
    const onAbort = (): void => {
      fail(abortError(signal?.reason));
      current?.cancel();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const stream = new ActorEventStream<T>(target, () => {
      signal?.removeEventListener("abort", onAbort);
      watches.delete(closeWithClient);
      cancelWait?.();
      cancelWait = undefined;
    });
    // The client's close() ends the iteration as the stream's own close() does.
    const closeWithClient = (): void => {
      if (!began) reject(new TroupeError(`${what}: the client was closed before the daemon began the watch`));
      stream.close();
    };
    watches.add(closeWithClient);
    // Until the headers came, a failure rejects watch(); after, the iteration
    // throws it. The first end counts: the CANCELLED of our own cancel comes
    // after the close or abort that caused it.
    function fail(error: Error): void {
      if (!began) reject(error);
      stream.end(began ? error : undefined);
    }
    /** A reconnecting watch's call failed with UNAVAILABLE (`err`) or ended (undefined): open another after a while. */
    const reopenLater = (err: grpc.ServiceError | undefined): void => {
      if (stream.ended) return;
      if (clock.now() - openedAt >= REOPEN_MAX_MS) reopenMs = REOPEN_FIRST_MS;
      const waitMs = reopenMs * (0.5 + 0.5 * clock.random());
      reopenMs = Math.min(reopenMs * 2, REOPEN_MAX_MS);
      if (cursor === "") markMissed = true;
      const why = err === undefined ? "the daemon ended the stream" : `${grpc.status[err.code]}: ${rpcDetails(err) || "no details"}`;
      const from = cursor === "" ? "from then on (no event yet)" : `after ${cursor}`;
      debug("%s: %s; re-opening %s in %d ms", what, why, from, Math.round(waitMs));
      cancelWait = clock.after(waitMs, () => {
        cancelWait = undefined;
        if (stream.ended) return;
        try {
          connect();
        } catch (e) {
          fail(e instanceof Error ? e : new Error(String(e)));
        }
      });
    };
    /** Opens a call (the first, or a re-open) and feeds the stream from it. */
    const connect = (): void => {
      const call = open(cursor);
      current = call;
      stream.attach(call);
      // Whether this call's end (its error, or its plain end) was handled: only the first counts.
      let over = false;
      call.on("metadata", () => {
        if (stream.ended) return;
        openedAt = clock.now();
        if (began) return;
        began = true;
        resolve(stream);
      });
      call.on("data", (event: WireEvent) => {
        reopenMs = REOPEN_FIRST_MS;
        if (markMissed) {
          markMissed = false;
          stream.push({ ...event, missedBefore: true });
        } else {
          stream.push(event);
        }
        cursor = event.cursor;
      });
      call.on("error", (err: grpc.ServiceError) => {
        if (over) return;
        // Events that came before the status may still wait in the stream's own
        // buffer (the reader was behind): they are read first (read() hands each to
        // "data"). Those grpc-js itself still held for a paused call are dropped with
        // the status; a reconnecting watch resumes after the last one received, so it
        // gets them again, and a plain watch's reader gets them by resuming.
        while (call.readableLength > 0) {
          // Typed as an event, but null when nothing can be read after all.
          const read: unknown = call.read();
          if (read === null) break;
        }
        over = true;
        if (reconnect && began && err.code === grpc.status.UNAVAILABLE) reopenLater(err);
        else fail(fromRpcError(err, what, err.code === grpc.status.UNIMPLEMENTED ? unimplementedNote : ""));
      });
      // After the events before it were read: a paused call ends once the reader caught up.
      call.on("end", () => {
        if (over) return;
        over = true;
        if (!began) fail(new TroupeError(`${what}: the daemon ended the watch before it began; watch again`));
        else if (reconnect) reopenLater(undefined);
        else stream.end(undefined);
      });
    };
    connect();
  });
}
