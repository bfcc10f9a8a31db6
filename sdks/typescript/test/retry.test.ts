// Idempotency keys and retries, against an in-process fake of the daemon's
// ActorClient API that records the key of every attempt and fails the first
// ones as told.
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, beforeEach, describe, test } from "node:test";
import { Caller } from "../src/caller.js";
import { Client, Context, DeadlineExceeded, type HandleOptions, InvalidArgument, NotFound, Overloaded, TroupeError, Unavailable } from "../src/index.js";
import { ActorClientClient, ActorClientService, type InvokeRequest, type InvokeResponse, type TellRequest, type TellResponse } from "../src/gen/troupe/v1/client.js";
import { Delivery } from "../src/gen/troupe/v1/common.js";
import { encodeResult } from "../src/payload.js";
import { callKey, madeKeyRetentionMs } from "../src/retry.js";
import type { Scheduler } from "../src/schedule.js";
import { currentTurn, TurnScope } from "../src/turn.js";
import { bindLoopback, within } from "./helpers.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

interface Attempt {
  rpc: "invoke" | "tell";
  key: string;
  delivery: Delivery | undefined;
  /** Whether the attempt said its key was new. */
  newKey: boolean;
  /** How long it asked the daemon to keep the answer (0: the whole retention). */
  keyRetentionMs: bigint;
  /** When it came (performance.now()). */
  at: number;
}

/**
 * Answers invoke with "ok" and tell with nothing, after failing the first
 * `failFirst` attempts with `code` (and `pushback` as gRPC's retry pushback
 * trailer, when set).
 */
class FakeActorClient {
  readonly #server = new grpc.Server();
  failFirst = 0;
  code = grpc.status.UNAVAILABLE;
  pushback: string | undefined = undefined;
  attempts: Attempt[] = [];
  address = "";

  async start(): Promise<void> {
    const answer = <T>(attempt: Attempt, callback: grpc.sendUnaryData<T>, ok: T): void => {
      this.attempts.push(attempt);
      if (this.attempts.length <= this.failFirst) {
        const metadata = new grpc.Metadata();
        if (this.pushback !== undefined) metadata.set("grpc-retry-pushback-ms", this.pushback);
        callback({ code: this.code, details: "fake daemon restarting", metadata }, null);
      } else callback(null, ok);
    };
    this.#server.addService(ActorClientService, {
      invoke: (call: grpc.ServerUnaryCall<InvokeRequest, InvokeResponse>, callback: grpc.sendUnaryData<InvokeResponse>) => {
        answer({ rpc: "invoke", key: call.request.idempotencyKey, delivery: undefined, newKey: call.request.newKey, keyRetentionMs: call.request.keyRetentionMs, at: performance.now() }, callback, { payload: encodeResult("ok") });
      },
      tell: (call: grpc.ServerUnaryCall<TellRequest, TellResponse>, callback: grpc.sendUnaryData<TellResponse>) => {
        answer({ rpc: "tell", key: call.request.idempotencyKey, delivery: call.request.delivery, newKey: call.request.newKey, keyRetentionMs: call.request.keyRetentionMs, at: performance.now() }, callback, { reminder: "", dueUnixMs: 0n });
      },
    });
    const port = await bindLoopback(this.#server);
    this.address = `127.0.0.1:${port}`;
  }

  keys(): string[] {
    return this.attempts.map((a) => a.key);
  }

  newKeys(): boolean[] {
    return this.attempts.map((a) => a.newKey);
  }

  keyRetentionsMs(): bigint[] {
    return this.attempts.map((a) => a.keyRetentionMs);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.#server.tryShutdown(() => {
        resolve();
      });
    });
  }
}

