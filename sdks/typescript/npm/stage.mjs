// Lays out the two npm packages `scripts/package` packs:
//   STAGE/daemon: @troupe/daemon-PLATFORM, the binary, the SDK's native core
//                 (troupe.PLATFORM.node, which src/core.ts loads from here) and
//                 a package.json whose os/cpu/libc let npm install it only where
//                 it runs;
//   STAGE/sdk:    @troupe/sdk as built, with that package as an optional
//                 dependency of the same version (the repo's package.json
//                 leaves it out: it exists only once packed).
//
//   node stage.mjs PLATFORM VERSION BINARY STAGE [ADDON]
//
// ADDON is the built crates/sdk-node library; without it the package carries the
// daemon only and the SDK runs on its @grpc/grpc-js core there.
import { chmodSync, copyFileSync, cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const [platform, version, binary, stage, addon] = process.argv.slice(2);
if (stage === undefined) {
  console.error("usage: node stage.mjs PLATFORM VERSION BINARY STAGE [ADDON]");
  process.exit(2);
}
const sdkDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const [os, cpu, libc] = platform.split("-");
const daemonName = `@troupe/daemon-${platform}`;

const daemon = join(stage, "daemon");
mkdirSync(join(daemon, "bin"), { recursive: true });
const exe = os === "win32" ? "troupe.exe" : "troupe";
copyFileSync(binary, join(daemon, "bin", exe));
chmodSync(join(daemon, "bin", exe), 0o755);
const addonFile = `troupe.${platform}.node`;
if (addon !== undefined) copyFileSync(addon, join(daemon, addonFile));
const daemonManifest = {
  name: daemonName,
  version,
  description: `The troupe daemon and the SDK's native core for ${platform}, installed by @troupe/sdk.`,
  license: "Apache-2.0",
  os: [os],
  cpu: [cpu],
  ...(libc === undefined ? {} : { libc: [libc === "gnu" ? "glibc" : libc] }),
  files: addon === undefined ? ["bin"] : ["bin", addonFile],
  preferUnplugged: true,
};
writeFileSync(join(daemon, "package.json"), JSON.stringify(daemonManifest, null, 2) + "\n");
writeFileSync(join(daemon, "README.md"), `# ${daemonName}\n\nThe \`troupe\` daemon binary for ${platform}${addon === undefined ? "" : ` and the TypeScript SDK's native core (\`${addonFile}\`)`}. Install \`@troupe/sdk\`, which depends on it.\n`);

const sdk = join(stage, "sdk");
mkdirSync(sdk, { recursive: true });
const manifest = JSON.parse(readFileSync(join(sdkDir, "package.json"), "utf8"));
if (manifest.version !== version) {
  console.error(`@troupe/sdk is ${manifest.version} but the daemon is ${version}`);
  process.exit(1);
}
delete manifest.private;
delete manifest.devDependencies;
delete manifest.scripts;
manifest.optionalDependencies = { ...(manifest.optionalDependencies ?? {}), [daemonName]: version };
writeFileSync(join(sdk, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
for (const entry of manifest.files) cpSync(join(sdkDir, entry), join(sdk, entry), { recursive: true });
chmodSync(join(sdk, "dist", "bin", "troupe.js"), 0o755);
