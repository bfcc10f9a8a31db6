"""What a user installs, installed as a user would: the wheel into a new
virtualenv and the npm packages into a new project, both outside the
repository and with no Rust toolchain on PATH; then `troupe dev` runs an app
from each and a separate client process calls its actor.

    python3 tests/packaging/install_test.py DIST_DIR   # what scripts/package wrote

Prints the time from `pip install` of the wheel to the first answered call.
Stdlib only: it runs before (and without) any of the SDKs' environments.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty, Queue

STEP_TIMEOUT = 180.0
REGISTER_TIMEOUT = 60.0

PY_APP = '''
import troupe


@troupe.actor("counter")
class Counter(troupe.Actor):
    @troupe.method
    async def incr(self, by: int = 1) -> int:
        self.state["count"] = self.state.get("count", 0) + by
        return self.state["count"]


troupe.App(actors=[Counter], app_name="packaging-py").run_forever()
'''

PY_CLIENT = '''
import troupe

with troupe.SyncClient() as client:
    print(client.actor("counter", "c1").incr(by=1))
    print(troupe.daemon_path())
    print(troupe.__version__)
    print(troupe._core.name())
'''

TS_APP = '''
import { Actor, actor, App, method } from "@troupe/sdk";

@actor("counter")
class Counter extends Actor<{ count: number }> {
  @method async incr(by = 1): Promise<number> {
    const count = this.state.get("count", 0) + by;
    this.state.set("count", count);
    return count;
  }
}

await new App({ actors: [Counter], appName: "packaging-ts" }).runForever();
'''

TS_CLIENT = '''
import { Client, daemonPath } from "@troupe/sdk";

const client = new Client();
console.log(await client.actor("counter", "c1").call("incr", 1));
console.log(daemonPath());
client.close();
'''

TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "strict": True,
        "skipLibCheck": False,
        "outDir": "out",
    },
    "include": ["*.ts"],
}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dist = Path(sys.argv[1]).resolve()
    wheel = one(dist, "troupe-*.whl")
    sdk_tgz = one(dist, "troupe-sdk-*.tgz")
    daemon_tgz = one(dist, "troupe-daemon-*.tgz")
    version = wheel.name.split("-")[1]
    work = Path(tempfile.mkdtemp(prefix="troupe-install-"))
    try:
        env = user_env(work)
        timings = python_user(work, env, wheel, version)
        node_user(work, env, sdk_tgz, daemon_tgz)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| step | seconds |\n|---|---|")
    for step, seconds in timings:
        print(f"| {step} | {seconds:.1f} |")
    print("packaging: both packages installed and served an actor with no Rust toolchain on PATH")
    return 0


def one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected one {pattern} in {dist}, found {[p.name for p in found]}")
    return found[0]


def user_env(work: Path) -> dict[str, str]:
    """The environment of a user without Rust: this Python and Node on PATH,
    nothing of cargo's or the repository's."""
    bin_dirs = [Path(sys.executable).parent]
    for tool in ("node", "npm"):
        found = shutil.which(tool)
        if found is None:
            raise SystemExit(f"{tool} is not installed")
        bin_dirs.append(Path(found).resolve().parent)
    path = os.pathsep.join(dict.fromkeys([*map(str, bin_dirs), "/usr/bin", "/bin"]))
    for tool in ("cargo", "rustc", "rustup"):
        if shutil.which(tool, path=path) is not None:
            raise SystemExit(f"{tool} is on the user PATH {path}; the test must run without it")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CARGO", "RUSTUP", "RUST", "TROUPE_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = path
    env["HOME"] = str(work / "home")
    env["npm_config_cache"] = str(Path.home() / ".npm")  # the registry's packages, not ours
    (work / "home").mkdir()
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise SystemExit(
            f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def python_user(
    work: Path, env: dict[str, str], wheel: Path, version: str
) -> list[tuple[str, float]]:
    app_dir = work / "py-app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(PY_APP)
    (app_dir / "client.py").write_text(PY_CLIENT)
    venv = work / "venv"
    start = time.monotonic()
    run([sys.executable, "-m", "venv", str(venv)], work, env)
    run([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], work, env)
    installed = time.monotonic()
    env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    if shutil.which("troupe", path=env["PATH"]) != str(venv / "bin" / "troupe"):
        raise SystemExit("pip install of the wheel put no troupe binary in the venv")
    with DevSession(["troupe", "dev", "--", "python", "app.py"], app_dir, env) as dev:
        registered = time.monotonic()
        out = run(["python", "client.py"], app_dir, {**env, "TROUPE_ADDR": dev.addr}).split()
        answered = time.monotonic()
    expect(out[0] == "1", f"the Python client's first incr answered {out[0]!r}, not 1")
    expect(out[1] == str(venv / "bin" / "troupe"), f"troupe.daemon_path() is {out[1]}")
    expect(out[2] == version, f"the SDK says version {out[2]}, the wheel {version}")
    # The wheel's native core loads where it was built (no fallback warning).
    expect(out[3] == "native", f"the installed SDK runs on its {out[3]} core, not the native one")
    return [
        ("python: venv + pip install of the wheel", installed - start),
        ("python: `troupe dev -- python app.py` until registered", registered - installed),
        ("python: first call from a separate client", answered - registered),
        ("python: pip install to the first answered call", answered - start),
    ]


def node_user(work: Path, env: dict[str, str], sdk_tgz: Path, daemon_tgz: Path) -> None:
    project = work / "node-app"
    project.mkdir()
    (project / "package.json").write_text(
        json.dumps({"name": "troupe-user", "private": True, "type": "module"})
    )
    run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", str(sdk_tgz), str(daemon_tgz),
         "typescript@5"],
        project,
        env,
    )
    (project / "app.ts").write_text(TS_APP)
    (project / "client.ts").write_text(TS_CLIENT)
    (project / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    run(["npx", "tsc", "-p", "."], project, env)
    # What `npx troupe` runs; npx itself dies of the Ctrl-C without waiting.
    troupe = str(project / "node_modules" / ".bin" / "troupe")
    # The platform package's native core must load where it was built: forced,
    # the app and the client fail rather than fall back to @grpc/grpc-js.
    native = {**env, "TROUPE_SDK_CORE": "native"}
    with DevSession([troupe, "dev", "--", "node", "out/app.js"], project, native) as dev:
        out = run(["node", "out/client.js"], project, {**native, "TROUPE_ADDR": dev.addr}).split()
    expect(out[0] == "1", f"the TypeScript client's first incr answered {out[0]!r}, not 1")
    binary = project / "node_modules" / "@troupe"
    expect(out[1].startswith(str(binary)), f"daemonPath() is {out[1]}, not under {binary}")


class DevSession:
    """`troupe dev` in a session of its own, as a terminal would run it:
    entered once the app registered, left with Ctrl-C (SIGINT to the group)."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.cmd, self.cwd, self.env = cmd, cwd, env
        self.lines: Queue[str | None] = Queue()
        self.seen: list[str] = []
        self.addr = ""

    def __enter__(self) -> DevSession:
        self.proc = subprocess.Popen(
            self.cmd, cwd=self.cwd, env=self.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        listening = self.wait_for(r"daemon listening on (\S+)")
        self.addr = listening.group(1)
        self.wait_for(r"registered actor types: counter")
        return self

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + REGISTER_TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                line = None
            if line is None:
                raise SystemExit(
                    f"`{' '.join(self.cmd)}` never printed /{pattern}/; it said:\n"
                    + "\n".join(self.seen)
                )
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise SystemExit(f"`{' '.join(self.cmd)}` did not stop on Ctrl-C") from None
        if exc[0] is None:
            expect(code == 0, f"`{' '.join(self.cmd)}` exited {code} on Ctrl-C")


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(what)


if __name__ == "__main__":
    sys.exit(main())
