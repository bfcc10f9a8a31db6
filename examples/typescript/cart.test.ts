// The cart, tested with @troupe/sdk/testing on node's test runner: a real daemon
// of each test's own, the actor hosted in this process, and a clock moved 30
// days in well under a second.
//
//     npm run build && node --test build/cart.test.js
//
// The daemon is $TROUPE_BIN or the one installed with @troupe/sdk.
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, it } from "node:test";
import { ActorError } from "@troupe/sdk";
import { startTestEnv, type TestEnv } from "@troupe/sdk/testing";

import { ABANDONED_AFTER, Cart } from "./cart.js";

const DAY = 24 * 3600; // durations given as numbers are seconds

describe("cart", () => {
  let env: TestEnv;
  beforeEach(async () => {
    env = await startTestEnv();
    await env.host(Cart);
  });
  afterEach(() => env.close());

  it("adds items up", async () => {
    const cart = env.actor(Cart, "c1");
    assert.equal(await cart.call("add", "apple", 3, 0.5), 1.5);
    assert.equal(await cart.call("add", "pear", 1, 2.25), 3.75);
    assert.equal(await cart.call("remove", "apple"), 2.25);
    await assert.rejects(cart.call("add", "apple", 0), (err) => err instanceof ActorError && /quantity must be a positive integer/.test(err.message));
    assert.deepEqual(await env.state(Cart, "c1", "items"), { items: { pear: { qty: 1, price: 2.25 } } });
  });

  it("empties an abandoned cart after 30 days", async () => {
    const started = performance.now();
    const cart = env.actor(Cart, "c1");
    await cart.call("add", "apple", 2, 1.0);

    // A day short of abandoned (ABANDONED_AFTER is "30d"): nothing happens.
    const early = await env.advance(29 * DAY);
    assert.equal(early.remindersFired, 0);
    assert.equal(await cart.call("total"), 2);

    // The 30th day: the reminder fires, and its turn has run when advance resolves.
    const due = await env.advance("24h");
    assert.equal(due.remindersFired, 1);
    assert.deepEqual(await env.state(Cart, "c1"), { items: {}, abandoned: true });
    assert.ok(performance.now() - started < 1000, "a month of cart life took more than a second");
  });

  it("postpones abandonment when the cart is touched", async () => {
    const cart = env.actor(Cart, "c2");
    await cart.call("add", "apple", 1, 1.0);
    await env.advance(20 * DAY);
    await cart.call("add", "pear", 1, 2.0); // re-arms the reminder: 30 days from now
    await env.advance(20 * DAY);
    assert.equal(await cart.call("total"), 3);
    await env.advance(10 * DAY);
    assert.equal(await cart.call("total"), 0);
  });
});
