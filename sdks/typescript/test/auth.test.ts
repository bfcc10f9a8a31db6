// Tokens against the real daemon, started with TROUPE_API_TOKEN and TROUPE_APP_TOKEN
// in its own environment: calls and apps without the right token are refused,
// and no token shows in errors, logs or an inspected Client or App.
import * as grpc from "@grpc/grpc-js";
import { SpanKind } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { inspect } from "node:util";
import { Actor, actor, App, Client, type Logger, method, TroupeError, Unauthenticated } from "../src/index.js";
import { API_TOKEN_ENV, APP_TOKEN_ENV, parseTokens, resolveToken } from "../src/auth.js";
import { type Daemon, quietLogger, startDaemon, within } from "./helpers.js";

const API_TOKEN = "api-7f3c9e1b-secret";
const ROTATED_API_TOKEN = "api-rotated-secret";
const APP_TOKEN = "app-d41d8cd9-secret";
const WRONG_TOKEN = "wrong-0a1b2c3d-secret";
const SECRETS = [API_TOKEN, ROTATED_API_TOKEN, APP_TOKEN, WRONG_TOKEN];

@actor("auth_echo")
class Echo extends Actor {
  @method
  echo(text: string): string {
    return text;
  }
}

/** Calls auth_echo from inside its turn: with the app's token, as the app holds no other. */
@actor("auth_relay")
class Relay extends Actor {
  @method
  async relay(text: string): Promise<string> {
    return `relayed ${await this.ctx.actor<Echo>("auth_echo", this.id).call("echo", text)}`;
  }
}

@actor("auth_chain_callee")
class ChainCallee extends Actor {
  @method
  chain(): readonly string[] {
    return this.ctx.chain;
  }
}

@actor("auth_chain_caller")
class ChainCaller extends Actor {
  @method
  async ask(): Promise<readonly string[]> {
    return this.ctx.actor<ChainCallee>("auth_chain_callee", this.id).call("chain");
  }
}

@actor("auth_from_file")
class FromFile extends Echo {}

@actor("auth_from_env")
class FromEnv extends Echo {}

/**
 * Run `make` (which reads the token variables once, synchronously) with the
 * variables set as given (undefined: unset), then put them back, so that no
 * token outlives the construction in this process's environment.
 */
function withEnv<T>(vars: Readonly<Record<string, string | undefined>>, make: () => T): T {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (values: Readonly<Record<string, string | undefined>>): void => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) Reflect.deleteProperty(process.env, k);
      else process.env[k] = v;
    }
  };
  apply(vars);
  try {
    return make();
  } finally {
    apply(saved);
  }
}

/** `make` with neither token variable set. */
function noEnvToken<T>(make: () => T): T {
  return withEnv({ [API_TOKEN_ENV]: undefined, [APP_TOKEN_ENV]: undefined, [`${API_TOKEN_ENV}_FILE`]: undefined, [`${APP_TOKEN_ENV}_FILE`]: undefined }, make);
}

/** A Logger that keeps every line. */
function recordingLogger(lines: string[]): Logger {
  const keep = (m: string): void => {
    lines.push(m);
  };
  return { warn: keep, info: keep, debug: keep };
}

function assertNoSecret(text: string, what: string): void {
  for (const secret of SECRETS) assert.ok(!text.includes(secret), `${what} shows a token: ${text}`);
}

/** An assert.rejects check: Unauthenticated, with the daemon's explanation and no token. */
function unauthenticated(expects: RegExp): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof Unauthenticated, `expected Unauthenticated, got ${inspect(err)}`);
    assert.ok(err instanceof TroupeError);
    assert.equal(err.code, grpc.status.UNAUTHENTICATED);
    assert.match(err.message, expects);
    assertNoSecret(err.message, "the error");
    assertNoSecret(err.stack ?? "", "the error's stack");
    return true;
  };
}

function tokenFile(dir: string, name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text, { mode: 0o600 });
  return path;
}

