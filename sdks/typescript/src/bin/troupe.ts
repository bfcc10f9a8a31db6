#!/usr/bin/env node
/**
 * `troupe` on an npm project's PATH (`npx troupe dev -- node app.js`): runs
 * the daemon binary of this machine's platform package with the same
 * arguments, standard streams and exit status.
 *
 * @module
 */
import { spawn } from "node:child_process";

import { daemonPath, DaemonNotFound } from "../daemon.js";

function main(): void {
  let binary: string;
  try {
    binary = daemonPath();
  } catch (e) {
    if (e instanceof DaemonNotFound) {
      process.stderr.write(`troupe: ${e.message}\n`);
      process.exit(1);
    }
    throw e;
  }
  const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
  // Ctrl-C reaches the daemon from the terminal directly (same process
  // group); a signal sent to this shim alone is passed on. Either way the
  // shim waits for the daemon to stop and exits as it did.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(signal, () => {
      if (signal !== "SIGINT") child.kill(signal);
    });
  }
  child.on("error", (e) => {
    process.stderr.write(`troupe: cannot run ${binary}: ${e.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    if (signal !== null) {
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
}

main();
