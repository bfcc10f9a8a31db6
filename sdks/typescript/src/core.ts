// Which core carries the SDK's invoke/tell and app stream.
//
// The native core is the addon troupe.<platform>.node (crates/sdk-node over
// crates/sdk-core, in Rust): it owns the connections, the app stream and
// invoke/tell, and hands this layer serialized messages in batches. Where it
// cannot load (a platform without a build of it), the @grpc/grpc-js core
// takes over, with one warning. TROUPE_SDK_CORE=js or =native forces one
// (native throws when the addon cannot load), for tests and comparisons;
// =python, the Python SDK's, chooses as if unset (one environment may run both);
// TROUPE_SDK_NATIVE_ADDON names the addon file to load instead of looking for it.
import type * as grpc from "@grpc/grpc-js";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { daemonPackage, platformKey } from "./daemon.js";

export const CORE_ENV = "TROUPE_SDK_CORE";
export const ADDON_ENV = "TROUPE_SDK_NATIVE_ADDON";
const CORES = ["js", "native"] as const;
// Values meant for the other SDK (its fallback's name), left to it: one environment
// may run both SDKs, so here they choose as if unset.
const OTHER_SDKS: readonly string[] = ["python"];

/** How to reach the daemon, as the addon takes it (TLS files already read). */
export interface NativeConnect {
  address: string;
  ca?: Buffer | undefined;
  cert?: Buffer | undefined;
  key?: Buffer | undefined;
  maxReceiveBytes?: number | undefined;
}

/** A status from the addon; trailers flat: [key, value, ...]. */
export interface NativeStatus {
  /** gRPC's status code number. */
  code: grpc.status;
  message: string;
  trailers: string[];
}

/** What the retries of a failed invoke or tell did. */
export interface NativeRetried {
  /** Attempts after the first. */
  retries: number;
  elapsedMs: number;
  /** "deadline" or "window" when the retries ran out of time, "budget" when the client's retry budget refused another, with the daemon still refusing the call. */
  gaveUp?: string | null;
  /** The last refusal retried before the status that ended the retries, as `CODE: message`. */
  lastRefusal?: string | null;
}

/** A retry of an invoke or tell about to be sent. */
export interface NativeRetry {
  /** 1 for the first retry. */
  retry: number;
  pauseMs: number;
  /** The refusal, as `CODE: message`. */
  details: string;
}

/** A call's answer; or, with `retrying`, a retry beginning (the call goes on). */
export interface NativeAnswer {
  id: number;
  response?: Buffer | null;
  error?: NativeStatus | null;
  retried?: NativeRetried | null;
  retrying?: NativeRetry | null;
}

/** The addon's client (crates/sdk-node/src/client.rs). */
export interface NativeClient {
  /** Throws (code "InvalidArg") for an idempotency key the daemon would refuse; `key` undefined: a fresh one. */
  invoke(id: number, request: Buffer, key: string | undefined, timeoutMs: number | undefined | null, metadata: string[], retry: boolean): void;
  tell(id: number, request: Buffer, key: string | undefined, timeoutMs: number | undefined | null, metadata: string[], retry: boolean): void;
  /** One of the rarer ActorClient RPCs, by path ("/troupe.v1.ActorClient/GetState"), sent once. */
  unary(id: number, method: string, request: Buffer, timeoutMs: number | undefined | null, metadata: string[]): void;
  take(): NativeAnswer[];
  /** Ends call `id` (its stop came); no answer follows. */
  cancel(id: number): void;
  close(): void;
}

/** What the app's credentials function gives the addon before each attempt. */
export interface NativeCredentials {
  /** Flat metadata: [key, value, ...]. */
  metadata: string[];
  ca?: Buffer | undefined;
  cert?: Buffer | undefined;
  key?: Buffer | undefined;
  /** Reading them failed (the layer keeps the error): the session ends with "credentials". */
  failed?: string | undefined;
}