/** A Context over its own Caller on the fake: the calls a turn makes through `this.ctx`. */
function contextOn(address: string): { ctx: Context; close: () => void } {
  const stub = new ActorClientClient(address, grpc.credentials.createInsecure());
  // Reminders are not used here; the scheduler is never touched.
  const ctx = new Context(new Caller(stub), undefined as unknown as Scheduler, "me", "1");
  return { ctx, close: () => { stub.close(); } };
}

test("a call's key is a fresh UUID, or the caller's own", () => {
  const a = callKey(undefined);
  assert.match(a, UUID);
  assert.notEqual(a, callKey(undefined));
  assert.equal(callKey("order-42/charge"), "order-42/charge");
  assert.equal(callKey("ü".repeat(128)), "ü".repeat(128)); // 256 bytes
});

test("a made key's answer is kept for the call's retries and a minute", () => {
  assert.equal(madeKeyRetentionMs(undefined), 70_000n, "10 s of retries without a timeout");
  assert.equal(madeKeyRetentionMs(300_000), 360_000n);
  assert.equal(madeKeyRetentionMs(2_500.2), 62_501n);
  assert.equal(madeKeyRetentionMs(Infinity), 0n, "too long to count: the whole retention");
});

test("bad keys are refused before anything is sent", () => {
  for (const [key, says] of [["", /empty/], ["x".repeat(257), /257 bytes/], ["ü".repeat(129), /258 bytes/], ["a\nb", /control characters/]] as const) {
    assert.throws(() => callKey(key), (e: unknown) => e instanceof InvalidArgument && says.test(e.message));
  }
});

