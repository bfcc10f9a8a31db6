// What a failed turn tells the daemon: the error as an ActorFailure, its stack cut to
// the actor's frames, and whether the method ran (its FailureKind).

import { fileURLToPath } from "node:url";
import { ActorError } from "./errors.js";
import { type ActorFailure, FailureKind } from "./gen/troupe/v1/common.js";

// A failure's stack, as callers see it: its top (the throwing frame) first, within
// what the daemon passes on whole (4 KiB percent-encoded; it keeps the end of more).
const MAX_DETAILS = 3 * 1024;

// This SDK's own modules, as stack frames name them (a URL for ESM, a path otherwise).
const SDK_URL = new URL(".", import.meta.url).href;
const SDK_PATH = fileURLToPath(SDK_URL);

/** Errors that say the caller was at fault (nothing of the method ran), by kind. */
const callersMistakes = new WeakMap<Error, FailureKind>();

/** Marks `err` as the caller's mistake: nothing of the method ran. */
export function callersMistake(err: Error, kind: FailureKind): Error {
  callersMistakes.set(err, kind);
  return err;
}

/** The ActorFailure a turn that threw `err` answers. */
export function failure(err: unknown): ActorFailure {
  // An ActorError from a nested call propagates like an exception up a stack:
  // the caller sees the type that was originally thrown (and that this method
  // threw: a nested call's bad arguments are this method's bug), and where: its
  // own stack holds only the SDK's frames that received the answer.
  if (err instanceof ActorError) {
    const details = err.remoteStack !== "" ? err.remoteStack : (err.stack ?? "");
    return { type: err.remoteType, message: err.message, details: details.slice(0, MAX_DETAILS), kind: FailureKind.FAILURE_KIND_RAISED };
  }
  if (err instanceof Error) {
    const ctorName = (err.constructor as { name?: unknown } | undefined)?.name;
    const type = err.name !== "" && err.name !== "Error" ? err.name : typeof ctorName === "string" && ctorName !== "" ? ctorName : "Error";
    const kind = callersMistakes.get(err) ?? FailureKind.FAILURE_KIND_RAISED;
    return { type, message: err.message, details: fromTheActor(err.stack ?? "").slice(0, MAX_DETAILS), kind };
  }
  return { type: "Error", message: thrownText(err), details: "", kind: FailureKind.FAILURE_KIND_RAISED };
}

/** The longest message a thrown non-Error becomes, so a huge object cannot fill the trailers. */
const MAX_THROWN_TEXT = 1024;

/**
 * A thrown non-Error's text: its JSON where it has one (`throw { code: 42 }` says
 * `{"code":42}`, not `[object Object]`), else what `String` makes of it.
 */
function thrownText(value: unknown): string {
  let text: string | undefined;
  if (typeof value === "object" && value !== null) {
    try {
      text = JSON.stringify(value);
    } catch {
      // A cycle or a BigInt inside: String below says what it can.
    }
  }
  text ??= String(value);
  return text.length > MAX_THROWN_TEXT ? `${text.slice(0, MAX_THROWN_TEXT)}…` : text;
}

/**
 * `stack` without the SDK's frames that ran the turn (read from the stream, dispatch,
 * await the method), which follow the actor's own and say nothing about it: up to the
 * first of this SDK's frames after the first frame that is not. All of it when every
 * frame is the SDK's (a call whose arguments did not fit).
 */
export function fromTheActor(stack: string): string {
  const lines = stack.split("\n");
  const frame = (line: string): boolean => /^\s+at /.test(line);
  const sdk = (line: string): boolean => line.includes(SDK_URL) || line.includes(SDK_PATH);
  const first = lines.findIndex((line) => frame(line) && !sdk(line));
  if (first < 0) return stack;
  const end = lines.findIndex((line, i) => i > first && frame(line) && sdk(line));
  return end < 0 ? stack : lines.slice(0, end).join("\n");
}