describe("token resolution", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "troupe-ts-token-"));
  });
  after(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  test("tokens parse as the daemon parses them: lines or commas, comments and blanks skipped", () => {
    assert.deepEqual(parseTokens("# rotated on Monday\n\n  new-token  \r\nold-token\n"), ["new-token", "old-token"]);
    assert.deepEqual(parseTokens("a, b,,c"), ["a", "b", "c"]);
    assert.deepEqual(parseTokens(""), []);
  });

  test("the token option, else the token file, else the first token of the variable", () => {
    const file = tokenFile(dir, "token", "# the API token\nfrom-file\n");
    withEnv({ [API_TOKEN_ENV]: "from-env,second" }, () => {
      assert.equal(resolveToken({ token: " given ", tokenFile: file }, API_TOKEN_ENV), "given");
      assert.equal(resolveToken({ token: "", tokenFile: file }, API_TOKEN_ENV), "from-file");
      assert.equal(resolveToken({}, API_TOKEN_ENV), "from-env");
    });
    withEnv({ [API_TOKEN_ENV]: "\n# comment\nsecond-line" }, () => {
      assert.equal(resolveToken({}, API_TOKEN_ENV), "second-line");
    });
    noEnvToken(() => {
      assert.equal(resolveToken({}, API_TOKEN_ENV), undefined);
    });
  });

  test("$TROUPE_*_TOKEN_FILE, the daemon's variable for a mounted Secret, comes after the options and before the token variable", () => {
    const file = tokenFile(dir, "mounted", "from-mounted-file\n");
    withEnv({ [`${API_TOKEN_ENV}_FILE`]: file, [API_TOKEN_ENV]: "stale" }, () => {
      assert.equal(resolveToken({}, API_TOKEN_ENV), "from-mounted-file");
      assert.equal(resolveToken({ token: "given" }, API_TOKEN_ENV), "given");
      assert.equal(resolveToken({}, APP_TOKEN_ENV), undefined, "the API token's file is not the app's");
    });
    const empty = tokenFile(dir, "not-mounted-yet", "");
    withEnv({ [`${APP_TOKEN_ENV}_FILE`]: empty, [APP_TOKEN_ENV]: "from-env" }, () => {
      assert.throws(() => resolveToken({}, APP_TOKEN_ENV), (e: unknown) => e instanceof TypeError && e.message.includes("$TROUPE_APP_TOKEN_FILE") && /holds no token/.test(e.message));
    });
  });

  test("a token file that cannot be read or holds no token is an error", () => {
    const missing = join(dir, "missing");
    assert.throws(() => new Client({ tokenFile: missing }), (e: unknown) => e instanceof Error && e.message.includes(missing));
    const empty = tokenFile(dir, "empty", "# nothing yet\n\n");
    assert.throws(() => new App({ actors: [Echo], tokenFile: empty }), (e: unknown) => e instanceof TypeError && /holds no token/.test(e.message));
  });

  test("a token that cannot travel in metadata is refused without showing it", () => {
    for (const bad of [`${WRONG_TOKEN}\u00e9`, `${WRONG_TOKEN}\u0000x`]) {
      assert.throws(
        () => new Client({ token: bad }),
        (e: unknown) => e instanceof TypeError && /printable ASCII/.test(e.message) && !e.message.includes(WRONG_TOKEN),
      );
      const file = tokenFile(dir, "bad", `${bad}\n`);
      assert.throws(
        () => new App({ actors: [Echo], tokenFile: file }),
        (e: unknown) => e instanceof TypeError && e.message.includes(file) && !e.message.includes(WRONG_TOKEN),
      );
    }
  });
});

