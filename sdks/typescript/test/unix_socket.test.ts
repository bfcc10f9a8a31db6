// An app and a client on the daemon's Unix domain socket (`troupe serve --listen-unix`).
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Actor, actor, Client, method } from "../src/index.js";
import { host, startDaemon } from "./helpers.js";

@actor("unix-counter")
class UnixCounter extends Actor<{ count: number }> {
  @method
  incr(by = 1): number {
    const count = this.state.get("count", 0) + by;
    this.state.set("count", count);
    return count;
  }
}

test("an app and a client reach the daemon over its Unix socket", async () => {
  // Short: a socket path must fit in 108 bytes.
  const dir = mkdtempSync("/tmp/troupe-");
  const sock = join(dir, "troupe.sock");
  const daemon = await startDaemon(["--listen-unix", sock]);
  try {
    assert.ok(statSync(sock).isSocket());
    // Owner and group only.
    assert.equal(statSync(sock).mode & 0o777, 0o660);
    const app = await host(`unix:${sock}`, UnixCounter);
    try {
      const client = new Client({ address: `unix:${sock}`, timeout: 20 });
      try {
        assert.equal(await client.invoke("unix-counter", "a", "incr", [2]), 2);
        assert.equal(await client.invoke("unix-counter", "a", "incr", [3]), 5);
      } finally {
        client.close();
      }
      // gRPC's absolute form of the same address works too.
      const absolute = new Client({ address: `unix://${sock}`, timeout: 20 });
      try {
        assert.equal(await absolute.invoke("unix-counter", "a", "incr", [1]), 6);
      } finally {
        absolute.close();
      }
    } finally {
      await app.close();
    }
    assert.equal(await daemon.stop(), 0);
    assert.ok(!existsSync(sock), "the daemon removes its socket file when it stops");
  } finally {
    await daemon.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
});
