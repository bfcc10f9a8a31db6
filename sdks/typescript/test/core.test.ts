// Which core the SDK runs on (src/core.ts): the native addon when it loads, else
// the @grpc/grpc-js core with a single warning; TROUPE_SDK_CORE forces either.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ADDON_ENV, CORE_ENV, coreName } from "../src/core.js";

const INDEX = new URL("../src/index.js", import.meta.url).href;
const CORE = new URL("../src/core.js", import.meta.url).href;

// Two Clients and an App, as a program would make them, then the core in use. Plain
// JavaScript run by node, so the decorators are applied as tsc's output applies them.
const PROGRAM = `
import { Actor, actor, App, Client, method } from ${JSON.stringify(INDEX)};
import { coreName } from ${JSON.stringify(CORE)};
class Probe extends Actor {
  async ping() { return 1; }
}
method(Probe.prototype.ping, { kind: "method", name: "ping", addInitializer() {} });
actor("core_probe")(Probe, { kind: "class", name: "Probe", addInitializer() {} });
new Client({ address: "127.0.0.1:1" }).close();
new Client({ address: "127.0.0.1:1" }).close();
new App({ actors: [Probe], address: "127.0.0.1:1" });
console.log(coreName());
`;

/** Runs PROGRAM where the addon cannot load (its path names no file), with TROUPE_SDK_CORE=`core`. */
function withoutAddon(core: string | undefined): { status: number | null; stdout: string; stderr: string } {
  const env: NodeJS.ProcessEnv = { ...process.env, [ADDON_ENV]: fileURLToPath(new URL("no-such-addon.node", import.meta.url)), [CORE_ENV]: core };
  if (core === undefined) Reflect.deleteProperty(env, CORE_ENV);
  const done = spawnSync(process.execPath, ["--input-type=module", "-e", PROGRAM], { env, encoding: "utf8", timeout: 60_000 });
  return { status: done.status, stdout: done.stdout, stderr: done.stderr };
}

test("the suite runs on the core it asked for", (t) => {
  // check.sh runs the suite once per core; neither run may fall back silently.
  const wanted = process.env[CORE_ENV];
  if (wanted === undefined || wanted === "") {
    t.skip(`${CORE_ENV} unset: the automatic choice is tested below`);
    return;
  }
  assert.equal(coreName(), wanted);
});

test("falls back to the @grpc/grpc-js core with one warning when the addon cannot load", () => {
  const done = withoutAddon(undefined);
  assert.equal(done.status, 0, done.stderr);
  assert.equal(done.stdout.trim(), "js");
  const warnings = done.stderr.split("\n").filter((line) => line.includes("native core"));
  assert.equal(warnings.length, 1, done.stderr);
  assert.match(warnings[0] ?? "", /troupe: the native core \(troupe\.[\w-]+\.node\) cannot load .*; using the slower @grpc\/grpc-js core/);
});

test("TROUPE_SDK_CORE=js needs no addon and warns nothing", () => {
  const done = withoutAddon("js");
  assert.equal(done.status, 0, done.stderr);
  assert.equal(done.stdout.trim(), "js");
  assert.equal(done.stderr.trim(), "");
});

test("TROUPE_SDK_CORE=native fails the first Client when the addon cannot load", () => {
  const done = withoutAddon("native");
  assert.notEqual(done.status, 0);
  assert.match(done.stderr, /TROUPE_SDK_CORE=native, but the native core cannot load/);
});

test("an unknown core is refused by name", () => {
  const done = withoutAddon("rust");
  assert.notEqual(done.status, 0);
  assert.match(done.stderr, /TROUPE_SDK_CORE="rust": use "js", "native", or leave it unset/);
});

test("the Python SDK's value is left to it", () => {
  // One environment may run both SDKs: TROUPE_SDK_CORE=python forces the Python SDK's
  // fallback and leaves this SDK's choice as if unset.
  const unset = withoutAddon(undefined);
  const python = withoutAddon("python");
  assert.equal(python.status, 0, python.stderr);
  assert.equal(python.stdout, unset.stdout);
  assert.equal(python.stderr, unset.stderr);
});