describe("a daemon that requires tokens", () => {
  let daemon: Daemon;
  let dir: string;
  let app: App;
  const appLog: string[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "troupe-ts-token-"));
    // Two API tokens, as while rotating: the SDK sends one, the first it is given.
    daemon = await startDaemon([], { [API_TOKEN_ENV]: `${API_TOKEN},${ROTATED_API_TOKEN}`, [APP_TOKEN_ENV]: APP_TOKEN });
    app = noEnvToken(() => new App({ actors: [Echo, Relay], address: daemon.address, token: APP_TOKEN, logger: recordingLogger(appLog) }));
    await app.start({ timeout: 15 });
  });
  after(async () => {
    await app.close();
    await daemon.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a client without a token gets Unauthenticated, on every kind of call", async () => {
    const client = noEnvToken(() => new Client({ address: daemon.address, timeout: 10 }));
    try {
      const check = unauthenticated(/requires the client API token.*TROUPE_API_TOKEN/);
      await assert.rejects(client.invoke("auth_echo", "e1", "echo", ["hi"]), check);
      await assert.rejects(client.tell("auth_echo", "e1", "echo", ["hi"]), check);
      await assert.rejects(client.getState("auth_echo", "e1"), check);
      await assert.rejects(client.listReminders(), check);
    } finally {
      client.close();
    }
  });

  test("a client with a wrong token gets Unauthenticated that does not show the token", async () => {
    const client = noEnvToken(() => new Client({ address: daemon.address, token: WRONG_TOKEN, timeout: 10 }));
    try {
      await assert.rejects(client.actor<Echo>("auth_echo", "e1").call("echo", "hi"), unauthenticated(/not the client API token this daemon accepts/));
    } finally {
      client.close();
    }
  });

  test("the right token works from the option, a token file with a comment, or $TROUPE_API_TOKEN", async () => {
    const file = tokenFile(dir, "api-token", `# client token, rotated 2026-11\n\n${API_TOKEN}\n`);
    const clients: [string, Client][] = [
      ["option", noEnvToken(() => new Client({ address: daemon.address, token: ROTATED_API_TOKEN, timeout: 10 }))],
      ["tokenFile", withEnv({ [API_TOKEN_ENV]: WRONG_TOKEN }, () => new Client({ address: daemon.address, tokenFile: file, timeout: 10 }))],
      ["env", withEnv({ [API_TOKEN_ENV]: `${API_TOKEN},${WRONG_TOKEN}` }, () => new Client({ address: daemon.address, timeout: 10 }))],
    ];
    try {
      for (const [how, client] of clients) {
        assert.equal(await client.invoke("auth_echo", how, "echo", [how]), how, how);
        await client.tell("auth_echo", how, "echo", [how]);
        assert.deepEqual(await client.getState("auth_echo", how), {}, how);
        assert.deepEqual(await client.listReminders({ actorType: "auth_echo", actorId: how }), [], how);
      }
    } finally {
      for (const [, client] of clients) client.close();
    }
  });

  test("an app with the app token registers, and its actors call others from their turns", async () => {
    assert.ok(app.registered);
    const client = noEnvToken(() => new Client({ address: daemon.address, token: API_TOKEN, timeout: 10 }));
    try {
      assert.equal(await client.actor<Relay>("auth_relay", "r1").call("relay", "hi"), "relayed hi");
    } finally {
      client.close();
    }
    // The daemon takes the app token for calls too.
    const asApp = noEnvToken(() => new Client({ address: daemon.address, token: APP_TOKEN, timeout: 10 }));
    try {
      assert.equal(await asApp.invoke("auth_echo", "e2", "echo", ["as app"]), "as app");
    } finally {
      asApp.close();
    }
    assertNoSecret(appLog.join("\n"), "the app's log");
  });

  test("with tokens, calls still carry their trace context and call chain", async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    const traced = noEnvToken(
      () => new App({ actors: [ChainCaller, ChainCallee], address: daemon.address, token: APP_TOKEN, logger: quietLogger, tracerProvider: provider }),
    );
    const client = noEnvToken(() => new Client({ address: daemon.address, token: API_TOKEN, timeout: 10, tracerProvider: provider }));
    try {
      await traced.start({ timeout: 15 });
      assert.deepEqual(await client.actor<ChainCaller>("auth_chain_caller", "t1").call("ask"), ["auth_chain_caller/t1", "auth_chain_callee/t1"]);
    } finally {
      client.close();
      await traced.close();
    }
    await provider.forceFlush();
    const spans = exporter.getFinishedSpans();
    const call = spans.find((sp) => sp.kind === SpanKind.CLIENT && sp.name === "auth_chain_caller/ask");
    const nestedTurn = spans.find((sp) => sp.kind === SpanKind.SERVER && sp.name === "auth_chain_callee/chain");
    assert.ok(call !== undefined && nestedTurn !== undefined, spans.map((sp) => sp.name).join(", "));
    assert.equal(nestedTurn.spanContext().traceId, call.spanContext().traceId);
  });

  test("an app with the token in a file (after a comment) or in $TROUPE_APP_TOKEN registers", async () => {
    const file = tokenFile(dir, "app-token", `# app token\n${APP_TOKEN}\n`);
    const fromFile = noEnvToken(() => new App({ actors: [FromFile], address: daemon.address, tokenFile: file, logger: quietLogger }));
    const fromEnv = withEnv({ [APP_TOKEN_ENV]: APP_TOKEN, [API_TOKEN_ENV]: undefined }, () => new App({ actors: [FromEnv], address: daemon.address, logger: quietLogger }));
    const client = noEnvToken(() => new Client({ address: daemon.address, token: API_TOKEN, timeout: 10 }));
    try {
      await fromFile.start({ timeout: 15 });
      await fromEnv.start({ timeout: 15 });
      assert.equal(await client.invoke("auth_from_file", "f1", "echo", ["file"]), "file");
      assert.equal(await client.invoke("auth_from_env", "v1", "echo", ["env"]), "env");
    } finally {
      client.close();
      await fromFile.close();
      await fromEnv.close();
    }
  });

  test("an app holding only the API token, or none, cannot register: start and run reject at once", async () => {
    for (const token of [API_TOKEN, undefined]) {
      const lines: string[] = [];
      const make = (): App =>
        withEnv({ [API_TOKEN_ENV]: API_TOKEN, [APP_TOKEN_ENV]: undefined }, () =>
          new App({ actors: [FromFile], address: daemon.address, token, logger: recordingLogger(lines) }),
        );
      const check = unauthenticated(/refused the registration.*requires the app token|refused the registration.*not the app token/);
      const started = make();
      const ran = make();
      try {
        await within(10_000, "start to reject", assert.rejects(started.start(), check));
        assert.equal(started.running, false, "the app stopped re-connecting");
        assert.equal(started.registered, false);
        await within(10_000, "run to reject", assert.rejects(ran.run(), check));
        assert.equal(ran.running, false);
      } finally {
        // Only matters when the test fails: an app still re-connecting would keep the process alive.
        await started.close();
        await ran.close();
      }
      assert.deepEqual(
        lines.filter((l) => l.includes("retrying")),
        [],
        "a refused token is not retried",
      );
      assertNoSecret(lines.join("\n"), "the app's log");
    }
  });

  test("inspecting or serialising a Client or an App does not show its token", async () => {
    const client = noEnvToken(() => new Client({ address: daemon.address, token: API_TOKEN, timeout: 10 }));
    try {
      // After a call, so that the connection and its interceptor exist.
      assert.equal(await client.invoke("auth_echo", "i1", "echo", ["x"]), "x");
      for (const [what, obj] of [
        ["client", client],
        ["app", app],
      ] as const) {
        assertNoSecret(inspect(obj, { showHidden: true, depth: Infinity, getters: true }), `inspect(${what})`);
        assertNoSecret(JSON.stringify(obj), `JSON of ${what}`);
      }
    } finally {
      client.close();
    }
  });
});

