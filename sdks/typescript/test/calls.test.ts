// Actors calling actors, against the real daemon: call chains, reentrancy,
// deadlock detection, deadlines and read-only methods (docs/calls.md).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { Actor, ActorError, actor, Client, DeadlineExceeded, FailedPrecondition, method, ReadOnlyStateError } from "../src/index.js";
import { type Daemon, host, signal, startDaemon, within } from "./helpers.js";

interface OrderState {
  items: number[];
  totalsAsked: number;
  subtotalsAsked: number;
  outer: string;
  inner: string;
}

/** order.total -> customer.discount -> order.subtotal: a chain back into the order. */
@actor("order", { reentrant: true })
class Order extends Actor<OrderState> {
  static readonly TYPE: string = "order";

  override onActivate(): void {
    this.state.setDefault("items", [40, 60, 20]);
  }

  @method
  async total(customer: string): Promise<{ total: number; chain: readonly string[] }> {
    this.state.set("totalsAsked", this.state.get("totalsAsked", 0) + 1);
    const type = (this.constructor as typeof Order).TYPE;
    const discount = await this.ctx.actor<Customer>("customer", customer).call("discount", type, this.id);
    const subtotal = this.state.get("items", []).reduce((a, b) => a + b, 0);
    return { total: subtotal - discount, chain: this.ctx.chain };
  }

  @method
  subtotal(): { subtotal: number; chain: readonly string[] } {
    // A turn nested in the waiting `total` turn of this very actor.
    this.state.set("subtotalsAsked", this.state.get("subtotalsAsked", 0) + 1);
    return { subtotal: this.state.get("items", []).reduce((a, b) => a + b, 0), chain: this.ctx.chain };
  }

  @method
  async nestedFails(customer: string): Promise<void> {
    this.state.set("outer", "kept");
    // The customer calls back into failInside, which throws; the customer
    // swallows that, so this outer turn succeeds and keeps only its own change.
    await this.ctx.actor<Customer>("customer", customer).call("callBack", this.id, "failInside");
  }

  @method
  failInside(): never {
    this.state.set("inner", "dropped");
    throw new RangeError("inner turn fails");
  }

  @method
  async outerFails(customer: string): Promise<never> {
    this.state.set("outer", "dropped");
    await this.ctx.actor<Customer>("customer", customer).call("callBack", this.id, "writeInside");
    throw new RangeError("outer turn fails");
  }

  @method
  writeInside(): void {
    this.state.set("inner", "kept");
  }

  @method({ readonly: true })
  view(): Partial<OrderState> {
    return this.state.toJSON();
  }
}

/** The same order, not reentrant: the chain back into it is a deadlock. */
@actor("plain_order")
class PlainOrder extends Order {
  static override readonly TYPE: string = "plain_order";
}

const seenErrors: unknown[] = [];

@actor("customer")
class Customer extends Actor {
  @method
  async discount(orderType: string, orderId: string): Promise<number> {
    try {
      const reply = await this.ctx.actor<Order>(orderType, orderId).call("subtotal");
      return reply.subtotal > 100 ? 10 : 0;
    } catch (e) {
      seenErrors.push(e);
      throw e;
    }
  }

  @method
  async callBack(orderId: string, name: string): Promise<void> {
    try {
      await this.ctx.invoke("order", orderId, name);
    } catch (e) {
      if (!(e instanceof ActorError)) throw e;
    }
  }
}

@actor("deep", { reentrant: true })
class Deep extends Actor {
  @method
  async down(n: number): Promise<number> {
    if (n === 0) return this.ctx.chain.length;
    return this.ctx.actor<Deep>("deep", this.id).call("down", n - 1);
  }
}

let readersInside = 0;
let maxReaders = 0;
let writerInside = false;
let overlaps = 0;
let firstOverlap = signal();

@actor("board")
class Board extends Actor<{ count: number; items: number[] }> {
  override onActivate(): void {
    this.state.setDefault("count", 0);
    this.state.setDefault("items", [1, 2, 3]);
  }

