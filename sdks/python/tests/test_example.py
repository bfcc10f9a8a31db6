"""The bus-tracker example, with the app in its own process, against the real daemon."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import troupe

from .conftest import REPO_ROOT, Daemon

EXAMPLE = REPO_ROOT / "examples" / "python"


async def test_vehicle_app_process_serves_client_and_exits_cleanly(daemon: Daemon) -> None:
    env = {**os.environ, "TROUPE_ADDR": daemon.address}
    app = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE / "vehicle_app.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert app.stdout is not None
        line = await asyncio.wait_for(app.stdout.readline(), 20)
        assert line.startswith(b"registered"), line

        client = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLE / "client.py"), env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(client.communicate(), 60)
        assert client.returncode == 0, out
        text = out.decode()
        assert "bus-7" in text and "bus-44" in text
        assert "bad fix refused by the actor: ValueError" in text
        assert "parked reminders: 4, first due in 10 min" in text
        assert "live map: 32 moves of 4 buses" in text

        async with troupe.Client(daemon.address, timeout=10) as c:
            history = await c.actor("vehicle", "bus-12").history()
            assert len(history) == 5
            assert [f["ts"] for f in history] == sorted(f["ts"] for f in history)
            assert await c.get_state("vehicle", "bus-12", ["reports"]) == {"reports": 8}
            parked = await c.get_reminder("vehicle", "bus-12", "parked")
            assert parked is not None and parked.data["last_ts"] == history[-1]["ts"]

        app.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(app.wait(), 20) == 0
    finally:
        if app.returncode is None:
            app.kill()
            await app.wait()


async def test_run_demo_script(daemon_binary: Path) -> None:
    env = {**os.environ, "TROUPE_BIN": str(daemon_binary), "TROUPE_VENV": sys.prefix}
    env.pop("TROUPE_ADDR", None)
    demo = await asyncio.create_subprocess_exec(
        "bash",
        str(EXAMPLE / "run_demo.sh"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(demo.communicate(), 90)
    assert demo.returncode == 0, out.decode()
    assert "vehicle app registered" in out.decode()
    assert "bus-31" in out.decode()
