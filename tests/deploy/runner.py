"""Running programs for the deploy tests: a command's exit code and output, a command that
must succeed, the daemon binary under test, waiting for a condition, and following the
lines a long-running process writes (a container's log, the injector's)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run(
    cmd: list[str], cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 600.0
) -> tuple[int, str]:
    """The exit code and the output (stdout then stderr): for checks that report both."""
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env or os.environ.copy(),
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def output(cmd: list[str], *, check: bool = True, timeout: float = 120.0, **kw: Any) -> str:
    """The stdout of a command that must succeed (raises with its output otherwise)."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])}... failed ({done.returncode}):\n{done.stderr}{done.stdout}"
        )
    return str(done.stdout).strip()


def daemon_binary(usage: str) -> str:
    """The daemon binary named by the only argument, absolute, checked to have what issue 18
    added (`troupe injector`, `troupe serve --health-listen`): an older build fails here
    with one clear message instead of in the middle of a test. Exits with USAGE otherwise."""
    if len(sys.argv) != 2:
        print(usage, file=sys.stderr)
        raise SystemExit(2)
    binary = str(Path(sys.argv[1]).resolve())
    for needs in (["injector", "--help"], ["serve", "--help"]):
        help_ = subprocess.run([binary, *needs], capture_output=True, text=True, check=False)
        if help_.returncode != 0 or (needs[0] == "serve" and "--health-listen" not in help_.stdout):
            raise SystemExit(f"{binary} lacks `troupe {needs[0]}` as issue 18 needs it")
    return binary


def wait_until(what: str, timeout: float, probe: Callable[[], bool], every: float = 0.2) -> None:
    """Asks `probe` (a health check, a query) until it answers yes; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


class Lines:
    """The lines a process writes (a container's `podman logs -f`, the injector's
    stderr), read by a thread; `wait` blocks until a line matches or the time is up."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait(self, what: str, match: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            with self._lock:
                lines = self.lines[seen:]
                seen += len(lines)
            for line in lines:
                if match(line):
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            try:
                if self._new.get(timeout=left) is None and self.proc.poll() is not None:
                    with self._lock:
                        if seen == len(self.lines):
                            raise AssertionError(f"{what}: the output ended without it")
            except queue.Empty:
                pass

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