  @method({ readonly: true })
  async read(): Promise<number> {
    readersInside += 1;
    maxReaders = Math.max(maxReaders, readersInside);
    if (writerInside) overlaps += 1;
    if (readersInside > 1) firstOverlap.resolve();
    // The first readers wait (bounded) for a second one to join them: with 50
    // calls in flight the daemon runs several at once.
    await Promise.race([firstOverlap.promise, delay(200)]);
    await delay(5); // a little work, during which a writer must not start
    if (writerInside) overlaps += 1;
    readersInside -= 1;
    return this.state.get("count", 0);
  }

  @method
  async bump(): Promise<number> {
    writerInside = true;
    overlaps += readersInside;
    await delay(10); // work, during which no reader may start
    overlaps += readersInside;
    writerInside = false;
    const count = this.state.get("count", 0) + 1;
    this.state.set("count", count);
    return count;
  }

  @method({ readonly: true })
  sneakyWrite(): void {
    this.state.set("count", 99);
  }

  @method({ readonly: true })
  carefulWrite(): string {
    try {
      this.state.delete("count");
    } catch (e) {
      if (e instanceof ReadOnlyStateError) return e.message;
      throw e;
    }
    return "deleted";
  }

  @method({ readonly: true })
  sneakyAppend(): void {
    // Changed in place, which the SDK cannot stop: the daemon refuses the turn.
    this.state.get("items", []).push(4);
  }

  @method({ readonly: true })
  view(): Record<string, unknown> {
    return this.state.toJSON();
  }
}

