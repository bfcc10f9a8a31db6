// The bus-tracker example (examples/typescript), with the app in its own process, against the real daemon.
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { Client } from "../src/index.js";
import { REPO_ROOT, SDK_ROOT, startDaemon, waitForLine, within } from "./helpers.js";

const EXAMPLE = join(REPO_ROOT, "examples", "typescript");

function run(cmd: string, args: readonly string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { env, timeout: timeoutMs }, (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`${cmd} ${args.join(" ")}: ${err.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

test("the vehicle app process serves the client and exits cleanly on SIGTERM", async () => {
  // Needs the SDK's dist/ (npm run build), as a user of the package would.
  execFileSync("bash", [join(SDK_ROOT, "scripts", "link_sdk.sh"), EXAMPLE]);
  execFileSync(join(SDK_ROOT, "node_modules", ".bin", "tsc"), ["-p", join(EXAMPLE, "tsconfig.json")], { stdio: "inherit" });
  const daemon = await startDaemon();
  const env = { ...process.env, TROUPE_ADDR: daemon.address };
  const app = spawn(process.execPath, [join(EXAMPLE, "build", "vehicle_app.js")], { env, stdio: ["ignore", "pipe", "inherit"] });
  try {
    await waitForLine(app, /^registered/, 20_000, "the vehicle app to register");
    const out = await run(process.execPath, [join(EXAMPLE, "build", "client.js")], env, 60_000);
    assert.match(out, /bus-7/);
    assert.match(out, /bus-44/);
    assert.match(out, /bad fix refused by the actor: RangeError/);
    assert.match(out, /stored state of bus-7: reports=8/);
    assert.match(out, /parked reminders: 4, first due in 10 min/);
    assert.match(out, /live map: 32 moves of 4 buses/);

    const client = new Client({ address: daemon.address, timeout: 10 });
    try {
      const history = (await client.invoke("vehicle", "bus-12", "history")) as { ts: number }[];
      assert.equal(history.length, 5);
      assert.deepEqual(
        history.map((f) => f.ts),
        [...history.map((f) => f.ts)].sort((a, b) => a - b),
      );
      assert.deepEqual(await client.getState("vehicle", "bus-12", ["reports"]), { reports: 8 });
    } finally {
      client.close();
    }

    const exited = new Promise<number | null>((resolve) => {
      app.once("exit", (code) => {
        resolve(code);
      });
    });
    app.kill("SIGTERM");
    assert.equal(await within(20_000, "the vehicle app to exit after SIGTERM", exited), 0);
  } finally {
    if (app.exitCode === null) app.kill("SIGKILL");
    await daemon.dispose();
  }
});

test("run_demo.sh runs the demo end to end", async () => {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["TROUPE_ADDR"];
  const out = await run("bash", [join(EXAMPLE, "run_demo.sh")], env, 120_000);
  assert.match(out, /vehicle app registered/);
  assert.match(out, /bus-31/);
});
