"""The checks pods_test.py makes of what the pods did: the injector's patch as the pod
received it, and the drain on deletion (container states from podman, the sidecar's JSON
log events: the app stopped first, then the sidecar drained and stopped cleanly)."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime

from chart import Json


def events(text: str) -> list[Json]:
    """The JSON log lines of a troupe process (TROUPE_LOG_FORMAT=json)."""
    out: list[Json] = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                out.append(event)
    return out


def message(event: Json) -> str:
    fields = event.get("fields")
    text = fields.get("message") if isinstance(fields, dict) else event.get("message")
    return str(text or "")


def check_injected(pod: Json, image: str) -> None:
    """The injector's patch: the sidecar (IMAGE) first among init containers, a native
    sidecar; the app told where it is; the pod's grace raised."""
    inits = pod["spec"].get("initContainers", [])
    assert inits and inits[0]["name"] == "troupe", f"sidecar not first: {inits}"
    assert inits[0].get("restartPolicy") == "Always", inits[0]
    assert inits[0]["image"] == image, inits[0]["image"]
    app = next(c for c in pod["spec"]["containers"] if c["name"] == "app")
    env = {e["name"]: e for e in app.get("env", [])}
    assert env["TROUPE_ADDR"]["value"].startswith("127.0.0.1:"), env
    assert "TROUPE_TLS_CA" in env, env
    names = {v["name"] for v in pod["spec"].get("volumes", [])}
    assert {"troupe-tokens", "troupe-tls"} <= names, names
    assert pod["spec"].get("terminationGracePeriodSeconds", 0) >= 30, pod["spec"]


def utc(stamp: str) -> datetime:
    """podman's and the daemon's RFC 3339 times (nanoseconds cut to microseconds)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    assert m, f"not an RFC 3339 time: {stamp!r}"
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{(m.group(2) or '0')[:6]:0<6}{zone}")


def check_drain(states: dict[str, Json], sidecar_log: str) -> None:
    """The app stopped first, by itself on SIGTERM (exit 0, not killed); the sidecar saw
    it leave (its actor deactivated, state written), got SIGTERM only after the app had
    exited, drained and stopped cleanly (exit 0)."""
    app, sidecar = states["app"], states["troupe"]
    assert app["ExitCode"] == 0, f"the app exited {app['ExitCode']} (137: killed)"
    assert sidecar["ExitCode"] == 0, f"the sidecar exited {sidecar['ExitCode']}:\n{sidecar_log}"
    app_done, sidecar_done = utc(app["FinishedAt"]), utc(sidecar["FinishedAt"])
    assert app_done < sidecar_done, f"the sidecar stopped before the app: {states}"
    seen = events(sidecar_log)

    def first(text: str) -> tuple[int, Json]:
        found = [(i, e) for i, e in enumerate(seen) if text in message(e)]
        assert found, f"the sidecar never logged {text!r}:\n{sidecar_log}"
        return found[0]

    left, detached = first("host unregistered")
    assert detached["fields"].get("activations") == 1, detached
    term, shutting = first("shutting down")
    stopped, _ = first("troupe daemon stopped")
    assert left < term < stopped, [message(e) for e in seen]
    assert utc(shutting["timestamp"]) >= app_done, (
        f"the sidecar began draining at {shutting['timestamp']}, before the app had "
        f"exited at {app['FinishedAt']}"
    )
