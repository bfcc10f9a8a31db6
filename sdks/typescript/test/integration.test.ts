// End-to-end tests: the SDK on both sides of the real daemon binary.
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { after, before, describe, test } from "node:test";
import {
  Actor,
  ActorError,
  actor,
  App,
  Client,
  DeadlineExceeded,
  InvalidArgument,
  kwargs,
  method,
  NotFound,
  Overloaded,
  Unavailable,
} from "../src/index.js";
import { ActorClientClient } from "../src/gen/troupe/v1/client.js";
import { ContentType } from "../src/gen/troupe/v1/common.js";
import { type Daemon, host, quietLogger, signal, startDaemon, within } from "./helpers.js";

class BadValue extends Error {}

@actor("counter")
class Counter extends Actor<{ count: number }> {
  @method
  async incr(by = 1): Promise<number> {
    await Promise.resolve();
    const count = this.state.get("count", 0) + by;
    this.state.set("count", count);
    return count;
  }

  @method({ readonly: true })
  get(): number {
    return this.state.get("count", 0);
  }

  @method
  failAfterWrite(value: number): never {
    this.state.set("count", value);
    throw new BadValue(`bad value ${value}`);
  }

  @method
  echoBytes(data: Uint8Array): Uint8Array {
    return Uint8Array.from(data).reverse();
  }

  @method
  named(options: { by: number; label?: string }): string {
    return `${options.label ?? "count"}+${options.by}`;
  }
}

