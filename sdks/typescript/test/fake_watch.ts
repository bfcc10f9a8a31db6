// A fake server of ActorClient.Watch and WatchType, answered by the test, and
// what the watch tests share (events_*.test.ts, watch_reconnect.test.ts).
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { after, before } from "node:test";
import { type ActorEvent as WireEvent, ActorClientService, type WatchRequest, type WatchTypeRequest } from "../src/gen/troupe/v1/client.js";
import { type ActorRef, ContentType } from "../src/gen/troupe/v1/common.js";
import { type ActorEvent, type ActorEventStream, Client, type ClientOptions } from "../src/index.js";
import { bindLoopback, within } from "./helpers.js";

export const WAIT_MS = 10_000;

/** The next `n` events of `stream`, each awaited for at most WAIT_MS. */
export async function take<T>(stream: ActorEventStream<T>, n: number): Promise<ActorEvent<T>[]> {
  const got: ActorEvent<T>[] = [];
  while (got.length < n) {
    const r = await within(WAIT_MS, `event ${String(got.length + 1)} of ${String(n)} from ${stream.actor}`, stream.next());
    assert.equal(r.done, false, `the watch of ${stream.actor} ended after ${String(got.length)} of ${String(n)} events`);
    got.push(r.value);
  }
  return got;
}

export const values = <T>(events: readonly ActorEvent<T>[]): T[] => events.map((e) => e.value);

export type FakeCall = grpc.ServerWritableStream<WatchRequest, WireEvent> | grpc.ServerWritableStream<WatchTypeRequest, WireEvent>;

/** One Watch or WatchType the fake server received, for the test to answer. */
export interface FakeWatch {
  rpc: "watch" | "watchType";
  call: FakeCall;
  /** Resolves when the client leaves (it cancelled the call). */
  cancelled: Promise<void>;
}

export class FakeWatchServer {
  readonly #server = new grpc.Server();
  readonly #waiting: ((w: FakeWatch) => void)[] = [];
  readonly #arrived: FakeWatch[] = [];
  port = 0;

  async start(): Promise<void> {
    const arrive = (rpc: FakeWatch["rpc"], call: FakeCall): void => {
      const cancelled = new Promise<void>((resolve) => {
        call.on("cancelled", () => {
          resolve();
        });
      });
      const w = { rpc, call, cancelled };
      const waiter = this.#waiting.shift();
      if (waiter === undefined) this.#arrived.push(w);
      else waiter(w);
    };
    this.#server.addService(ActorClientService, {
      watch: (call: grpc.ServerWritableStream<WatchRequest, WireEvent>) => {
        arrive("watch", call);
      },
      watchType: (call: grpc.ServerWritableStream<WatchTypeRequest, WireEvent>) => {
        arrive("watchType", call);
      },
    });
    this.port = await bindLoopback(this.#server);
  }

  get address(): string {
    return `127.0.0.1:${String(this.port)}`;
  }

  /** The next Watch or WatchType to arrive. */
  next(): Promise<FakeWatch> {
    const w = this.#arrived.shift();
    if (w !== undefined) return Promise.resolve(w);
    return within(WAIT_MS, "a Watch at the fake server", new Promise<FakeWatch>((resolve) => this.#waiting.push(resolve)));
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

/** An event as the daemon sends it; `actor` left out as a daemon older than ActorEvent.actor does. */
export function wireEvent(value: unknown, seq: number, missedBefore = false, actor?: ActorRef): WireEvent {
  return {
    payload: { data: Buffer.from(JSON.stringify(value)), contentType: ContentType.CONTENT_TYPE_JSON },
    cursor: `00000000000000ab-${String(seq)}`,
    missedBefore,
    publishedUnixMs: 1_700_000_000_000n + BigInt(seq),
    actor,
    traceparent: "",
    tracestate: "",
  };
}

/** Ends a fake Watch with `code`, as the daemon does. */
export function endWith(call: FakeCall, code: grpc.status, details: string): void {
  call.emit("error", { code, details, metadata: new grpc.Metadata() });
}

/**
 * For the enclosing describe: a FakeWatchServer, started in the describe's
 * before() and stopped in its after(), and a Client of it made with `options`
 * (closed with it).
 */
export function fakeWatchSuite(options: Omit<ClientOptions, "address"> = {}): { readonly server: FakeWatchServer; readonly client: Client } {
  const server = new FakeWatchServer();
  let client: Client | undefined;
  before(async () => {
    await server.start();
    client = new Client({ ...options, address: server.address });
  });
  after(() => {
    client?.close();
    server.stop();
  });
  return {
    server,
    get client(): Client {
      assert.ok(client !== undefined, "the client is made in the describe's before()");
      return client;
    },
  };
}