describe("actors calling actors", () => {
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

  test("a reentrant chain calls back into the waiting actor", async () => {
    const app = await host(daemon.address, Order, Customer);
    try {
      const reply = await client.actor(Order, "r1").call("total", "c1");
      assert.deepEqual(reply, { total: 110, chain: ["order/r1"] });
      // Both turns' changes were kept, each sent by the turn that made it.
      assert.deepEqual(await client.getState("order", "r1"), { items: [40, 60, 20], totalsAsked: 1, subtotalsAsked: 1 });
    } finally {
      await app.close();
    }
  });

  test("a cycle into a type that is not reentrant fails at once", async () => {
    seenErrors.length = 0;
    const app = await host(daemon.address, PlainOrder, Customer);
    try {
      const start = performance.now();
      const err = await client
        .actor(PlainOrder, "o1")
        .call("total", "c1")
        .then(
          () => assert.fail("the cycle was not refused"),
          (e: unknown) => e,
        );
      const elapsed = performance.now() - start;
      // Refused by the daemon on sight, not ended by a timeout (the client allows 20 s).
      assert.ok(elapsed < 1000, `took ${String(elapsed)} ms`);
      const cycle = "deadlock: plain_order/o1 → customer/c1 → plain_order/o1";
      // The customer's call saw the daemon's FAILED_PRECONDITION as a typed error...
      assert.equal(seenErrors.length, 1);
      const inner = seenErrors[0];
      assert.ok(inner instanceof FailedPrecondition, String(inner));
      assert.ok(inner.message.includes(cycle), inner.message);
      assert.ok(inner.message.includes("Register actor type 'plain_order' as reentrant"), inner.message);
      // ...and it travelled up the chain as the failure of each turn.
      assert.ok(err instanceof ActorError, String(err));
      assert.equal(err.remoteType, "FailedPrecondition");
      assert.ok(err.message.includes(cycle), err.message);
      // The failed outer turn left nothing behind.
      assert.deepEqual(await client.getState("plain_order", "o1"), { items: [40, 60, 20] });
    } finally {
      await app.close();
    }
  });

  test("a failed turn undoes only its own changes", async () => {
    const app = await host(daemon.address, Order, Customer);
    try {
      const o1 = client.actor(Order, "f1");
      await o1.call("nestedFails", "c1");
      let stored = await client.getState("order", "f1");
      assert.deepEqual(stored, { items: [40, 60, 20], outer: "kept" });
      // The app's copy of the state is the daemon's.
      assert.deepEqual(await o1.call("view"), stored);

      const o2 = client.actor(Order, "f2");
      await assert.rejects(o2.call("outerFails", "c1"), (e: unknown) => e instanceof ActorError && e.message === "outer turn fails");
      stored = await client.getState("order", "f2");
      assert.deepEqual(stored, { items: [40, 60, 20], inner: "kept" });
      assert.deepEqual(await o2.call("view"), stored);
    } finally {
      await app.close();
    }
  });

  test("the chain depth is limited", async () => {
    const app = await host(daemon.address, Deep);
    try {
      // 30 turns of one actor, each nested in the previous one.
      assert.equal(await client.actor(Deep, "d").call("down", 29), 30);
      const start = performance.now();
      await assert.rejects(client.actor(Deep, "d").call("down", 40), (e: unknown) => {
        assert.ok(e instanceof ActorError, String(e));
        assert.equal(e.remoteType, "FailedPrecondition");
        assert.ok(e.message.includes("32 calls deep, the limit (32)"), e.message);
        return true;
      });
      assert.ok(performance.now() - start < 2000);
    } finally {
      await app.close();
    }
  });

  test("deadlines shrink along a chain", async () => {
    interface Where {
      deadline: number | null;
      chain: readonly string[];
    }
    @actor("sink")
    class Sink extends Actor {
      @method
      where(): Where {
        return { deadline: this.ctx.deadline?.getTime() ?? null, chain: this.ctx.chain };
      }
    }
    @actor("relay")
    class Relay extends Actor {
      @method
      async forward(timeout: number | null): Promise<{ mine: number | null; ctx: Where; client: Where }> {
        const viaCtx = await this.ctx.actor(Sink, "s", timeout === null ? {} : { timeout }).call("where");
        // A plain Client used inside a handler makes its calls for the turn as well.
        const plain = new Client({ address: daemon.address, timeout: "30s" });
        try {
          const viaClient = await plain.actor(Sink, "s").call("where");
          return { mine: this.ctx.deadline?.getTime() ?? null, ctx: viaCtx, client: viaClient };
        } finally {
          plain.close();
        }
      }
    }
    const app = await host(daemon.address, Relay, Sink);
    const near = (a: number | null, b: number, ms: number): boolean => a !== null && Math.abs(a - b) <= ms;
    try {
      let start = Date.now();
      let got = await client.actor(Relay, "r", { timeout: "5s" }).call("forward", null);
      assert.ok(near(got.mine, start + 5000, 500), JSON.stringify(got));
      // The nested calls set no timeout of their own: they inherit the caller's
      // deadline (equal but for the time the request took to reach the daemon).
      assert.ok(got.mine !== null && near(got.ctx.deadline, got.mine, 50), JSON.stringify(got));
      assert.deepEqual(got.ctx.chain, ["relay/r", "sink/s"]);
      assert.deepEqual(got.client.chain, ["relay/r", "sink/s"]);
      // The plain client's own 30 s timeout is cut to the turn's deadline.
      assert.ok(near(got.client.deadline, got.mine, 50), JSON.stringify(got));

      // A shorter timeout of the nested call wins.
      start = Date.now();
      got = await client.actor(Relay, "r", { timeout: "5s" }).call("forward", 0.5); // seconds
      assert.ok(near(got.ctx.deadline, start + 500, 300), JSON.stringify(got));

      // A client call with no timeout carries no deadline.
      const unbounded = new Client({ address: daemon.address });
      try {
        got = await unbounded.actor(Relay, "r").call("forward", null);
      } finally {
        unbounded.close();
      }
      assert.equal(got.mine, null);
      assert.equal(got.ctx.deadline, null);
    } finally {
      await app.close();
    }
  });

  test("a wait across two chains ends at the callers' deadline", async () => {
    const started = { ping_a: signal(), ping_b: signal() };
    const recorded = { ping_a: signal(), ping_b: signal() };
    const nested: Record<string, { error: unknown; waited: number; deadline: Date | undefined }> = {};
    type Name = "ping_a" | "ping_b";

    abstract class Ping extends Actor {
      abstract readonly me: Name;
      abstract readonly other: Name;

      @method
      async hold(): Promise<void> {
        started[this.me].resolve();
        // Both turns are running: each now calls the other, whose mailbox waits
        // behind the running turn. No chain holds both, so only deadlines end it.
        await within(10_000, `${this.other} to start`, started[this.other].promise);
        const t0 = performance.now();
        let error: unknown;
        try {
          await this.ctx.actor(this.other, "x").call("poke");
        } catch (e) {
          error = e;
          throw e;
        } finally {
          nested[this.me] = { error, waited: performance.now() - t0, deadline: this.ctx.deadline };
          recorded[this.me].resolve();
        }
      }

      @method
      poke(): void {
        return undefined;
      }
    }
    @actor("ping_a")
    class PingA extends Ping {
      readonly me = "ping_a";
      readonly other = "ping_b";
    }
    @actor("ping_b")
    class PingB extends Ping {
      readonly me = "ping_b";
      readonly other = "ping_a";
    }
    const app = await host(daemon.address, PingA, PingB);
    try {
      const call = async (type: Name): Promise<[unknown, number]> => {
        const t0 = performance.now();
        try {
          await client.actor(type, "x", { timeout: 1 }).call("hold");
          return [undefined, performance.now() - t0];
        } catch (e) {
          return [e, performance.now() - t0];
        }
      };
      const results = await Promise.all([call("ping_a"), call("ping_b")]);
      let endedByDeadline = 0;
      for (const [error, elapsed] of results) {
        // Deadlines shrink along a chain, so the nested call may run out just
        // before its caller does and the handler rethrow it: then the caller
        // sees that DeadlineExceeded as the actor's error. The first turn to
        // give up lets the other's nested call in, so that caller may succeed
        // just before its own deadline instead.
        const byDeadline =
          error instanceof DeadlineExceeded ||
          (error instanceof ActorError && error.remoteType === "DeadlineExceeded");
        assert.ok(byDeadline || error === undefined, String(error));
        if (byDeadline) endedByDeadline += 1;
        assert.ok(elapsed > 800 && elapsed < 2000, `took ${String(elapsed)} ms`);
      }
      assert.ok(endedByDeadline >= 1, "no call ended by its deadline");
      // The nested calls ended with the outer deadline, not the daemon's 60 s limit.
      for (const me of ["ping_a", "ping_b"] as const) {
        // Each handler records its nested call's end just after its caller gave up.
        await within(5000, `${me}'s nested call to end`, recorded[me].promise);
        const seen = nested[me];
        assert.ok(seen !== undefined && seen.waited < 1500, JSON.stringify(seen));
        assert.ok(seen.deadline !== undefined);
      }
      // The first to give up ends its turn, which may let the other's call in just
      // before that one's deadline; at least one ended by its deadline.
      assert.ok(Object.values(nested).some((n) => n.error instanceof DeadlineExceeded));
    } finally {
      await app.close();
    }
  });

  test("read-only calls overlap, and never beside a writer", async () => {
    readersInside = maxReaders = overlaps = 0;
    writerInside = false;
    firstOverlap = signal();
    const app = await host(daemon.address, Board);
    try {
      const board = client.actor(Board, "b1");
      const results = await Promise.all(Array.from({ length: 50 }, (_, i) => (i === 10 || i === 35 ? board.call("bump") : board.call("read"))));
      assert.ok(maxReaders > 1, `at most ${String(maxReaders)} reader(s) at once`);
      assert.equal(overlaps, 0);
      assert.ok(results.every((n) => n >= 0 && n <= 2));
      assert.deepEqual(await client.getState("board", "b1", ["count"]), { count: 2 });
    } finally {
      await app.close();
    }
  });

  test("a read-only method cannot write state", async () => {
    const app = await host(daemon.address, Board);
    try {
      const board = client.actor(Board, "b2");
      assert.equal(await board.call("bump"), 1);
      const before = await client.getState("board", "b2");

      await assert.rejects(board.call("sneakyWrite"), (e: unknown) => {
        assert.ok(e instanceof ActorError, String(e));
        assert.equal(e.remoteType, "ReadOnlyStateError");
        assert.ok(e.message.includes('method "sneakyWrite" of board/b2 is read-only'), e.message);
        assert.ok(e.message.includes('tried to set key "count"'), e.message);
        return true;
      });
      assert.ok((await board.call("carefulWrite")).includes('tried to delete key "count"'));

      // The backstop: a change made in place gets past the SDK, and the daemon refuses it.
      await assert.rejects(board.call("sneakyAppend"), (e: unknown) => {
        assert.ok(e instanceof FailedPrecondition, String(e));
        assert.ok(e.message.includes("method 'sneakyAppend' of board/b2 is read-only but changed state"), e.message);
        assert.ok(e.message.includes("(keys: items)"), e.message);
        return true;
      });

      assert.deepEqual(await client.getState("board", "b2"), before);
      // The app's copy was put back as well.
      assert.deepEqual(await board.call("view"), before);
    } finally {
      await app.close();
    }
  });
});
