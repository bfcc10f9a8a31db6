// TLS against the real daemon, its certificates made by `troupe certs`: clients and
// apps with the CA get through (and with a client certificate where one is
// required), the others fail at once; the options, their variables and their errors.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { inspect } from "node:util";
import { Actor, actor, App, Client, method, TlsConfigError, TroupeError, Unauthenticated, Unavailable } from "../src/index.js";
import { resolveTls, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV } from "../src/tls.js";
import { type Daemon, quietLogger, signal, startDaemon, troupeBin, within } from "./helpers.js";

const API_TOKEN = "api-tls-6c2e-secret";
const APP_TOKEN = "app-tls-93fa-secret";

@actor("tls_back")
class Back extends Actor<{ n: number }> {
  @method
  incr(): number {
    const n = this.state.get("n", 0) + 1;
    this.state.set("n", n);
    return n;
  }
}

/** Calls tls_back from its turn: on the app's own connection, over TLS too. */
@actor("tls_front")
class Front extends Actor {
  @method
  async relay(backId: string): Promise<number> {
    return this.ctx.actor<Back>("tls_back", backId).call("incr");
  }
}

/** One CA's files as `troupe certs` writes them: a daemon's certificate `d1`, a client's `app`. */
class Certs {
  constructor(readonly dir: string) {
    for (const args of [["ca"], ["issue", "d1"], ["issue", "app", "--client"]]) {
      execFileSync(troupeBin(), ["certs", ...args, "--dir", dir], { stdio: "pipe", timeout: 30_000 });
    }
  }
  get ca(): string {
    return join(this.dir, "ca.pem");
  }
  pem(name: string): string {
    return join(this.dir, `${name}.pem`);
  }
  key(name: string): string {
    return join(this.dir, `${name}.key`);
  }
  /** The daemon's flags for TLS with these files. */
  daemonArgs(): string[] {
    return ["--tls-cert", this.pem("d1"), "--tls-key", this.key("d1"), "--tls-ca", this.ca];
  }
}

const TLS_VARS = [TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV] as const;

/** Run `make` with the TLS variables set as given (the others unset), then put them back. */
function withTlsEnv<T>(vars: Partial<Record<(typeof TLS_VARS)[number], string>>, make: () => T): T {
  const saved = TLS_VARS.map((k) => [k, process.env[k]] as const);
  for (const k of TLS_VARS) {
    const v = vars[k];
    if (v === undefined) Reflect.deleteProperty(process.env, k);
    else process.env[k] = v;
  }
  try {
    return make();
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) Reflect.deleteProperty(process.env, k);
      else process.env[k] = v;
    }
  }
}

/** An App hosting Front and Back, started (bounded). */
async function hostTls(address: string, options: { tlsCa?: string; tlsCert?: string; tlsKey?: string; token?: string } = {}): Promise<App> {
  const app = new App({ actors: [Front, Back], address, appName: "node-tls-test", logger: quietLogger, ...options });
  try {
    await app.start({ timeout: 15 });
  } catch (e) {
    await app.close();
    throw e;
  }
  return app;
}

/** Front calls Back from its turn, twice, and the client reads Back's state. */
async function roundTrip(client: Client, id: string): Promise<void> {
  assert.equal(await client.actor<Front>("tls_front", id).call("relay", id), 1);
  assert.equal(await client.actor<Front>("tls_front", id).call("relay", id), 2);
  assert.deepEqual(await client.getState("tls_back", id), { n: 2 });
}

/** An assert.rejects check: Unavailable, quickly (the caller bounds the wait). */
function unavailable(err: unknown): boolean {
  assert.ok(err instanceof Unavailable, `expected Unavailable, got ${inspect(err)}`);
  return true;
}

let root: string;
let certs: Certs;
let otherCerts: Certs;

before(() => {
  root = mkdtempSync(join(tmpdir(), "troupe-ts-tls-"));
  certs = new Certs(mkdtempSync(join(root, "certs-")));
  // Another CA: the daemons' certificates do not chain to it.
  otherCerts = new Certs(mkdtempSync(join(root, "other-")));
});
after(() => {
  rmSync(root, { recursive: true, force: true });
});