describe("hosting and calling", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await startDaemon();
    client = new Client({ address: daemon.address, timeout: 20 });
  });
  after(async () => {
    client.close();
    await daemon.dispose();
  });

  test("a decorated actor is called from a separate client", async () => {
    const app = await host(daemon.address, Counter);
    try {
      const c1 = client.actor<Counter>("counter", "c1");
      assert.equal(await c1.call("incr", 5), 5);
      assert.equal(await c1.call("incr"), 6);
      assert.equal(await client.actor(Counter, "c1").call("incr", 1), 7);
      assert.equal(await client.invoke("counter", "c1", "incr", [3]), 10);
      // A plain object is keyword arguments (as a Python dict); a TS method gets them as its last argument.
      assert.equal(await client.invoke("counter", "c1", "named", { by: 2, label: "x" }), "x+2");
      assert.equal(await client.actor("counter", "c1").call("named", kwargs({ by: 4 })), "count+4");
      await client.tell("counter", "c1", "incr", [100]);
      // The mailbox is ordered, so this call runs after the told one.
      assert.equal(await c1.call("get"), 110);
      assert.deepEqual(await client.getState("counter", "c1"), { count: 110 });
      assert.deepEqual(await client.getState("counter", "c1", [], { raw: true }), { count: new Uint8Array(Buffer.from("110")) });
      assert.deepEqual(await client.getState("counter", "other"), {});
      const reversed = await client.invoke("counter", "c1", "echoBytes", new Uint8Array([0, 97, 98, 99]));
      assert.deepEqual(reversed, new Uint8Array([99, 98, 97, 0]));
    } finally {
      await app.close();
    }
  });

  test("turns of one actor are serialised: 100 concurrent incr end at 100", async () => {
    let inside = 0;
    let overlaps = 0;
    @actor("serial")
    class Serial extends Actor<{ n: number }> {
      @method
      async incr(): Promise<number> {
        inside += 1;
        if (inside > 1) overlaps += 1;
        // Yield to the event loop so an overlapping turn, if the daemon sent one, would run now.
        for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
        const n = this.state.get("n", 0) + 1;
        this.state.set("n", n);
        inside -= 1;
        return n;
      }
    }
    const app = await host(daemon.address, Serial);
    try {
      const proxy = client.actor<Serial>("serial", "s1");
      const results = await Promise.all(Array.from({ length: 100 }, () => proxy.call("incr")));
      assert.deepEqual(
        [...results].sort((a, b) => a - b),
        Array.from({ length: 100 }, (_, i) => i + 1),
      );
      assert.equal(overlaps, 0);
      assert.deepEqual(await client.getState("serial", "s1"), { n: 100 });
    } finally {
      await app.close();
    }
  });

  test("turns of different actors run concurrently (10 meet at a barrier)", async () => {
    let arrived = 0;
    const everyoneIn = signal();
    @actor("meet")
    class Meet extends Actor {
      @method
      async rendezvous(): Promise<string> {
        arrived += 1;
        if (arrived === 10) everyoneIn.resolve();
        // Completes only if all 10 turns are in flight at once.
        await within(10_000, "all 10 actors to be in a turn", everyoneIn.promise);
        return this.id;
      }
    }
    const app = await host(daemon.address, Meet);
    try {
      const ids = Array.from({ length: 10 }, (_, i) => `m${i}`);
      const results = await Promise.all(ids.map((id) => client.actor<Meet>("meet", id).call("rendezvous")));
      assert.deepEqual(results, ids);
    } finally {
      await app.close();
    }
  });

  test("an actor calls other actors inside a turn (this.ctx)", async () => {
    let seenChain: readonly string[] = [];
    @actor("back")
    class Back extends Actor {
      @method
      whoCalls(): number {
        // The chain the daemon delivered with this turn: callers first, this actor last.
        seenChain = this.ctx.chain;
        return seenChain.length;
      }
    }
    @actor("front")
    class Front extends Actor<{ last: number }> {
      @method
      async addTwice(target: string, by: number): Promise<number[]> {
        const first = await this.ctx.actor<Counter>("counter", target).call("incr", by);
        const second = (await this.ctx.invoke("counter", target, "incr", [by])) as number;
        await this.ctx.tell("counter", target, "incr", [0]);
        this.state.set("last", second);
        return [first, second];
      }

      @method
      async viaBack(): Promise<number> {
        return this.ctx.actor(Back, "b").call("whoCalls");
      }

      @method
      async relayFailure(): Promise<void> {
        await this.ctx.actor(Counter, "x").call("failAfterWrite", 13);
      }
    }
    const app = await host(daemon.address, Counter, Front, Back);
    try {
      // A call from inside a turn carries the turn's chain; the daemon adds the callee.
      assert.equal(await client.actor<Front>("front", "f").call("viaBack"), 2);
      assert.deepEqual(seenChain, ["front/f", "back/b"]);
      // A direct client call starts a chain of its own.
      assert.equal(await client.actor(Back, "b").call("whoCalls"), 1);
      assert.deepEqual(seenChain, ["back/b"]);
      assert.deepEqual(await client.actor<Front>("front", "f").call("addTwice", "t1", 2), [2, 4]);
      assert.deepEqual(await client.getState("front", "f"), { last: 4 });
      await assert.rejects(client.actor<Front>("front", "f").call("relayFailure"), (err: unknown) => {
        assert.ok(err instanceof ActorError);
        assert.equal(err.remoteType, "BadValue");
        assert.equal(err.message, "bad value 13");
        // What the relaying actor passed on leads to the one that threw.
        assert.match(err.remoteStack, /bad value 13\n\s+at \S*failAfterWrite /);
        return true;
      });
    } finally {
      await app.close();
    }
  });

  test("a thrown error becomes ActorError and the turn's state changes roll back", async () => {
    const app = await host(daemon.address, Counter);
    try {
      const c = client.actor<Counter>("counter", "err");
      assert.equal(await c.call("incr", 1), 1);
      await assert.rejects(c.call("failAfterWrite", 99), (err: unknown) => {
        assert.ok(err instanceof ActorError);
        assert.equal(err.remoteType, "BadValue");
        assert.equal(err.message, "bad value 99");
        assert.equal(err.kind, "raised");
        assert.match(String(err), /BadValue: bad value 99/);
        // Where it threw: the app's stack, top first, as the daemon passed it on;
        // the caller's own stack leads on to it.
        assert.match(err.remoteStack, /^\w+: bad value 99\n\s+at \S*failAfterWrite /);
        // ...the actor's frames only, not the SDK's that ran the turn.
        assert.doesNotMatch(err.remoteStack, /session\.js/);
        assert.ok(err.stack?.endsWith(err.remoteStack.trimEnd()), err.stack);
        // Printed, it names the remote type first and shows the remote stack once.
        const shown = inspect(err);
        assert.match(shown, /^ActorError: BadValue: bad value 99\n/);
        assert.equal(shown.split("failAfterWrite (").length - 1, 1, shown);
        return true;
      });
      // Neither the stored state nor the instance's own view kept the failed write.
      assert.deepEqual(await client.getState("counter", "err"), { count: 1 });
      assert.equal(await c.call("get"), 1);
      await assert.rejects(client.invoke("counter", "err", "noSuchMethod"), (err: unknown) => {
        assert.ok(err instanceof ActorError);
        assert.equal(err.remoteType, "TypeError");
        assert.equal(err.kind, "no-such-method");
        assert.match(err.message, /incr/);
        return true;
      });
      @actor("thrower")
      class Thrower extends Actor {
        @method
        range(): never {
          throw new RangeError("out of range");
        }
        @method
        typed(): never {
          throw new TypeError("not a number");
        }
      }
      const app2 = await host(daemon.address, Thrower);
      try {
        await assert.rejects(client.actor<Thrower>("thrower", "t").call("range"), { name: "ActorError", remoteType: "RangeError", message: "out of range" });
        // A TypeError the method throws is no caller's mistake: the kind tells it from one.
        await assert.rejects(client.actor<Thrower>("thrower", "t").call("typed"), { name: "ActorError", remoteType: "TypeError", kind: "raised" });
      } finally {
        await app2.close();
      }
    } finally {
      await app.close();
    }
  });

  test("a failed tell is logged in the app, where it threw", async () => {
    const warned: string[] = [];
    const app = new App({ actors: [Counter], address: daemon.address, appName: "node-test", logger: { ...quietLogger, warn: (m: string) => warned.push(m) } });
    await app.start({ timeout: 15 });
    try {
      // A best-effort tell's error reaches no caller: the app logs it.
      await client.tell("counter", "told", "failAfterWrite", [7]);
      // One turn of an actor at a time, in order per caller: once this call is
      // answered, the tell's turn has ended.
      assert.equal(await client.actor<Counter>("counter", "told").call("get"), 0);
      const raised = warned.filter((m) => m.includes(" raised "));
      assert.equal(raised.length, 1, warned.join("\n"));
      assert.match(raised[0] ?? "", /^troupe: tell failAfterWrite of counter\/told raised BadValue: bad value 7 \(no caller hears of it\)\n\w+: bad value 7\n\s+at \S*failAfterWrite /);
      // An invoke's error goes to its caller, and is not logged here too.
      await assert.rejects(client.actor<Counter>("counter", "told").call("failAfterWrite", 8), ActorError);
      assert.equal(warned.filter((m) => m.includes(" raised ")).length, 1, warned.join("\n"));
    } finally {
      await app.close();
    }
  });

  test("a call payload that is not {args, kwargs} fails the turn with PayloadError", async () => {
    const app = await host(daemon.address, Counter);
    try {
      // The SDK never sends this; a hand-made JSON payload from another client could.
      const stub = new ActorClientClient(daemon.address, grpc.credentials.createInsecure());
      try {
        const err = await new Promise<grpc.ServiceError | null>((resolve) => {
          stub.invoke(
            { actor: { type: "counter", id: "p" }, method: "incr", payload: { data: Buffer.from("[1]"), contentType: ContentType.CONTENT_TYPE_JSON }, metadata: {}, chain: undefined, idempotencyKey: "", newKey: false, keyRetentionMs: 0n },
            (e) => {
              resolve(e);
            },
          );
        });
        assert.ok(err !== null);
        assert.equal(err.metadata.get("troupe-error-type")[0], "PayloadError");
        assert.equal(err.metadata.get("troupe-failure-kind")[0], "bad-arguments");
      } finally {
        stub.close();
      }
    } finally {
      await app.close();
    }
  });

  test("onActivate and onDeactivate run, and their state changes are kept", async () => {
    const deactivated = signal();
    @actor("hooks", { idleTimeout: "300ms" })
    class Hooks extends Actor<{ activations: number; deactivated: boolean }> {
      override onActivate(): void {
        this.state.set("activations", this.state.get("activations", 0) + 1);
      }

      override async onDeactivate(): Promise<void> {
        await Promise.resolve();
        this.state.set("deactivated", true);
        deactivated.resolve();
      }

      @method
      activations(): number {
        return this.state.get("activations", 0);
      }
    }
    const app = await host(daemon.address, Hooks);
    try {
      assert.equal(await client.actor<Hooks>("hooks", "h").call("activations"), 1);
      await within(15_000, "the idle actor to be deactivated", deactivated.promise);
      // The deactivation's changes reach the daemon just after the hook returns:
      // poll (bounded) until the daemon reports them.
      let state: Partial<{ activations: number; deactivated: boolean }> = {};
      for (let i = 0; i < 100 && state.deactivated !== true; i++) {
        state = await client.getState<{ activations: number; deactivated: boolean }>("hooks", "h");
        if (state.deactivated !== true) await new Promise((r) => setTimeout(r, 50));
      }
      assert.deepEqual(state, { activations: 1, deactivated: true });
      assert.equal(await client.actor<Hooks>("hooks", "h").call("activations"), 2);
    } finally {
      await app.close();
    }
  });

  test("typed errors: NotFound, Overloaded, DeadlineExceeded, Unavailable", async () => {
    const entered = signal();
    const release = signal();
    const stuck = signal();
    let pings = 0;
    let accepted = -1;
    const pingsDone = signal();
    @actor("narrow", { maxMailbox: 2 })
    class Narrow extends Actor {
      @method
      async hold(): Promise<void> {
        entered.resolve();
        await release.promise;
      }

      @method
      ping(): string {
        pings += 1;
        if (pings === accepted) pingsDone.resolve();
        return "pong";
      }

      @method
      async forever(): Promise<void> {
        if (this.id === "gone") stuck.resolve();
        await new Promise(() => undefined);
      }
    }
    const app = await host(daemon.address, Narrow);
    try {
      await daemon.pastHostWait();
      await assert.rejects(client.actor("nosuchtype", "x").call("anything"), (err: unknown) => {
        assert.ok(err instanceof NotFound, String(err));
        assert.match(err.message, /narrow/);
        return true;
      });

      const held = client.actor<Narrow>("narrow", "n").call("hold");
      await within(10_000, "the hold turn to start", entered.promise);
      let told = 0;
      // Sent once, a call to the full mailbox fails at once.
      const sentOnce = new Client({ address: daemon.address, timeout: 20, retry: false });
      try {
        await assert.rejects(
          (async () => {
            for (let i = 0; i < 10; i++) {
              await sentOnce.tell("narrow", "n", "ping");
              told += 1;
            }
          })(),
          (err: unknown) => err instanceof Overloaded && /mailbox/.test(err.message) && !err.message.includes("retried"),
        );
      } finally {
        sentOnce.close();
      }
      assert.ok(told >= 1 && told <= 2, `the mailbox of 2 accepted ${told} calls`);
      // Retried (the default), it is resent while the daemon's pushback and the
      // call's timeout allow: here the mailbox stays full, so it gives up saying so.
      const patient = new Client({ address: daemon.address, timeout: 0.8 });
      try {
        await assert.rejects(patient.tell("narrow", "n", "ping"), (err: unknown) => {
          assert.ok(err instanceof Overloaded, String(err));
          assert.match(err.message, /mailbox/);
          assert.match(err.message, /retried .* kept refusing it for lack of room/);
          return true;
        });
      } finally {
        patient.close();
      }
      accepted = told;
      release.resolve();
      await held;
      // Wait until the queued pings ran, so the mailbox has room again.
      await within(10_000, "the queued pings to run", pingsDone.promise);
      assert.equal(await client.actor<Narrow>("narrow", "n").call("ping"), "pong");

      await assert.rejects(client.actor<Narrow>("narrow", "slow", { timeout: "300ms" }).call("forever"), DeadlineExceeded);

      // Sent once, the call fails when the app goes; retried (the default), it
      // keeps waiting for an app to host the type again until its deadline.
      const once = new Client({ address: daemon.address, timeout: 20, retry: false });
      const retrying = new Client({ address: daemon.address, timeout: 2 });
      try {
        const call = once.actor<Narrow>("narrow", "gone").call("forever");
        const outcome = call.then(
          () => undefined,
          (e: unknown) => e,
        );
        await within(10_000, "the forever turn to start", stuck.promise);
        await app.close();
        const err = await within(15_000, "the call to fail after the app left", outcome);
        assert.ok(err instanceof Unavailable, `expected Unavailable, got ${String(err)}`);
        // The last attempt may be the one the deadline ends, while the daemon waits
        // for a host: then DeadlineExceeded, which still says what was retried.
        const retried = await within(10_000, "the retried call to give up", retrying.actor<Narrow>("narrow", "gone").call("forever").then(() => undefined, (e: unknown) => e));
        assert.ok((retried instanceof Unavailable || retried instanceof DeadlineExceeded) && retried.message.includes("retried"), String(retried));
      } finally {
        once.close();
        retrying.close();
      }
    } finally {
      await app.close();
    }
  });

  test("an unreachable daemon is Unavailable", async () => {
    const d = await startDaemon();
    const address = d.address;
    await d.dispose();
    const c = new Client({ address, timeout: 2 });
    try {
      await assert.rejects(c.actor("counter", "c").call("incr"), Unavailable);
    } finally {
      c.close();
    }
  });
});