/** One thing the app's session reports (crates/sdk-node/src/session.rs's NativeEvent). */
export interface NativeEvent {
  kind: "registered" | "messages" | "lost" | "ended";
  generation?: number | null;
  /** The serialized Registered ("registered") or DaemonBatch ("messages"). */
  data?: Buffer | null;
  outage?: "closed" | "ended" | "refused" | "failed" | null;
  first?: boolean | null;
  why?: "stopped" | "refused" | "credentials" | "connect" | null;
  status?: NativeStatus | null;
}

export interface NativeSessionOptions {
  address: string;
  maxReceiveBytes?: number | undefined;
  initialDelayMs: number;
  maxDelayMs: number;
}

/** The addon's app session, kept attached by the core (crates/sdk-node/src/session.rs). */
export interface NativeSession {
  client(wake: () => void): NativeClient;
  send(generation: number, message: Buffer): void;
  take(): NativeEvent[];
  stop(): void;
}

/** The size of a client's retry budget (gRFC A6 retry throttling), as the addon takes it. */
export interface NativeRetryBudget {
  maxTokens: number;
  tokenRatio: number;
}

/** What troupe.<platform>.node exports. */
export interface NativeAddon {
  /** `retryBudget`: the client's retry budget, null for none (the layer always passes it). */
  NativeClient: new (options: NativeConnect, wake: () => void, retryBudget: NativeRetryBudget | null) => NativeClient;
  /** `retryBudget`: the budget of the turns' calls on each connection, null for none (the layer always passes it). */
  NativeSession: new (options: NativeSessionOptions, register: Buffer, credentials: () => NativeCredentials, wake: () => void, retryBudget: NativeRetryBudget | null) => NativeSession;
}

/** The addon's file name for this machine. */
export function addonFile(): string {
  return `troupe.${platformKey()}.node`;
}

/** Where the addon may be: the platform package (installed), else a development build under the SDK. */
function candidates(require: NodeJS.Require): string[] {
  const explicit = process.env[ADDON_ENV];
  if (explicit !== undefined && explicit !== "") return [explicit];
  const found: string[] = [];
  try {
    found.push(join(dirname(require.resolve(`${daemonPackage()}/package.json`)), addonFile()));
  } catch {
    // Not installed: a development checkout, or a platform without a package.
  }
  // dist/core.js and build/src/core.js: native/ is at the SDK's root (scripts/build_native.sh).
  const here = dirname(fileURLToPath(import.meta.url));
  found.push(join(here, "..", "native", addonFile()), join(here, "..", "..", "native", addonFile()));
  return found;
}

function load(): NativeAddon {
  const require = createRequire(import.meta.url);
  const tried = candidates(require);
  const path = tried.find((p) => existsSync(p));
  if (path === undefined) throw new Error(`no ${addonFile()} at ${tried.join(", ")}`);
  return require(path) as NativeAddon;
}

let chosen: { addon: NativeAddon | undefined } | undefined;

/**
 * The native core's addon, or undefined for the @grpc/grpc-js core; decided
 * once per process, at the first Client or App.
 * @internal
 */
export function nativeCore(): NativeAddon | undefined {
  chosen ??= { addon: choose() };
  return chosen.addon;
}

function choose(): NativeAddon | undefined {
  const given = (process.env[CORE_ENV] ?? "").trim().toLowerCase();
  const wanted = OTHER_SDKS.includes(given) ? "" : given;
  if (wanted !== "" && !(CORES as readonly string[]).includes(wanted)) {
    throw new Error(`${CORE_ENV}=${JSON.stringify(wanted)}: use "js", "native", or leave it unset`);
  }
  if (wanted === "js") return undefined;
  try {
    return load();
  } catch (e) {
    const reason = e instanceof Error ? e.message.split("\n")[0] ?? "" : String(e);
    if (wanted === "native") throw new Error(`${CORE_ENV}=native, but the native core cannot load: ${reason}`, { cause: e });
    console.warn(
      `troupe: the native core (${addonFile()}) cannot load (${reason}); using the slower @grpc/grpc-js core. Set ${CORE_ENV}=js to choose it without this warning.`,
    );
    return undefined;
  }
}

/** The core in use: "native" or "js". @internal */
export function coreName(): "native" | "js" {
  return nativeCore() === undefined ? "js" : "native";
}
