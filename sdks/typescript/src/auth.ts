// The token a Client or App presents to a daemon that requires one: where it is
// read from, and the interceptor that sends it as `authorization: Bearer <token>`.
import * as grpc from "@grpc/grpc-js";
import { readFileSync } from "node:fs";

/** The client API token's environment variable (the daemon reads the same one). */
export const API_TOKEN_ENV = "TROUPE_API_TOKEN";
/** The app token's environment variable (the daemon reads the same one). */
export const APP_TOKEN_ENV = "TROUPE_APP_TOKEN";

const AUTHORIZATION = "authorization";
// What gRPC lets through in a text metadata value; grpc-js would otherwise throw
// at the first call with the whole value, the token, in its message.
const SENDABLE = /^[ -~]+$/;

/** Where a token comes from: the options of a Client or an App. */
export interface TokenOptions {
  token?: string | undefined;
  tokenFile?: string | undefined;
}

/**
 * Tokens in text, parsed as the daemon parses its token files and variables:
 * one per line or separated by commas; blank lines and lines starting with `#`
 * skipped, surrounding spaces trimmed.
 * @internal
 */
export function parseTokens(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => !line.startsWith("#"))
    .flatMap((line) => line.split(","))
    .map((token) => token.trim())
    .filter((token) => token !== "");
}

function sendable(token: string, where: string): string {
  // The message names where the token came from, never the token.
  if (!SENDABLE.test(token)) throw new TypeError(`the token in ${where} holds characters that cannot travel in gRPC metadata; use printable ASCII`);
  return token;
}

function fromFile(path: string, givenAs: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    throw new Error(`cannot read the token file ${path} given as ${givenAs} (${reason})`, { cause: e });
  }
  const [first] = parseTokens(text);
  // A file given but empty is a mistake (a secret not mounted yet, say): sending
  // nothing, or the environment's token instead, would only fail later and less clearly.
  if (first === undefined) throw new TypeError(`the token file ${path} given as ${givenAs} holds no token; put the token on a line of its own`);
  return sendable(first, `the token file ${path}`);
}

/**
 * The token to send: `token` if given (not blank), else the first one in
 * `tokenFile`, else in the file named by `$<env>_FILE` (the variable the daemon
 * reads too, and how Kubernetes hands over a mounted Secret), else the first one
 * in the environment variable `env`, else none.
 * Throws when `tokenFile` cannot be read or holds none, and for a token that
 * cannot be sent; the messages never include a token.
 * @internal
 */
export function resolveToken(options: TokenOptions, env: string): string | undefined {
  const explicit = options.token?.trim() ?? "";
  if (explicit !== "") return sendable(explicit, "the token option");
  if (options.tokenFile !== undefined) return fromFile(options.tokenFile, "tokenFile");
  const envFile = process.env[`${env}_FILE`]?.trim() ?? "";
  if (envFile !== "") return fromFile(envFile, `$${env}_FILE`);
  const [first] = parseTokens(process.env[env] ?? "");
  return first === undefined ? undefined : sendable(first, `$${env}`);
}

/**
 * Where an App's token comes from, settled once (as `resolveToken` picks it, which
 * throws here as there): a function giving the token to send now. A token file (the
 * `tokenFile` option or `$<env>_FILE`) is read again at each call, so a rotated Secret
 * is picked up at the next connect; a token given as an option or in `$<env>` is the one
 * it was when the App was created.
 * @internal
 */
export function tokenSource(options: TokenOptions, env: string): () => string | undefined {
  const now = resolveToken(options, env);
  const explicit = options.token?.trim() ?? "";
  if (explicit !== "") return () => now;
  if (options.tokenFile !== undefined) {
    const file = options.tokenFile;
    return () => fromFile(file, "tokenFile");
  }
  const envFile = process.env[`${env}_FILE`]?.trim() ?? "";
  if (envFile !== "") return () => fromFile(envFile, `$${env}_FILE`);
  return () => now;
}

/**
 * Client options that send `token` with every call of a gRPC client (none when
 * undefined). An interceptor rather than call credentials, which grpc-js refuses
 * on the insecure channels the SDK opens. It adds to the metadata each call
 * brings (trace context...).
 * @internal
 */
export function tokenClientOptions(token: string | undefined): grpc.ClientOptions {
  if (token === undefined) return {};
  const value = `Bearer ${token}`;
  const interceptor: grpc.Interceptor = (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set(AUTHORIZATION, value);
        next(metadata, listener);
      },
    });
  return { interceptors: [interceptor] };
}

/**
 * The metadata that sends `token` on the native core, flat (`[key, value]`;
 * none when undefined): what tokenClientOptions' interceptor adds on grpc-js.
 * @internal
 */
export function tokenMetadata(token: string | undefined): string[] {
  return token === undefined ? [] : [AUTHORIZATION, `Bearer ${token}`];
}
