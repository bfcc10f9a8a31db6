// End-to-end tests of what crosses the daemon as sent: error messages with the
// characters gRPC percent-encodes, and values JSON has no form for (refused,
// not turned into {}).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Actor, ActorError, actor, Client, method, NotFound } from "../src/index.js";
import { coreName } from "../src/core.js";
import { type Daemon, host, startDaemon } from "./helpers.js";

describe("what crosses the daemon as sent", () => {
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

  test("error messages reach the caller as written, with ? # % and the rest", async () => {
    // The daemon percent-encodes grpc-message and grpc-js's decoding left `?` and
    // `#` encoded: on the js core this message read "is it 50% done%3F %233 ...".
    @actor("punctuated")
    class Punctuated extends Actor {
      @method
      fail(message: string): never {
        throw new Error(message);
      }
    }
    const app = await host(daemon.address, Punctuated);
    try {
      const messages = ["is it 50% done? #3 {a} <b> `c` 100%", "why?", "#1"];
      // Only the native core gets grpc-message as sent; grpc-js hands over "%3F" and
      // "?" alike (errors.ts, rpcDetails), so only there can this text arrive intact.
      if (coreName() === "native") messages.push("literally %3F and %23, and %25");
      for (const message of messages) {
        await assert.rejects(client.actor<Punctuated>("punctuated", "p").call("fail", message), (err: unknown) => {
          assert.ok(err instanceof ActorError, String(err));
          assert.equal(err.message, message);
          return true;
        });
      }
      // The daemon's own messages too: this one quotes the type name.
      await assert.rejects(client.invoke("what? #1 at 50%", "x", "m"), (err: unknown) => {
        assert.ok(err instanceof NotFound, String(err));
        assert.match(err.message, /no app hosts actor type 'what\? #1 at 50%'/);
        return true;
      });
    } finally {
      await app.close();
    }
  });

  test("a Map or Set is refused where it would have travelled as {}", async () => {
    @actor("mapper")
    class Mapper extends Actor<{ m: unknown; kept: number }> {
      @method
      returnMap(): Map<string, number> {
        return new Map([["a", 1]]);
      }

      @method
      storeMap(): void {
        this.state.set("m", new Map([["a", 1]]));
      }

      @method
      storeNestedSet(): void {
        this.state.set("kept", 1);
        this.state.set("m", { tags: new Set(["x"]) });
      }
    }
    const app = await host(daemon.address, Mapper);
    try {
      const m = client.actor<Mapper>("mapper", "m1");
      const refused = (where: RegExp) => (err: unknown) => {
        assert.ok(err instanceof ActorError, String(err));
        assert.equal(err.remoteType, "TypeError");
        assert.match(err.message, where);
        assert.match(err.message, /which JSON has no form for \(it would arrive as \{\}\); convert it first/);
        return true;
      };
      await assert.rejects(m.call("returnMap"), refused(/^return value must be JSON-serialisable or a Uint8Array: it is a Map, .*Object\.fromEntries\(map\)/));
      await assert.rejects(m.call("storeMap"), refused(/^state\["m"\] must be JSON-serialisable: it is a Map/));
      // Found where the turn's changes are encoded: the whole turn fails, and nothing is stored.
      await assert.rejects(m.call("storeNestedSet"), refused(/^state\["m"\] must be JSON-serialisable: it holds a Set at \.tags, .*\[\.\.\.set\]$/));
      assert.deepEqual(await client.getState("mapper", "m1"), {});
    } finally {
      await app.close();
    }
  });
});
