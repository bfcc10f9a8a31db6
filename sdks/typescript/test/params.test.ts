// How many arguments an actor method declares (src/params.ts), and that a call with
// more fails with TypeError instead of running with the extras silently dropped.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, ActorError, type App, actor, Client, kwargs, method } from "../src/index.js";
import { declaredParams } from "../src/params.js";
import { type Daemon, host, startDaemon } from "./helpers.js";

/* eslint-disable @typescript-eslint/no-unused-vars -- the parameters are what is under test */
class Shapes {
  none(): void {}
  one(a: number): void {}
  defaults(a: number, b = 1, c = "x, y"): void {}
  trailing(a: number, b: number): void {}
  destructured({ a, b }: { a: number; b: number }, [c, d]: number[] = [1, 2]): void {}
  nestedDefault(a = Math.max(1, 2), b: Record<string, number> = { x: 1, y: 2 }): void {}
  rest(a: number, ...more: number[]): void {}
  commented(a: number /* , b */, c: number /* ) */): void {}
  strings(a = "(", b = ")", c = `,${String(1)}`): void {}
  async asyncOne(a: number): Promise<void> {}
}
/* eslint-enable @typescript-eslint/no-unused-vars */

// The method as stored on the prototype (what @actor reads), without calling it.
const of = (name: keyof Shapes): ((...args: never[]) => unknown) =>
  Object.getOwnPropertyDescriptor(Shapes.prototype, name)?.value as (...args: never[]) => unknown;

describe("declared parameters", () => {
  const cases: [string, (...args: never[]) => unknown, number | undefined][] = [
    ["none", of("none"), 0],
    ["one", of("one"), 1],
    ["defaults (fn.length is 1)", of("defaults"), 3],
    ["trailing comma", of("trailing"), 2],
    ["destructured", of("destructured"), 2],
    ["nested default", of("nestedDefault"), 2],
    ["rest: any number", of("rest"), undefined],
    ["comments", of("commented"), 2],
    ["strings with brackets and commas", of("strings"), 3],
    ["async", of("asyncOne"), 1],
    ["arrow, bare parameter", (x: number) => x, 1],
    ["arrow", (x: number, y: number) => x + y, 2],
    [
      "function expression",
      function (a: number, b: number) {
        return a + b;
      },
      2,
    ],
  ];
  for (const [name, fn, expected] of cases) {
    test(name, () => {
      assert.equal(declaredParams(fn), expected);
    });
  }
});

@actor("params-ts")
class Sums extends Actor {
  @method add(a: number, b = 0): number {
    return a + b;
  }

  @method total(...values: number[]): number {
    return values.reduce((x, y) => x + y, 0);
  }

  @method named({ a, b }: { a: number; b: number }): number {
    return a + b;
  }
}

describe("calls with more arguments than declared", () => {
  let daemon: Daemon;
  let app: App;
  let client: Client;
  before(async () => {
    daemon = await startDaemon();
    app = await host(daemon.address, Sums);
    client = new Client({ address: daemon.address, timeout: 20 });
  });
  after(async () => {
    await app.close();
    client.close();
    await daemon.dispose();
  });

  test("up to the declared count (defaults included) run", async () => {
    const sums = client.actor("params-ts", "s1");
    assert.equal(await sums.call("add", 1), 1);
    assert.equal(await sums.call("add", 1, 2), 3);
    assert.equal(await sums.call("total", 1, 2, 3, 4), 10);
    assert.equal(await sums.call("named", kwargs({ a: 1, b: 2 })), 3);
  });

  test("one more fails with TypeError naming the method and the counts", async () => {
    const sums = client.actor("params-ts", "s1");
    await assert.rejects(sums.call("add", 1, 2, 3), (err) => {
      assert.ok(err instanceof ActorError);
      assert.equal(err.remoteType, "TypeError");
      assert.equal(err.kind, "bad-arguments");
      assert.match(err.message, /params-ts\.add takes at most 2 arguments but was called with 3/);
      return true;
    });
    // Keyword arguments are one more, last argument: add(1, 2, kwargs) has three.
    await assert.rejects(sums.call("add", 1, 2, kwargs({ c: 3 })), { name: "ActorError", remoteType: "TypeError" });
    await assert.rejects(sums.call("named", 1, kwargs({ a: 1, b: 2 })), { name: "ActorError", remoteType: "TypeError" });
  });
});