describe("TLS options", () => {
  test("each option, else its variable; no CA is plaintext, and the certificate variables then do nothing", () => {
    withTlsEnv({}, () => {
      assert.equal(resolveTls({}), undefined);
    });
    // The daemon's own variables beside it turn nothing on without a CA (as for the CLI).
    withTlsEnv({ TROUPE_TLS_CERT: certs.pem("d1"), TROUPE_TLS_KEY: certs.key("d1") }, () => {
      assert.equal(resolveTls({}), undefined);
      assert.equal(resolveTls({ tlsCa: "" }), undefined);
      assert.deepEqual(resolveTls({ tlsCa: certs.ca }), {
        ca: { where: "tlsCa", path: certs.ca },
        client: { cert: { where: "$TROUPE_TLS_CERT", path: certs.pem("d1") }, key: { where: "$TROUPE_TLS_KEY", path: certs.key("d1") } },
      });
    });
    withTlsEnv({ TROUPE_TLS_CA: otherCerts.ca }, () => {
      assert.deepEqual(resolveTls({ tlsCa: certs.ca }), { ca: { where: "tlsCa", path: certs.ca }, client: undefined });
      assert.deepEqual(resolveTls({ tlsCert: certs.pem("app"), tlsKey: certs.key("app") }), {
        ca: { where: "$TROUPE_TLS_CA", path: otherCerts.ca },
        client: { cert: { where: "tlsCert", path: certs.pem("app") }, key: { where: "tlsKey", path: certs.key("app") } },
      });
    });
  });

  test("a certificate needs its key, and a CA", () => {
    const goTogether = (option: string) => (e: unknown) =>
      e instanceof TlsConfigError && e instanceof TroupeError && e.option === option && /go together/.test(e.message);
    withTlsEnv({}, () => {
      assert.throws(() => new Client({ tlsCa: certs.ca, tlsCert: certs.pem("app") }), goTogether("tlsKey"));
      assert.throws(() => new App({ actors: [Back], tlsCa: certs.ca, tlsKey: certs.key("app") }), goTogether("tlsCert"));
      assert.throws(
        () => new Client({ tlsCert: certs.pem("app"), tlsKey: certs.key("app") }),
        (e: unknown) => e instanceof TlsConfigError && /need tlsCa \(or \$TROUPE_TLS_CA\)/.test(e.message),
      );
    });
    withTlsEnv({ TROUPE_TLS_CA: certs.ca, TROUPE_TLS_CERT: certs.pem("app") }, () => {
      assert.throws(() => new Client(), goTogether("$TROUPE_TLS_KEY"));
    });
  });

  test("a missing CA file, from the option or the variable, throws a TlsConfigError naming it", () => {
    const missing = join(root, "no-such-ca.pem");
    for (const [where, make] of [
      ["tlsCa", () => new Client({ tlsCa: missing })],
      ["tlsCa", () => new App({ actors: [Back], tlsCa: missing })],
      ["$TROUPE_TLS_CA", () => withTlsEnv({ TROUPE_TLS_CA: missing }, () => new Client())],
      ["$TROUPE_TLS_CA", () => withTlsEnv({ TROUPE_TLS_CA: missing }, () => new App({ actors: [Back] }))],
    ] as const) {
      assert.throws(make, (e: unknown) => {
        assert.ok(e instanceof TlsConfigError, `expected TlsConfigError, got ${inspect(e)}`);
        assert.equal(e.option, where);
        assert.equal(e.path, missing);
        assert.ok(e.message.startsWith(`cannot read ${missing} given as ${where} (`), e.message);
        return true;
      });
    }
  });

  test("files that are not PEM, or a key that is not the certificate's, are refused", () => {
    const notPem = join(root, "not-pem.pem");
    writeFileSync(notPem, "not a certificate\n");
    withTlsEnv({}, () => {
      assert.throws(
        () => new Client({ tlsCa: notPem }),
        (e: unknown) => e instanceof TlsConfigError && e.option === "tlsCa" && e.message.includes("holds no PEM a CA certificate"),
      );
      assert.throws(
        () => new Client({ tlsCa: certs.ca, tlsCert: certs.pem("app"), tlsKey: certs.key("d1") }),
        (e: unknown) => e instanceof TlsConfigError && e.message.includes(certs.key("d1")) && e.message.includes("cannot be used"),
      );
    });
  });
});

describe("a daemon with TLS on", () => {
  let daemon: Daemon;
  let app: App;

  before(async () => {
    daemon = await startDaemon(certs.daemonArgs());
    app = await hostTls(daemon.address, { tlsCa: certs.ca });
  });
  after(async () => {
    await app.close();
    await daemon.dispose();
  });

  test("a client with tlsCa calls an actor hosted by an app with tlsCa, which calls another", async () => {
    assert.ok(app.registered);
    const client = new Client({ address: daemon.address, tlsCa: certs.ca, timeout: 10 });
    try {
      await roundTrip(client, "option");
      // A Client used again after close() opens a new channel, with the files read again.
      client.close();
      assert.equal(await client.actor<Back>("tls_back", "option").call("incr"), 3);
    } finally {
      client.close();
    }
  });

  test("a client without TLS, or with another CA, fails at once with Unavailable", async () => {
    for (const tlsCa of [undefined, otherCerts.ca]) {
      const client = new Client({ address: daemon.address, tlsCa, timeout: 5 });
      try {
        await within(10_000, "a call to fail", assert.rejects(client.invoke("tls_back", "x", "incr"), unavailable));
      } finally {
        client.close();
      }
    }
  });

  test("an app without TLS keeps re-connecting, with a warning, and registers nothing", async () => {
    const warned = signal<string>();
    const logger = { ...quietLogger, warn: (m: string) => { warned.resolve(m); } };
    const plain = new App({ actors: [Back], address: daemon.address, appName: "node-tls-plain", logger });
    try {
      const started = plain.start();
      started.catch(() => undefined); // rejects when closed below
      assert.match(await within(10_000, "the app's warning", warned.promise), /no connection to daemon .*; retrying/);
      assert.equal(plain.running, true);
      assert.equal(plain.sessions, 0);
    } finally {
      await plain.close();
    }
  });

  test("$TROUPE_TLS_CA is the default of clients and apps", async () => {
    const client = withTlsEnv({ TROUPE_TLS_CA: certs.ca }, () => new Client({ address: daemon.address, timeout: 10 }));
    const fromEnv = await withTlsEnv({ TROUPE_TLS_CA: certs.ca }, () => hostTls(daemon.address));
    try {
      // Two apps host the types now: either one may run the turns.
      await roundTrip(client, "env");
    } finally {
      client.close();
      await fromEnv.close();
    }
  });
});

