// Throughput and latency of the TypeScript SDK on both sides of a local troupe daemon.
//
//     bench/typescript/run_bench.sh [--duration 5] [--max-calls 20000] [--actors 1000] [--unix]
//
// Starts its own daemon ($TROUPE_BIN, default target/debug/troupe) on an ephemeral
// 127.0.0.1 port with a temporary data dir, and an app process (this file with
// --app ADDRESS) hosting a stateless `bench-echo` actor and a stateful
// `bench-counter` actor. The load runs in this process through one Client: one
// sequential caller, then 64 concurrent callers, each spread over --actors actor
// ids. Every scenario stops after --duration seconds or --max-calls calls,
// whichever comes first. Everything runs on loopback; the processes share the
// machine's cores. Prints the same table as bench/python/bench_sdk.py.
//
// CPU per call is the CPU time (user + system, all threads, from /proc/PID/stat)
// the app process and this client process spent during the scenario, divided by
// its calls: what the SDK costs on each side, whatever else runs on the machine.
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Actor, actor, App, Client, method, TroupeError } from "@troupe/sdk";

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

@actor("bench-echo")
class Echo extends Actor {
  @method
  async echo(value: number): Promise<number> {
    return value;
  }
}

@actor("bench-counter")
class Counter extends Actor<{ count: number }> {
  @method
  async incr(by = 1): Promise<number> {
    const count = this.state.get("count", 0) + by;
    this.state.set("count", count);
    return count;
  }
}

async function runApp(address: string): Promise<void> {
  const app = new App({ actors: [Echo, Counter], address, appName: "bench-app" });
  const running = app.runForever();
  await app.waitRegistered({ timeout: "30s" });
  console.log("registered");
  await running;
}

interface Scenario {
  name: string;
  type: string;
  method: string;
  concurrency: number;
  anchor: string;
  anchorCallsPerS: number | undefined;
}

const SCENARIOS: Scenario[] = [
  { name: "sequential, stateless", type: "bench-echo", method: "echo", concurrency: 1, anchor: "-", anchorCallsPerS: undefined },
  {
    name: "sequential, stateful",
    type: "bench-counter",
    method: "incr",
    concurrency: 1,
    anchor: "Dapr, Go app 1,694/s (Dapr Py SDK 200-450/s)",
    anchorCallsPerS: 1694,
  },
  { name: "64 concurrent, stateless", type: "bench-echo", method: "echo", concurrency: 64, anchor: "Dapr + Go app 8,730/s", anchorCallsPerS: 8730 },
  {
    name: "64 concurrent, stateful",
    type: "bench-counter",
    method: "incr",
    concurrency: 64,
    anchor: "Dapr Py SDK 650-760/s; Restate TS 520-730/s",
    anchorCallsPerS: 760,
  },
];

interface Result {
  scenario: Scenario;
  calls: number;
  errors: number;
  seconds: number;
  latenciesMs: number[];
  appCpuS: number;
  clientCpuS: number;
}

const CLOCK_TICKS_PER_S = 100;

/** User + system CPU time of process `pid` so far, all its threads (Linux). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${String(pid)}/stat`, "utf8");
  // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the command.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_S;
}

function usPerCall(cpuS: number, calls: number): string {
  return calls > 0 ? ((cpuS / calls) * 1e6).toFixed(0) : "-";
}

function row(r: Result): string[] {
  const rate = r.seconds > 0 ? r.calls / r.seconds : 0;
  const lat = [...r.latenciesMs].sort((a, b) => a - b);
  const pct = (p: number): number => lat[Math.min(lat.length - 1, Math.floor(lat.length * p))] ?? Number.NaN;
  const p50 = lat.length % 2 === 1 || lat.length === 0 ? pct(0.5) : ((lat[lat.length / 2 - 1] ?? 0) + (lat[lat.length / 2] ?? 0)) / 2;
  const anchor = r.scenario.anchorCallsPerS;
  return [
    r.scenario.name,
    `${r.calls}${r.errors > 0 ? ` (${r.errors} err)` : ""}`,
    Math.round(rate).toLocaleString("en-US"),
    p50.toFixed(2),
    pct(0.99).toFixed(2),
    usPerCall(r.appCpuS, r.calls),
    usPerCall(r.clientCpuS, r.calls),
    r.scenario.anchor,
    anchor === undefined ? "-" : `${(rate / anchor).toFixed(2)}x`,
  ];
}

async function runScenario(client: Client, sc: Scenario, actors: number, durationS: number, maxCalls: number, appPid: number): Promise<Result> {
  const latencies: number[] = [];
  let errors = 0;
  let issued = 0;
  const stopAt = performance.now() + durationS * 1000;

  async function caller(worker: number): Promise<void> {
    let i = worker;
    while (issued < maxCalls && performance.now() < stopAt) {
      issued += 1;
      const id = `a${i % actors}`;
      i += sc.concurrency;
      const t0 = performance.now();
      try {
        await client.invoke(sc.type, id, sc.method, [1]);
      } catch (e) {
        if (!(e instanceof TroupeError)) throw e;
        errors += 1;
        continue;
      }
      latencies.push(performance.now() - t0);
    }
  }

  const [appCpu, clientCpu] = [cpuSeconds(appPid), cpuSeconds(process.pid)];
  const started = performance.now();
  await Promise.all(Array.from({ length: sc.concurrency }, (_, w) => caller(w)));
  return {
    scenario: sc,
    calls: latencies.length,
    errors,
    seconds: (performance.now() - started) / 1000,
    latenciesMs: latencies,
    appCpuS: cpuSeconds(appPid) - appCpu,
    clientCpuS: cpuSeconds(process.pid) - clientCpu,
  };
}

/** Activate every actor once so the scenarios measure calls, not activations. */
async function warmUp(client: Client, actors: number): Promise<void> {
  for (const [type, m] of [
    ["bench-echo", "echo"],
    ["bench-counter", "incr"],
  ] as const) {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < actors) {
        const i = next++;
        await client.invoke(type, `a${i}`, m, [0]);
      }
    };
    await Promise.all(Array.from({ length: 64 }, worker));
  }
}

