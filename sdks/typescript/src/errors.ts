// The errors SDK users see. Every one derives from TroupeError.
import * as grpc from "@grpc/grpc-js";

export const ERROR_TYPE_TRAILER = "troupe-error-type";
/** @internal Beside it: whether the method ran ("raised") or the caller was at fault. */
export const FAILURE_KIND_TRAILER = "troupe-failure-kind";
/** @internal The stack the actor's SDK sent, percent-encoded as grpc-message is (a header carries no newlines). */
export const ERROR_DETAILS_TRAILER = "troupe-error-details";
const REMOTE_STACK_HEADING = "where the actor threw it (the stack its SDK sent):";

/** A percent-encoded trailer's text; one that is not valid encoding as it came. */
function percentDecoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/**
 * Whether an actor's failed method ran: `"raised"` (it did, and threw), or the
 * caller's mistake, where nothing ran: `"no-such-method"` (the actor's type has
 * no method of that name) or `"bad-arguments"` (the arguments could not be
 * decoded or do not fit the method).
 */
export type FailureKind = "raised" | "no-such-method" | "bad-arguments";

const FAILURE_KINDS: ReadonlySet<string> = new Set<FailureKind>(["raised", "no-such-method", "bad-arguments"]);

function failureKind(name: string | undefined): FailureKind | null {
  return name !== undefined && FAILURE_KINDS.has(name) ? (name as FailureKind) : null;
}

function metadataText(value: grpc.MetadataValue): string {
  return typeof value === "string" ? value : value.toString("utf8");
}

/** On the FAILED_PRECONDITION that refuses an app of another app API version: the daemon's version. */
export const API_VERSION_TRAILER = "troupe-api-version";
/** What to do about an API version mismatch, in the SDK's messages as in the daemon's. */
export const INSTALL_MATCHING =
  "install matching versions: the SDK and the daemon ship together in `pip install troupe` / `npm install @troupe/sdk` (or run the daemon built from the same checkout as the SDK)";

/** Base class of every error raised by the troupe SDK. */
export class TroupeError extends Error {
  /** The gRPC status code behind the error, when there was one. */
  readonly code: grpc.status | undefined;