describe("a daemon that requires client certificates", () => {
  let daemon: Daemon;

  before(async () => {
    daemon = await startDaemon([...certs.daemonArgs(), "--tls-client-certs", "required"]);
  });
  after(async () => {
    await daemon.dispose();
  });

  test("clients and apps with a client certificate get through, from the options or the variables", async () => {
    const cert = { tlsCa: certs.ca, tlsCert: certs.pem("app"), tlsKey: certs.key("app") };
    const app = await hostTls(daemon.address, cert);
    const client = new Client({ address: daemon.address, timeout: 10, ...cert });
    const env = { TROUPE_TLS_CA: certs.ca, TROUPE_TLS_CERT: certs.pem("app"), TROUPE_TLS_KEY: certs.key("app") };
    const fromEnv = withTlsEnv(env, () => new Client({ address: daemon.address, timeout: 10 }));
    try {
      await roundTrip(client, "mtls");
      assert.deepEqual(await fromEnv.getState("tls_back", "mtls"), { n: 2 });
    } finally {
      client.close();
      fromEnv.close();
      await app.close();
    }
  });

  test("a client without a certificate fails at once with Unavailable", async () => {
    const client = new Client({ address: daemon.address, tlsCa: certs.ca, timeout: 5 });
    try {
      await within(10_000, "a call to fail", assert.rejects(client.invoke("tls_back", "x", "incr"), unavailable));
    } finally {
      client.close();
    }
  });
});

test("tokens travel over TLS as over plaintext", async () => {
  const daemon = await startDaemon(certs.daemonArgs(), { TROUPE_API_TOKEN: API_TOKEN, TROUPE_APP_TOKEN: APP_TOKEN });
  const anonymous = new Client({ address: daemon.address, tlsCa: certs.ca, timeout: 10 });
  const client = new Client({ address: daemon.address, tlsCa: certs.ca, token: API_TOKEN, timeout: 10 });
  let app: App | undefined;
  try {
    await assert.rejects(anonymous.getState("tls_back", "t"), (e: unknown) => e instanceof Unauthenticated);
    app = await hostTls(daemon.address, { tlsCa: certs.ca, token: APP_TOKEN });
    await roundTrip(client, "tokens");
  } finally {
    anonymous.close();
    client.close();
    await app?.close();
    await daemon.dispose();
  }
});

test("an app reads its CA file again when it re-connects", async () => {
  // The daemon's files and the app's CA in one directory, all replaced by renaming
  // (as a renewal does) while the daemon restarts: the app trusts the new CA only if
  // it read the file again.
  const dir = mkdtempSync(join(root, "renewal-"));
  const install = (from: Certs): void => {
    for (const [src, name] of [
      [from.ca, "ca.pem"],
      [from.pem("d1"), "d1.pem"],
      [from.key("d1"), "d1.key"],
    ] as const) {
      copyFileSync(src, join(dir, `${name}.new`));
      renameSync(join(dir, `${name}.new`), join(dir, name));
    }
  };
  install(certs);
  const daemon = await startDaemon(["--tls-cert", join(dir, "d1.pem"), "--tls-key", join(dir, "d1.key"), "--tls-ca", join(dir, "ca.pem")]);
  let app: App | undefined;
  try {
    app = await hostTls(daemon.address, { tlsCa: join(dir, "ca.pem") });
    await daemon.stop();
    install(otherCerts);
    await daemon.start();
    await app.waitRegistered({ sessions: 2, timeout: 20 });
    const client = new Client({ address: daemon.address, tlsCa: join(dir, "ca.pem"), timeout: 10 });
    try {
      assert.equal(await client.actor<Back>("tls_back", "renewed").call("incr"), 1);
    } finally {
      client.close();
    }
  } finally {
    await app?.close();
    await daemon.dispose();
  }
});