describe("App lifecycle", () => {
  test("start() is bounded by its timeout and close() ends it without a daemon", async () => {
    const d = await startDaemon();
    const address = d.address;
    await d.dispose(); // nothing listens there now
    const app = new App({ actors: [Counter], address, logger: quietLogger });
    await assert.rejects(app.start({ timeout: "300ms" }), /not registered/);
    assert.equal(app.registered, false);
    const again = app.start();
    await app.close();
    await assert.rejects(again, /stopped before it registered/);
    assert.equal(app.running, false);
  });

  test("a registration the daemon refuses rejects start() instead of retrying", async () => {
    const daemon = await startDaemon();
    // 200 two-byte characters: within the SDK's 256-character check, over the daemon's 256-byte limit.
    @actor("é".repeat(200))
    class TooLong extends Actor {
      @method
      ping(): string {
        return "pong";
      }
    }
    const app = new App({ actors: [TooLong], address: daemon.address, logger: quietLogger });
    try {
      await assert.rejects(within(15_000, "the refusal", app.start()), (err: unknown) => {
        assert.ok(err instanceof InvalidArgument, String(err));
        assert.match(err.message, /refused the registration/);
        return true;
      });
      assert.equal(app.running, false);
    } finally {
      await app.close();
      await daemon.dispose();
    }
  });
});

