// Any payload the daemon accepts reaches a TypeScript app, and a turn too large for
// the app's declared receive limit fails that call, never the app (real daemon binary).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Actor, actor, App, Client, method, Overloaded } from "../src/index.js";
import { quietLogger, startDaemon } from "./helpers.js";

const MIB = 1024 * 1024;

@actor("echo")
class Echo extends Actor {
  @method
  echo(text: string): string {
    return text;
  }

  @method
  size(text: string): number {
    return text.length;
  }
}

/** A daemon taking payloads up to 9 MiB, a client, and an App hosting Echo with `maxReceiveBytes`. */
async function setUp(maxReceiveBytes?: number) {
  const daemon = await startDaemon(["--max-payload-bytes", String(9 * MIB)]);
  const client = new Client({ address: daemon.address, timeout: 60 });
  const app = new App({ actors: [Echo], address: daemon.address, appName: "node-test", logger: quietLogger, maxReceiveBytes });
  await app.start({ timeout: 15 });
  const tearDown = async () => {
    await app.close();
    client.close();
    await daemon.dispose();
  };
  return { daemon, client, app, tearDown };
}

describe("payloads up to the daemon's limit", () => {
  test("an 8 MiB call reaches the app and comes back", async () => {
    const { client, app, tearDown } = await setUp();
    try {
      const text = "x".repeat(8 * MIB);
      assert.equal(await client.actor<Echo>("echo", "big").call("echo", text), text);
      assert.equal(await client.actor<Echo>("echo", "big").call("size", "abc"), 3);
      assert.equal(app.sessions, 1, "the app re-connected: its stream broke");
    } finally {
      await tearDown();
    }
  });

  test("a turn over the app's declared limit fails that call, not the app", async () => {
    const { client, app, tearDown } = await setUp(MIB);
    try {
      const echo = client.actor<Echo>("echo", "a");
      assert.equal(await echo.call("size", "abc"), 3);
      await assert.rejects(echo.call("size", "x".repeat(2 * MIB)), (err: unknown) => {
        assert.ok(err instanceof Overloaded, String(err));
        assert.match(err.message, new RegExp(`${String(MIB)} bytes.*max_receive_bytes`));
        // Too large stays too large: the daemon sends no retry pushback, so no resend.
        assert.ok(!err.message.includes("retried"), err.message);
        return true;
      });
      // The same actor on the same stream serves the next call.
      assert.equal(await echo.call("size", "abcd"), 4);
      assert.equal(app.sessions, 1, "the app re-connected: its stream broke");
    } finally {
      await tearDown();
    }
  });
});

describe("maxReceiveBytes", () => {
  test("a limit the daemon would refuse is refused at once", () => {
    for (const bad of [0, 1000, 65_535, -1, 1.5, Number.NaN]) {
      assert.throws(() => new App({ actors: [Echo], maxReceiveBytes: bad }), RangeError, String(bad));
    }
    assert.doesNotThrow(() => new App({ actors: [Echo], maxReceiveBytes: 64 * 1024 }));
  });
});