function printTable(results: Result[]): void {
  const header = ["scenario", "calls", "calls/s", "p50 ms", "p99 ms", "app CPU µs/call", "client CPU µs/call", "anchor", "ratio"];
  const rows = [header, ...results.map(row)];
  const widths = header.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  rows.forEach((r, n) => {
    console.log(r.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join(" | "));
    if (n === 0) console.log(widths.map((w) => "-".repeat(w)).join("-+-"));
  });
}

function firstLine(proc: ChildProcess, pattern: RegExp, ms: number, what: string): Promise<RegExpExecArray> {
  return new Promise((resolveLine, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`${what}: nothing after ${ms} ms`));
    }, ms);
    if (proc.stdout === null) throw new Error("no stdout");
    const lines = createInterface({ input: proc.stdout });
    lines.on("line", (line) => {
      const m = pattern.exec(line);
      if (m !== null) {
        clearTimeout(timer);
        lines.close();
        resolveLine(m);
      }
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${what}: process exited with ${code ?? "a signal"}`));
    });
  });
}

async function stop(proc: ChildProcess | undefined): Promise<void> {
  if (proc?.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((r) => {
    proc.once("exit", () => {
      r();
    });
  });
  proc.kill("SIGTERM");
  const timer = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  await exited;
  clearTimeout(timer);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      app: { type: "string" },
      duration: { type: "string", default: "5" },
      "max-calls": { type: "string", default: "20000" },
      actors: { type: "string", default: "1000" },
      // The app and the client reach the daemon on its Unix socket (--listen-unix), not TCP.
      unix: { type: "boolean", default: false },
    },
  });
  if (values.app !== undefined) {
    await runApp(values.app);
    return;
  }
  const durationS = Number(values.duration);
  const maxCalls = Number(values["max-calls"]);
  const actors = Number(values.actors);
  const binary = process.env["TROUPE_BIN"] ?? join(REPO_ROOT, "target", "debug", "troupe");
  if (!existsSync(binary)) throw new Error(`daemon binary ${binary} not found; build it or set TROUPE_BIN`);

  const tmp = mkdtempSync(join(tmpdir(), "troupe-bench-ts-"));
  const logPath = join(tmp, "daemon.log");
  const log = createWriteStream(logPath);
  let daemon: ChildProcess | undefined;
  let app: ChildProcess | undefined;
  try {
    const socket = join(tmp, "troupe.sock");
    const unixArgs = values.unix ? ["--listen-unix", socket] : [];
    daemon = spawn(binary, ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(tmp, "data"), ...unixArgs], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    daemon.stderr?.pipe(log);
    const m = await firstLine(daemon, /^troupe listening on (127\.0\.0\.1:\d+)$/, 20_000, "daemon start");
    const address = values.unix ? `unix:${socket}` : (m[1] ?? "");
    app = spawn(process.execPath, [fileURLToPath(import.meta.url), "--app", address], { stdio: ["ignore", "pipe", "inherit"] });
    await firstLine(app, /^registered$/, 30_000, "bench app registration");
    console.log(`daemon ${binary} at ${address}; ${actors} actors per type; node ${process.version}; TROUPE_SDK_CORE=${process.env["TROUPE_SDK_CORE"] ?? "(unset: native if it loads)"}`);
    const client = new Client({ address, timeout: "30s" });
    try {
      await warmUp(client, actors);
      const results: Result[] = [];
      const appPid = app.pid;
      if (appPid === undefined) throw new Error("bench app has no pid");
      for (const sc of SCENARIOS) results.push(await runScenario(client, sc, actors, durationS, maxCalls, appPid));
      printTable(results);
    } finally {
      client.close();
    }
  } catch (e) {
    process.stderr.write(readFileSync(logPath, "utf8").slice(-4000));
    throw e;
  } finally {
    await stop(app);
    await stop(daemon);
    log.end();
    rmSync(tmp, { recursive: true, force: true });
  }
}

await main();