describe("payload limit", () => {
  test("an oversize call or an empty id is InvalidArgument", async () => {
    const daemon = await startDaemon(["--max-payload-bytes", "1024"]);
    const client = new Client({ address: daemon.address, timeout: 20 });
    const app = await host(daemon.address, Counter);
    try {
      await assert.rejects(client.actor("counter", "").call("incr"), InvalidArgument);
      await assert.rejects(client.actor("counter", "big").call("named", { by: 1, label: "x".repeat(4096) }), InvalidArgument);
      assert.equal(await client.actor<Counter>("counter", "big").call("incr", 1), 1);
    } finally {
      await app.close();
      client.close();
      await daemon.dispose();
    }
  });
});

describe("daemon restart", () => {
  test("state survives a daemon restart and the app re-connects by itself", async () => {
    const daemon = await startDaemon();
    const client = new Client({ address: daemon.address, timeout: 20 });
    const app = await host(daemon.address, Counter);
    try {
      assert.equal(await client.actor<Counter>("counter", "persist").call("incr", 3), 3);
      const sessions = app.sessions;
      assert.equal(await daemon.stop(), 0, daemon.logTail());
      await daemon.start(); // same port, same data dir
      await app.waitRegistered({ sessions: sessions + 1, timeout: 15 });
      assert.deepEqual(await client.getState("counter", "persist"), { count: 3 });
      assert.equal(await client.actor<Counter>("counter", "persist").call("incr", 1), 4);
    } finally {
      await app.close();
      client.close();
      await daemon.dispose();
    }
  });
});