describe("a daemon that requires no token", () => {
  test("ignores the token of a client and of an app", async () => {
    const daemon = await startDaemon();
    const app = noEnvToken(() => new App({ actors: [Echo], address: daemon.address, token: APP_TOKEN, logger: quietLogger }));
    const client = noEnvToken(() => new Client({ address: daemon.address, token: API_TOKEN, timeout: 10 }));
    try {
      await app.start({ timeout: 15 });
      assert.equal(await client.invoke("auth_echo", "o1", "echo", ["open"]), "open");
    } finally {
      client.close();
      await app.close();
      await daemon.dispose();
    }
  });
});

describe("a rotated app token", () => {
  test("an app reads its token file again when it re-connects", async () => {
    // The Secret is rotated while the daemon restarts with the new token: read once, the
    // old token would be refused for good (Unauthenticated ends run()).
    const rotated = "app-rotated-5e1d";
    const dir = mkdtempSync(join(tmpdir(), "troupe-ts-rotate-"));
    const file = tokenFile(dir, "app-token", `${APP_TOKEN}\n`);
    const daemon = await startDaemon([], { [API_TOKEN_ENV]: API_TOKEN, [APP_TOKEN_ENV]: APP_TOKEN });
    const app = noEnvToken(() => new App({ actors: [Echo], address: daemon.address, tokenFile: file, logger: quietLogger }));
    const client = noEnvToken(() => new Client({ address: daemon.address, token: API_TOKEN, timeout: 10 }));
    try {
      await app.start({ timeout: 15 });
      assert.equal(await client.invoke("auth_echo", "r1", "echo", ["before"]), "before");
      const sessions = app.sessions;
      assert.equal(await daemon.stop(), 0);
      writeFileSync(file, `# rotated\n${rotated}\n`);
      daemon.setEnv({ [APP_TOKEN_ENV]: rotated });
      await daemon.start();
      await app.waitRegistered({ sessions: sessions + 1, timeout: 15 });
      assert.equal(await client.invoke("auth_echo", "r1", "echo", ["after"]), "after");
    } finally {
      client.close();
      await app.close();
      await daemon.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
