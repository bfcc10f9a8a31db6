// The SDK and the daemon agree on an app API version, or the app stops with
// ApiVersionMismatch naming both; and the SDK's release is package.json's and the
// daemon's. Fake AppHosts answer with another version, with none, or refuse the
// SDK's as the daemon does; the real daemon answers with this SDK's.
import * as grpc from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { inspect } from "node:util";
import { type AppMessage, AppHostService, type DaemonMessage, type Register } from "../src/gen/troupe/v1/app.js";
import { Actor, actor, API_VERSION, ApiVersionMismatch, App, FailedPrecondition, method, SDK_NAME, SDK_VERSION } from "../src/index.js";
import { bindLoopback, type Daemon, host, quietLogger, REPO_ROOT, SDK_ROOT, startDaemon, within } from "./helpers.js";

@actor("versioned")
class Versioned extends Actor {
  @method
  get(): number {
    return 1;
  }
}

/** The `version = "..."` of `[section]` in a TOML file. */
function tomlVersion(path: string, section: string): string {
  const text = readFileSync(path, "utf8");
  const start = text.indexOf(`[${section}]\n`);
  assert.ok(start >= 0, `no [${section}] in ${path}`);
  const m = /^version = "([^"]+)"$/m.exec(text.slice(start));
  assert.ok(m?.[1] !== undefined, `no version in [${section}] of ${path}`);
  return m[1];
}

test("the SDK's release is package.json's version and the daemon's", () => {
  const pkg: unknown = JSON.parse(readFileSync(join(SDK_ROOT, "package.json"), "utf8"));
  const version = (pkg as { version?: unknown }).version;
  assert.equal(SDK_VERSION, version, "address.ts's SDK_VERSION != package.json's version");
  assert.equal(SDK_NAME, `troupe-typescript/${SDK_VERSION}`);
  assert.equal(version, tomlVersion(join(REPO_ROOT, "Cargo.toml"), "workspace.package"), "the SDK ships with the daemon: keep package.json and Cargo.toml equal");
  // The Python wheel's version is Cargo's by construction (maturin, dynamic).
});

/** How a fake AppHost answers Register: a Registered of this api version, or the daemon's refusal of the SDK's. */
type Answer = { apiVersion: number } | "refuse";

/** An AppHost that answers every Register as `answer` says and counts them. */
class FakeDaemon {
  readonly #server = new grpc.Server();
  readonly registers: Register[] = [];
  answer: Answer = { apiVersion: API_VERSION };
  port = 0;

  async start(): Promise<void> {
    this.#server.addService(AppHostService, {
      attach: (stream: grpc.ServerDuplexStream<AppMessage, DaemonMessage>) => {
        stream.on("data", (msg: AppMessage) => {
          if (msg.kind?.$case !== "register") return;
          this.registers.push(msg.kind.value);
          const answer = this.answer;
          if (answer === "refuse") {
            // As the daemon refuses another version: its own in the trailer.
            const metadata = new grpc.Metadata();
            metadata.set("troupe-api-version", "7");
            stream.emit("error", {
              code: grpc.status.FAILED_PRECONDITION,
              details: `app API version mismatch: the app's SDK (${msg.kind.value.sdk}) speaks app API version 1, this daemon (troupe 7.0.0) speaks version 7; install matching versions`,
              metadata,
            });
            return;
          }
          stream.write({ kind: { $case: "registered", value: { types: msg.kind.value.types, daemonVersion: "9.9.9", acceptsBatches: true, apiVersion: answer.apiVersion, acceptsParts: false } } });
        });
        stream.on("error", () => undefined);
      },
    });
    this.port = await bindLoopback(this.#server);
  }

  get address(): string {
    return `127.0.0.1:${String(this.port)}`;
  }

  stop(): void {
    this.#server.forceShutdown();
  }
}

function mismatch(check: (err: ApiVersionMismatch) => void): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof ApiVersionMismatch, `expected ApiVersionMismatch, got ${inspect(err)}`);
    assert.ok(err instanceof FailedPrecondition);
    assert.equal(err.code, grpc.status.FAILED_PRECONDITION);
    assert.equal(err.sdkApiVersion, API_VERSION);
    assert.match(err.message, /install matching versions/);
    check(err);
    return true;
  };
}

describe("a daemon of another app API version", () => {
  const fake = new FakeDaemon();
  before(() => fake.start());
  after(() => {
    fake.stop();
  });

  const cases: [string, Answer, (err: ApiVersionMismatch) => void][] = [
    [
      "answering version 2",
      { apiVersion: 2 },
      (err) => {
        assert.equal(err.daemonApiVersion, 2);
        assert.match(err.message, /speaks app API version 2, this SDK \(troupe-typescript\/[^)]+\) speaks version 1/);
        assert.match(err.message, /troupe 9\.9\.9/);
        assert.match(err.message, /npm install @troupe\/sdk/);
      },
    ],
    [
      "from before API versions (answering 0)",
      { apiVersion: 0 },
      (err) => {
        assert.equal(err.daemonApiVersion, 0);
        assert.match(err.message, /from before app API versions/);
      },
    ],
    [
      "refusing the SDK's",
      "refuse",
      (err) => {
        assert.equal(err.daemonApiVersion, 7);
        assert.match(err.message, /^daemon refused the registration: app API version mismatch/);
      },
    ],
  ];
  for (const [name, answer, check] of cases) {
    test(`${name}: start() and run() reject with ApiVersionMismatch, once, without retrying`, async () => {
      fake.answer = answer;
      fake.registers.length = 0;
      const started = new App({ actors: [Versioned], address: fake.address, appName: "node-test", logger: quietLogger });
      try {
        await within(10_000, "start to reject", assert.rejects(started.start(), mismatch(check)));
        assert.equal(started.sessions, 0);
        assert.equal(started.registered, false);
        assert.equal(started.running, false, "the app stopped instead of re-connecting");
      } finally {
        await started.close();
      }
      const ran = new App({ actors: [Versioned], address: fake.address, appName: "node-test", logger: quietLogger });
      await within(10_000, "run to reject", assert.rejects(ran.run(), mismatch(check)));
      assert.equal(fake.registers.length, 2, "one Register per app: not retried");
      for (const register of fake.registers) {
        assert.equal(register.apiVersion, API_VERSION);
        assert.equal(register.sdk, SDK_NAME);
      }
    });
  }
});

describe("the real daemon", () => {
  let daemon: Daemon;
  before(async () => {
    daemon = await startDaemon();
  });
  after(() => daemon.dispose());

  test("speaks this SDK's API version and is of its release", async () => {
    assert.equal(API_VERSION, 1);
    const app = await host(daemon.address, Versioned);
    try {
      assert.equal(app.daemonVersion, SDK_VERSION);
    } finally {
      await app.close();
    }
  });
});