describe("against a fake daemon", () => {
  const fake = new FakeActorClient();
  before(async () => {
    await fake.start();
  });
  after(async () => {
    await fake.stop();
  });
  beforeEach(() => {
    fake.attempts = [];
    fake.failFirst = 0;
    fake.code = grpc.status.UNAVAILABLE;
    fake.pushback = undefined;
  });

  test("every invoke and tell carries its own key, from a client and from a turn's context", async () => {
    const client = new Client({ address: fake.address, timeout: 5 });
    const { ctx, close } = contextOn(fake.address);
    try {
      assert.equal(await client.invoke("t", "1", "m"), "ok");
      assert.equal(await client.actor("t", "1").call("m"), "ok");
      await client.tell("t", "1", "m");
      await client.tell("t", "1", "m", undefined, undefined, { durable: true });
      await client.actor("t", "1", { durable: false }).tell("m");
      assert.equal(await ctx.invoke("t", "1", "m"), "ok");
      assert.equal(await ctx.actor("t", "1").call("m"), "ok");
      await ctx.tell("t", "1", "m", undefined, undefined, { durable: true });
    } finally {
      client.close();
      close();
    }
    const keys = fake.keys();
    assert.equal(keys.length, 8);
    for (const key of keys) assert.match(key, UUID);
    assert.equal(new Set(keys).size, keys.length, "one key per logical call");
    assert.deepEqual(
      fake.attempts.filter((a) => a.rpc === "tell").map((a) => a.delivery),
      [Delivery.DELIVERY_UNSPECIFIED, Delivery.DELIVERY_DURABLE, Delivery.DELIVERY_BEST_EFFORT, Delivery.DELIVERY_DURABLE],
    );
  });

  test("an explicit key is sent unchanged; a handle refuses one", async () => {
    const client = new Client({ address: fake.address, timeout: 5 });
    const { ctx, close } = contextOn(fake.address);
    try {
      await client.invoke("t", "1", "m", undefined, undefined, { idempotencyKey: "k-invoke" });
      await client.tell("t", "1", "m", undefined, undefined, { durable: true, idempotencyKey: "k-tell" });
      await ctx.invoke("t", "1", "m", undefined, undefined, { idempotencyKey: "k-ctx-invoke" });
      await ctx.tell("t", "1", "m", undefined, undefined, { idempotencyKey: "k-ctx-tell" });
      await assert.rejects(client.invoke("t", "1", "m", undefined, undefined, { idempotencyKey: "" }), InvalidArgument);
      // As a JavaScript caller could: the type has no such field.
      const keyed = { idempotencyKey: "shared" } as Parameters<Client["actor"]>[2];
      assert.throws(() => client.actor("t", "1", keyed), (e: unknown) => e instanceof InvalidArgument && /invoke\(\) or tell\(\)/.test(e.message));
      assert.throws(() => ctx.actor("t", "1", keyed), InvalidArgument);
    } finally {
      client.close();
      close();
    }
    assert.deepEqual(fake.keys(), ["k-invoke", "k-tell", "k-ctx-invoke", "k-ctx-tell"]);
  });

  for (const rpc of ["invoke", "tell", "durable tell", "handle"] as const) {
    test(`UNAVAILABLE is retried with the same key (${rpc})`, async () => {
      fake.failFirst = 3;
      const client = new Client({ address: fake.address, timeout: 10 });
      try {
        if (rpc === "invoke") assert.equal(await client.invoke("t", "1", "m"), "ok");
        else if (rpc === "handle") assert.equal(await client.actor("t", "1").call("m"), "ok");
        else await client.tell("t", "1", "m", undefined, undefined, { durable: rpc === "durable tell" });
      } finally {
        client.close();
      }
      const keys = fake.keys();
      assert.equal(keys.length, 4);
      assert.match(keys[0] ?? "", UUID);
      assert.deepEqual(keys, Array<string | undefined>(4).fill(keys[0]));
      // Only the first attempt says its fresh key is new: a retry's may be recorded.
      assert.deepEqual(fake.newKeys(), [true, false, false, false]);
      // No one but these retries sends the key: its answer need outlast only
      // the call's 10 s timeout, and a minute for the daemon's flush.
      const kept = fake.keyRetentionsMs();
      assert.deepEqual(kept, Array<bigint | undefined>(4).fill(kept[0]));
      assert.ok((kept[0] ?? 0n) > 69_000n && (kept[0] ?? 0n) <= 70_000n, `${kept[0]}`);
    });
  }

  test("an explicit key is the one retried", async () => {
    fake.failFirst = 2;
    const client = new Client({ address: fake.address, timeout: 10 });
    try {
      await client.invoke("t", "1", "m", undefined, undefined, { idempotencyKey: "mine" });
    } finally {
      client.close();
    }
    assert.deepEqual(fake.keys(), ["mine", "mine", "mine"]);
    assert.deepEqual(fake.newKeys(), [false, false, false], "a caller's key may have been sent before");
    assert.deepEqual(fake.keyRetentionsMs(), [0n, 0n, 0n], "so its answer keeps the daemon's whole retention");
  });

  test("a caller's key is kept as long as the caller says", async () => {
    fake.failFirst = 2;
    const client = new Client({ address: fake.address, timeout: 10 });
    const { ctx, close } = contextOn(fake.address);
    try {
      await client.invoke("t", "1", "m", undefined, undefined, { idempotencyKey: "job-7", idempotencyRetention: "1h" });
      await client.tell("t", "1", "m", undefined, undefined, { durable: true, idempotencyKey: "k", idempotencyRetention: 90 });
      await ctx.invoke("t", "1", "m", undefined, undefined, { idempotencyKey: "k", idempotencyRetention: "PT2M" });
      await ctx.tell("t", "1", "m", undefined, undefined, { idempotencyKey: "k", idempotencyRetention: 0.0004 });
    } finally {
      client.close();
      close();
    }
    // Every retry asks the same: the key may come again that long after any of
    // them. Under a millisecond is one, not 0 (the wire's "the whole retention").
    assert.deepEqual(fake.keyRetentionsMs(), [3_600_000n, 3_600_000n, 3_600_000n, 90_000n, 120_000n, 1n]);
    assert.deepEqual(fake.newKeys(), Array<boolean>(6).fill(false));
  });

  test("a bad idempotencyRetention is refused before anything is sent", async () => {
    const client = new Client({ address: fake.address, timeout: 5 });
    try {
      for (const [key, retention, says] of [
        [undefined, "1h", /pass it with idempotencyKey/],
        ["k", 0, /longer than zero/],
        ["k", "-5s", /cannot be negative/],
        ["k", "soon", /not a duration/],
      ] as const) {
        const options = { idempotencyKey: key, idempotencyRetention: retention };
        const isRefusal = (e: unknown): boolean => e instanceof InvalidArgument && says.test(e.message);
        await assert.rejects(client.invoke("t", "1", "m", undefined, undefined, options), isRefusal);
        await assert.rejects(client.tell("t", "1", "m", undefined, undefined, options), isRefusal);
      }
      // A handle's calls are many: a key, or a retention for one, has no place there.
      const handleOptions = { idempotencyRetention: "1h" } as unknown as HandleOptions;
      assert.throws(() => client.actor("t", "1", handleOptions), (e: unknown) => e instanceof InvalidArgument && /idempotencyRetention/.test(e.message));
    } finally {
      client.close();
    }
    assert.deepEqual(fake.attempts, []);
  });

  test("retries end at the deadline with the last error, saying how often", async () => {
    fake.failFirst = Number.MAX_SAFE_INTEGER;
    const client = new Client({ address: fake.address, timeout: 0.6 });
    const started = performance.now();
    try {
      const err = await within(5_000, "the call to give up", client.invoke("t", "1", "m").then(() => undefined, (e: unknown) => e));
      assert.ok(err instanceof Unavailable, String(err));
      const keys = fake.keys();
      assert.ok(keys.length >= 3, `${keys.length} attempts`);
      assert.deepEqual(keys, Array<string | undefined>(keys.length).fill(keys[0]));
      assert.match(err.message, new RegExp(`retried ${keys.length - 1} times`));
      assert.match(err.message, /fake daemon restarting/);
      assert.match(err.message, /longer timeout/);
    } finally {
      client.close();
    }
    assert.ok(performance.now() - started < 3_000, "retries outlived the deadline");
  });

  test("retries inside a turn end at its caller's deadline", async () => {
    fake.failFirst = Number.MAX_SAFE_INTEGER;
    const { ctx, close } = contextOn(fake.address);
    const scope = new TurnScope({}, "me/1", "work", false, undefined, BigInt(Date.now() + 500));
    try {
      const call = currentTurn.run(scope, () => ctx.invoke("t", "1", "m"));
      await within(5_000, "the call to give up", assert.rejects(call, (e: unknown) => e instanceof Unavailable && /retried/.test(e.message)));
    } finally {
      close();
    }
    assert.ok(fake.attempts.length >= 2);
  });

  for (const rpc of ["invoke", "durable tell"] as const) {
    test(`a refused ${rpc} with a pushback is retried no sooner than it asks`, async () => {
      fake.failFirst = 2;
      fake.code = grpc.status.RESOURCE_EXHAUSTED;
      fake.pushback = "300";
      const client = new Client({ address: fake.address, timeout: 10 });
      try {
        if (rpc === "invoke") assert.equal(await client.invoke("t", "1", "m"), "ok");
        else await client.tell("t", "1", "m", undefined, undefined, { durable: true });
      } finally {
        client.close();
      }
      const keys = fake.keys();
      assert.equal(keys.length, 3);
      assert.deepEqual(keys, [keys[0], keys[0], keys[0]]);
      // The backoff alone would wait 50 and 100 ms.
      const gaps = fake.attempts.slice(1).map((a, i) => a.at - (fake.attempts[i]?.at ?? 0));
      assert.ok(gaps.every((gap) => gap >= 299), `gaps ${gaps.join(", ")}`);
    });
  }

  test("a refusal that outlasts the deadline says the daemon kept refusing", async () => {
    fake.failFirst = Number.MAX_SAFE_INTEGER;
    fake.code = grpc.status.RESOURCE_EXHAUSTED;
    fake.pushback = "100";
    const client = new Client({ address: fake.address, timeout: 0.6 });
    try {
      const err = await client.invoke("t", "1", "m").then(
        () => assert.fail("the call succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof Overloaded, String(err));
      assert.match(err.message, /fake daemon restarting/);
      assert.match(err.message, /retried .* kept refusing it for lack of room/);
    } finally {
      client.close();
    }
    assert.ok(fake.attempts.length >= 3);
  });

  test("each retry prints a line with NODE_DEBUG=troupe, on the core in use", async () => {
    fake.failFirst = 2;
    fake.code = grpc.status.RESOURCE_EXHAUSTED;
    fake.pushback = "100";
    // Another process, so that NODE_DEBUG is read afresh; asynchronous, so that the
    // fake in this process answers it.
    const program = `
      import { Client } from ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)};
      const client = new Client({ address: ${JSON.stringify(fake.address)}, timeout: 10 });
      console.log(await client.invoke("t", "1", "m"));
      client.close();`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", program], {
      env: { ...process.env, NODE_DEBUG: "troupe" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await within(30_000, "the child's call", new Promise<number | null>((resolve) => child.on("exit", resolve)));
    assert.equal(code, 0, stderr);
    assert.equal(stdout.trim(), "ok");
    for (const n of [1, 2]) {
      assert.match(stderr, new RegExp(`TROUPE \\d+: invoke t/1\\.m: RESOURCE_EXHAUSTED: fake daemon restarting; retry ${String(n)} in \\d+ ms, same idempotency key`), stderr);
    }
  });

  for (const pushback of [undefined, "-1", "soon"]) {
    test(`RESOURCE_EXHAUSTED with pushback ${String(pushback)} is final`, async () => {
      fake.failFirst = 1;
      fake.code = grpc.status.RESOURCE_EXHAUSTED;
      fake.pushback = pushback;
      const client = new Client({ address: fake.address, timeout: 5 });
      try {
        await assert.rejects(client.invoke("t", "1", "m"), (e: unknown) => e instanceof Overloaded && !e.message.includes("retried"));
      } finally {
        client.close();
      }
      assert.equal(fake.attempts.length, 1);
    });
  }

  for (const [code, type] of [
    [grpc.status.RESOURCE_EXHAUSTED, Overloaded],
    [grpc.status.NOT_FOUND, NotFound],
    [grpc.status.DEADLINE_EXCEEDED, DeadlineExceeded],
    [grpc.status.INTERNAL, TroupeError],
  ] as const) {
    test(`${grpc.status[code]} is never retried`, async () => {
      fake.failFirst = 1;
      fake.code = code;
      const client = new Client({ address: fake.address, timeout: 5 });
      try {
        await assert.rejects(client.invoke("t", "1", "m"), type);
        fake.failFirst = 2;
        await assert.rejects(client.tell("t", "1", "m", undefined, undefined, { durable: true }), type);
      } finally {
        client.close();
      }
      assert.equal(fake.attempts.length, 2);
    });
  }

  test("retry: false sends each call once", async () => {
    fake.failFirst = 1;
    const client = new Client({ address: fake.address, timeout: 5, retry: false });
    try {
      await assert.rejects(client.invoke("t", "1", "m"), (e: unknown) => e instanceof Unavailable && !e.message.includes("retried"));
      assert.equal(await client.invoke("t", "1", "m"), "ok");
    } finally {
      client.close();
    }
    const keys = fake.keys();
    assert.equal(keys.length, 2);
    assert.notEqual(keys[0], keys[1], "each call is its own, with its own key");
  });
});

test("retry must be a boolean", () => {
  assert.throws(() => new Client({ address: "127.0.0.1:1", retry: "no" as unknown as boolean }), /retry must be true or false/);
});