  constructor(message: string, code?: grpc.status, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** No app has registered the actor type (the message lists the registered ones). */
export class NotFound extends TroupeError {}

/** The request was malformed: empty or oversize type/id/method, or a payload over the limit. */
export class InvalidArgument extends TroupeError {}

/**
 * RESOURCE_EXHAUSTED: a bound (the actor's mailbox, the daemon's in-flight
 * limit), memory near the daemon's limit, or a message over a size limit. The
 * client resends the first two itself within the call's timeout (they carry a
 * retry pushback), so this means they outlasted it, or the call was sent with
 * `retry: false`.
 */
export class Overloaded extends TroupeError {}

/** The daemon is unreachable or shutting down, or the app hosting the actor disconnected. */
export class Unavailable extends TroupeError {}

/** The call did not finish before its deadline. */
export class DeadlineExceeded extends TroupeError {}

/**
 * The daemon requires a token and got none, or one it does not accept there:
 * calls need the client API token (or the app token), hosting actors needs the
 * app token. The message is the daemon's, saying which token it expects and
 * where it is configured. Retrying with the same token cannot help.
 */
export class Unauthenticated extends TroupeError {}

/**
 * The daemon refused the call as it stands: it would close a cycle of calls into
 * an actor type that is not reentrant (a deadlock), the call chain is too deep or
 * is not one the daemon issued to a turn still running, a read-only method
 * changed state, or a timer was set on an inactive actor; or, as
 * {@link ApiVersionMismatch}, it speaks another app API version. The message
 * says which.
 */
export class FailedPrecondition extends TroupeError {}

/** The app API versions behind an {@link ApiVersionMismatch}. */
export interface ApiVersions {
  /** The version this SDK speaks (`API_VERSION`). */
  sdkApiVersion: number;
  /** The daemon's; 0 for a daemon from before API versions. */
  daemonApiVersion: number;
}

/**
 * The daemon speaks another app API version than this SDK, so the app cannot
 * attach. `App.start()` / `App.run()` reject with it at once, without retrying:
 * the daemon refused the SDK's version, or answered with another one, or with
 * none (a daemon from before API versions, whose protocol the SDK cannot vouch
 * for). The message names both versions; the fix is an SDK and a daemon of the
 * same release.
 */
export class ApiVersionMismatch extends FailedPrecondition {
  /** The version this SDK speaks. */
  readonly sdkApiVersion: number;
  /** The daemon's; 0 for a daemon from before API versions. */
  readonly daemonApiVersion: number;

  constructor(message: string, versions: ApiVersions) {
    super(message, grpc.status.FAILED_PRECONDITION);
    this.sdkApiVersion = versions.sdkApiVersion;
    this.daemonApiVersion = versions.daemonApiVersion;
  }
}

/**
 * A read-only method (`@method({ readonly: true })`) tried to change `this.state`.
 * Thrown inside the handler, at the write; if the handler lets it escape, its
 * caller gets an {@link ActorError} whose `remoteType` is `"ReadOnlyStateError"`.
 */
export class ReadOnlyStateError extends TroupeError {}

/** Where a {@link TlsConfigError} comes from. */
export interface TlsConfigErrorOptions extends ErrorOptions {
  /** The option (`tlsCa`, `tlsCert`, `tlsKey`) or variable (`$TROUPE_TLS_CA`, ...) at fault. */
  option: string;
  /** The file's path, when the error is about one file. */
  path?: string | undefined;
}

/**
 * A TLS option or variable cannot be used: its file is missing, unreadable or
 * holds no PEM, a client certificate comes without its key (or without a CA),
 * or Node refuses the files (a key that is not the certificate's). The message
 * names the option or variable and the path. Thrown by the Client and App
 * constructors, and where a connection is opened (an App's re-connect ends
 * with it instead of retrying).
 */
export class TlsConfigError extends TroupeError {
  /** The option (`tlsCa`, `tlsCert`, `tlsKey`) or variable (`$TROUPE_TLS_CA`, ...) at fault. */
  readonly option: string;
  /** The file's path, when the error is about one file. */
  readonly path: string | undefined;

  constructor(message: string, options: TlsConfigErrorOptions) {
    super(message, undefined, options.cause === undefined ? undefined : { cause: options.cause });
    this.option = options.option;
    this.path = options.path;
  }
}

/**
 * The actor's code threw while handling the call.
 *
 * `remoteType` is the name of the error type thrown in the actor (`"RangeError"`,
 * or `"ValueError"` from a Python actor); `message` is its message; `kind` says
 * whether the method ran (see {@link FailureKind}).
 */
export class ActorError extends TroupeError {
  /** Name of the error type thrown in the actor, e.g. `"RangeError"` or `"ValueError"`. */
  readonly remoteType: string;
  /**
   * Whether the method ran, or the caller was at fault (JavaScript and Python name
   * both a bad call and a bug in the method `TypeError`); null when the app's SDK
   * does not say (one from before this field).
   */
  readonly kind: FailureKind | null;
  // Behind a getter, so that printing the error shows it once, in `stack`.
  readonly #remoteStack: string;

  constructor(remoteType: string, message: string, kind: FailureKind | null = null, remoteStack = "") {
    super(message === "" ? remoteType : `${remoteType}: ${message}`, grpc.status.UNKNOWN);
    // The stack trace shows "ActorError: <type>: <message>": V8 writes its first line
    // out when `stack` is first read, so it is read before `message` becomes the remote
    // message alone (as `ActorError.message` in the Python SDK).
    const stack = this.stack;
    this.remoteType = remoteType;
    this.message = message;
    this.kind = kind;
    this.#remoteStack = remoteStack;
    if (remoteStack !== "" && stack !== undefined) this.stack = `${stack}\n${REMOTE_STACK_HEADING}\n${remoteStack.trimEnd()}`;
  }

  /**
   * Where the actor threw it: the stack (or Python traceback) its SDK sent, at most its
   * last 4 KiB; `""` when it sent none. `stack` ends with it too, so an uncaught
   * ActorError prints the line in the actor that threw.
   */
  get remoteStack(): string {
    return this.#remoteStack;
  }

  override toString(): string {
    return this.message === "" ? `ActorError: ${this.remoteType}` : `ActorError: ${this.remoteType}: ${this.message}`;
  }
}

type ErrorClass = new (message: string, code?: grpc.status) => TroupeError;

const BY_CODE = new Map<grpc.status, ErrorClass>([
  [grpc.status.NOT_FOUND, NotFound],
  [grpc.status.INVALID_ARGUMENT, InvalidArgument],
  [grpc.status.RESOURCE_EXHAUSTED, Overloaded],
  [grpc.status.UNAVAILABLE, Unavailable],
  [grpc.status.DEADLINE_EXCEEDED, DeadlineExceeded],
  [grpc.status.FAILED_PRECONDITION, FailedPrecondition],
  [grpc.status.UNAUTHENTICATED, Unauthenticated],
]);

/** The SDK error for a gRPC status code (TroupeError for codes without their own class). */
export function errorForCode(code: grpc.status, message: string): TroupeError {
  const cls = BY_CODE.get(code) ?? TroupeError;
  return new cls(message, code);
}

// The errors whose `details` hold the server's text as it was sent: the native
// core's, and those the SDK makes itself. Every other one came through grpc-js.
const exactDetails = new WeakSet();

/** @internal Mark an error shaped like grpc-js's whose `details` need no repair (see rpcDetails). */
export function withExactDetails<E extends object>(err: E): E {
  exactDetails.add(err);
  return err;
}

/**
 * @internal A gRPC error's `details` as the server wrote them. The daemon (tonic)
 * percent-encodes grpc-message, and grpc-js decodes it with `decodeURI`, which
 * leaves the reserved characters encoded: of those tonic encodes, `#` and `?`
 * reach us as `%23` and `%3F`. grpc-js drops the raw header, so a message that
 * itself contained the text "%23" or "%3F" cannot be told apart and reads as
 * `#` or `?`; far rarer than a question mark in an error message.
 */
export function rpcDetails(err: grpc.ServiceError): string {
  const details = err.details;
  if (exactDetails.has(err) || !details.includes("%")) return details;
  return details.replace(/%23|%3F/g, (code) => (code === "%23" ? "#" : "?"));
}

/** @internal */
export function isServiceError(err: unknown): err is grpc.ServiceError {
  return err instanceof Error && typeof (err as Partial<grpc.ServiceError>).code === "number" && "metadata" in err;
}

/**
 * Translate a gRPC error into the SDK's error; `what` names the call for context,
 * `note` is appended to the message (not to an ActorError's, which is the actor's own).
 */
export function fromRpcError(err: unknown, what: string, note = ""): Error {
  if (!isServiceError(err)) return err instanceof Error ? err : new TroupeError(`${what}: ${String(err)}`);
  const details = rpcDetails(err);
  if (err.code === grpc.status.UNKNOWN) {
    const remote = err.metadata.get(ERROR_TYPE_TRAILER)[0];
    if (remote !== undefined) {
      const kind = err.metadata.get(FAILURE_KIND_TRAILER)[0];
      const stack = err.metadata.get(ERROR_DETAILS_TRAILER)[0];
      return new ActorError(metadataText(remote), details, failureKind(kind === undefined ? undefined : metadataText(kind)), stack === undefined ? "" : percentDecoded(metadataText(stack)));
    }
  }
  const name = grpc.status[err.code];
  return errorForCode(err.code, (details === "" ? `${what}: ${name}` : `${what}: ${details} (${name})`) + note);
}
