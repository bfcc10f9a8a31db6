/**
 * Finding the `troupe` daemon binary installed with this package.
 *
 * The daemon ships as a per-platform optional dependency
 * (`@troupe/daemon-linux-x64-gnu`, ...), as esbuild ships its binary: npm
 * installs only the one whose `os`/`cpu`/`libc` match the machine.
 *
 * @module
 */
import { accessSync, constants, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

import { TroupeError } from "./errors.js";

/** No `troupe` daemon binary was found for this platform. */
export class DaemonNotFound extends TroupeError {}

/**
 * The platform package's name suffix for this machine, e.g.
 * `linux-x64-gnu`: Node's platform and architecture, and on Linux the C
 * library the binary was linked against.
 */
export function platformKey(): string {
  const key = `${process.platform}-${process.arch}`;
  if (process.platform !== "linux") return key;
  return `${key}-${isGlibc() ? "gnu" : "musl"}`;
}

/** The npm package that carries the daemon for this machine. */
export function daemonPackage(): string {
  return `@troupe/daemon-${platformKey()}`;
}

/**
 * The path of the `troupe` daemon binary: `$TROUPE_BIN` when set, else the
 * one from this machine's platform package. Throws {@link DaemonNotFound},
 * saying what to install, when there is none.
 */
export function daemonPath(): string {
  const explicit = process.env["TROUPE_BIN"];
  if (explicit !== undefined && explicit !== "") {
    if (runnable(explicit)) return explicit;
    throw new DaemonNotFound(
      `TROUPE_BIN=${JSON.stringify(explicit)} is not an executable file; point it at a troupe ` +
        "binary or unset it to use the one installed with @troupe/sdk",
    );
  }
  const pkg = daemonPackage();
  let manifest: string;
  try {
    manifest = createRequire(import.meta.url).resolve(`${pkg}/package.json`);
  } catch {
    throw new DaemonNotFound(
      `the daemon package ${pkg} is not installed (npm installs it with @troupe/sdk as an ` +
        "optional dependency for this platform; it may have been skipped with --no-optional " +
        "or --omit=optional, or this platform has none): reinstall with optional dependencies, " +
        "or set TROUPE_BIN to a troupe binary",
    );
  }
  const binary = join(dirname(manifest), "bin", process.platform === "win32" ? "troupe.exe" : "troupe");
  if (!runnable(binary)) {
    throw new DaemonNotFound(`${pkg} is installed but ${binary} is missing or not executable; reinstall it`);
  }
  return binary;
}

function runnable(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function isGlibc(): boolean {
  // Node's diagnostic report names the glibc it runs on; musl has none.
  const report = process.report.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
  return typeof report?.header?.glibcVersionRuntime === "string";
}
