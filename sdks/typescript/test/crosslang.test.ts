// Cross-language: a Python client calls a TypeScript actor and a TypeScript client
// calls a Python actor, with the same arguments and the same results.
//
// Needs the Python SDK in a virtualenv: $TROUPE_PYTHON, default <repo>/.venv/bin/python
// (python3 -m venv .venv && .venv/bin/pip install -e sdks/python). Without it the
// test fails and says so.
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Actor, ActorError, type App, actor, Client, method } from "../src/index.js";
import { type Daemon, host, REPO_ROOT, SDK_ROOT, startDaemon, waitForLine, within } from "./helpers.js";

const FIXTURES = join(SDK_ROOT, "test", "fixtures");

function pythonBin(): string {
  const python = process.env["TROUPE_PYTHON"] ?? join(REPO_ROOT, ".venv", "bin", "python");
  if (!existsSync(python)) {
    throw new Error(
      `cross-language test needs the Python SDK: no Python at ${python}. ` +
        "Create it with `python3 -m venv .venv && .venv/bin/pip install -e sdks/python` at the repo root, or set TROUPE_PYTHON.",
    );
  }
  return python;
}

class LedgerError extends Error {}

interface Entry {
  amount: number;
  note: string;
}

/** The TypeScript twin of test/fixtures/ledger_py.py. */
@actor("ledger-ts")
class Ledger extends Actor<{ total: number; entries: Entry[]; currency: string; limit: number; city: string }> {
  @method
  async add(amount: number, note = ""): Promise<number> {
    await Promise.resolve();
    const entries = this.state.get("entries", []);
    entries.push({ amount, note });
    this.state.set("entries", entries);
    this.state.set("total", this.state.get("total", 0) + amount);
    return this.state.get("total", 0);
  }

  // Python callers pass keyword arguments: configure(currency="EUR", limit=100).
  @method
  configure({ currency, limit }: { currency: string; limit: number }): { currency: string; limit: number } {
    this.state.set("currency", currency);
    this.state.set("limit", limit);
    this.state.set("city", "Zürich ✓");
    return { currency, limit };
  }

  @method
  summary(): { total: number; entries: Entry[]; currency: string | null; city: string | null } {
    return {
      total: this.state.get("total", 0),
      entries: this.state.get("entries", []),
      currency: this.state.get("currency") ?? null,
      city: this.state.get("city") ?? null,
    };
  }

  @method
  reverse(data: Uint8Array): Uint8Array {
    return Uint8Array.from(data).reverse();
  }

  @method
  nothing(): void {
    return undefined;
  }

  @method
  fail(message: string): never {
    throw new LedgerError(message);
  }
}

const hex = (b: Uint8Array): { hex: string } => ({ hex: Buffer.from(b).toString("hex") });

function plain(value: unknown): unknown {
  if (value instanceof Uint8Array) return hex(value);
  if (Array.isArray(value)) return value.map(plain);
  if (typeof value === "object" && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  return value;
}

/** The scenario of fixtures/ledger_client.py, with the TypeScript client. */
async function tsScenario(client: Client, type: string, id: string): Promise<unknown> {
  const ledger = client.actor(type, id);
  const out: Record<string, unknown> = {};
  out["add1"] = await ledger.call("add", 2.5);
  out["add2"] = await ledger.call("add", 1, "coffee");
  out["add3"] = await client.invoke(type, id, "add", [0.25, "tea"]);
  out["configure"] = await client.invoke(type, id, "configure", { currency: "EUR", limit: 100 });
  out["summary"] = await ledger.call("summary");
  out["reverse"] = await ledger.call("reverse", new Uint8Array([0, 1, 97, 98, 99]));
  out["nothing"] = await ledger.call("nothing");
  try {
    await ledger.call("fail", "boom");
    out["fail"] = "no error";
  } catch (e) {
    if (!(e instanceof ActorError)) throw e;
    out["fail"] = { type: e.remoteType, message: e.message };
  }
  try {
    await ledger.call("add", 1, "x", "extra");
    out["too_many"] = "no error";
  } catch (e) {
    if (!(e instanceof ActorError)) throw e;
    out["too_many"] = e.remoteType;
  }
  out["state"] = await client.getState(type, id);
  out["raw_city"] = await client.getState(type, id, ["city", "total"], { raw: true });
  return plain(out);
}

const ENTRIES = [
  { amount: 2.5, note: "" },
  { amount: 1, note: "coffee" },
  { amount: 0.25, note: "tea" },
];

const EXPECTED = {
  add1: 2.5,
  add2: 3.5,
  add3: 3.75,
  configure: { currency: "EUR", limit: 100 },
  summary: { total: 3.75, entries: ENTRIES, currency: "EUR", city: "Zürich ✓" },
  reverse: { hex: "6362610100" },
  nothing: null,
  fail: { type: "LedgerError", message: "boom" },
  // More positional arguments than add(amount, note = "") declares: TypeError from either language.
  too_many: "TypeError",
  state: { total: 3.75, entries: ENTRIES, currency: "EUR", limit: 100, city: "Zürich ✓" },
  // Byte-identical state encoding in both SDKs: compact, ASCII-safe JSON.
  raw_city: { city: hex(Buffer.from('"Z\\u00fcrich \\u2713"')), total: hex(Buffer.from("3.75")) },
};

function runPython(args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(pythonBin(), args, { timeout: 60_000, cwd: REPO_ROOT }, (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`python ${args.join(" ")} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

// Fails (rather than skips) without the Python SDK: the cross-language guarantee is untested then.
test("the Python SDK is available for the cross-language tests", () => {
  assert.ok(existsSync(pythonBin()));
});

describe("cross-language", () => {
  let daemon: Daemon;
  let client: Client;
  let app: App;
  let pyHost: ChildProcess | undefined;

  before(async () => {
    const python = pythonBin();
    daemon = await startDaemon();
    client = new Client({ address: daemon.address, timeout: 20 });
    app = await host(daemon.address, Ledger);
    pyHost = spawn(python, ["-u", join(FIXTURES, "ledger_py.py"), daemon.address, "ledger-py"], { stdio: ["ignore", "pipe", "inherit"] });
    await waitForLine(pyHost, /^registered$/, 30_000, "the Python ledger app to register");
  });

  after(async () => {
    if (pyHost !== undefined && pyHost.exitCode === null) {
      const proc = pyHost;
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await within(20_000, "the Python app to exit", exited).catch(() => proc.kill("SIGKILL"));
    }
    await app.close();
    client.close();
    await daemon.dispose();
  });

  test("a Python client calls a TypeScript actor", async () => {
    const stdout = await runPython([join(FIXTURES, "ledger_client.py"), daemon.address, "ledger-ts", "l1"]);
    assert.deepEqual(JSON.parse(stdout), EXPECTED);
  });

  test("a TypeScript client calls a Python actor", async () => {
    assert.deepEqual(await tsScenario(client, "ledger-py", "l1"), EXPECTED);
  });

  test("each client gets the same from its own language", async () => {
    assert.deepEqual(await tsScenario(client, "ledger-ts", "l2"), EXPECTED);
    const stdout = await runPython([join(FIXTURES, "ledger_client.py"), daemon.address, "ledger-py", "l2"]);
    assert.deepEqual(JSON.parse(stdout), EXPECTED);
  });
});
