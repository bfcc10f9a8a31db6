// The committed generated code in src/gen matches what scripts/gen_proto.sh makes from ../../proto.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { test } from "node:test";
import { SDK_ROOT } from "./helpers.js";

function files(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else out.push(relative(root, path));
    }
  };
  walk(root);
  return out.sort();
}

test("src/gen is up to date with proto/ (run scripts/gen_proto.sh if not)", () => {
  const tmp = mkdtempSync(join(tmpdir(), "troupe-ts-gen-"));
  try {
    const out = join(tmp, "gen");
    execFileSync("bash", [join(SDK_ROOT, "scripts", "gen_proto.sh"), out], { stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
    const committed = join(SDK_ROOT, "src", "gen");
    assert.deepEqual(files(out), files(committed), "generated file list differs: run scripts/gen_proto.sh");
    for (const f of files(out)) {
      assert.equal(readFileSync(join(out, f), "utf8"), readFileSync(join(committed, f), "utf8"), `${f} is stale: run scripts/gen_proto.sh`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
