// Compile-time checks of the typed client API (tsc fails if an expectation breaks);
// the runtime part only makes sure the file is loaded by the test runner.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Actor, type ActorHandle, actor, Client, kwargs, method } from "../src/index.js";

@actor("typed")
class Typed extends Actor<{ count: number }> {
  @method
  async incr(by = 1): Promise<number> {
    await Promise.resolve();
    return this.state.get("count", 0) + by;
  }

  @method
  label(options: { name: string }): string {
    return options.name;
  }
}

// The standard exact type-equality check; its inner T is deliberately used once.
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters
type Equal<X, Y> = (<T>() => T extends X ? 1 : 2) extends <T>() => T extends Y ? 1 : 2 ? true : false;
function expectTrue(value: true): void {
  assert.ok(value);
}

test("typed handles infer method names, arguments and results", () => {
  const client = new Client({ address: "127.0.0.1:1" });
  const typed: ActorHandle<Typed> = client.actor<Typed>("typed", "t");
  const byClass = client.actor(Typed, "t");
  if (Math.random() > 2) {
    // Never runs: these lines exist for the type checker.
    const r = typed.call("incr", 5);
    expectTrue(true satisfies Equal<typeof r, Promise<number>>);
    const l = byClass.call("label", { name: "x" });
    expectTrue(true satisfies Equal<typeof l, Promise<string>>);
    const k = byClass.call("label", kwargs({ name: "x" }));
    expectTrue(true satisfies Equal<typeof k, Promise<string>>);
    // @ts-expect-error: keyword arguments are checked too
    void byClass.call("label", kwargs({ nom: "x" }));
    void k;
    void r;
    void l;
    // @ts-expect-error: no such method
    void typed.call("decr");
    // @ts-expect-error: wrong argument type
    void typed.call("incr", "five");
    // @ts-expect-error: base-class members are not methods
    void typed.call("onActivate");
    // @ts-expect-error: scheduled-work hooks are not methods either
    void typed.call("onReminder", "r", null);
    const u = client.actor("anything", "x").call("whatever", 1, kwargs({ a: 1 }));
    expectTrue(true satisfies Equal<typeof u, Promise<unknown>>);
    void u;
  }
  client.close();
  assert.equal(typed.type, "typed");
  assert.equal(byClass.type, "typed");
});
