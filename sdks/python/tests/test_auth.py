"""Tokens against the real daemon: clients need the API token (or the app token), apps the
app token; a missing or wrong one is Unauthenticated, and an app stops instead of retrying."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import troupe

from .conftest import Daemon, hosting

API_TOKEN = "api-secret-4f1c"
APP_TOKEN = "app-secret-9b2e"


@pytest.fixture(autouse=True)
def no_tokens_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK reads these; tests set them only through monkeypatch, so nothing leaks.
    monkeypatch.delenv("TROUPE_API_TOKEN", raising=False)
    monkeypatch.delenv("TROUPE_APP_TOKEN", raising=False)


@pytest.fixture
async def secured(daemon_binary: Path, tmp_path: Path) -> AsyncIterator[Daemon]:
    """A daemon that requires both tokens, given in its own environment only."""
    d = Daemon(
        binary=daemon_binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=["--host-wait", "200ms"],
        env={"TROUPE_API_TOKEN": API_TOKEN, "TROUPE_APP_TOKEN": APP_TOKEN},
    )
    await d.start()
    try:
        yield d
    finally:
        await d.kill()


def token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "token"
    path.write_text(f"# rotated by ops\n\n{token}\n", encoding="utf-8")
    return path


@troupe.actor("auth-back")
class Back(troupe.Actor):
    @troupe.method
    def incr(self) -> int:
        self.state["n"] = self.state.get("n", 0) + 1
        return int(self.state["n"])


@troupe.actor("auth-front")
class Front(troupe.Actor):
    @troupe.method
    async def relay(self, back_id: str) -> int:
        result: int = await self.ctx.actor("auth-back", back_id).incr()
        return result


@pytest.mark.parametrize("token", [None, "not-the-token", APP_TOKEN + "x"])
async def test_client_without_the_token_is_unauthenticated(
    secured: Daemon, token: str | None
) -> None:
    async with troupe.Client(secured.address, timeout=10, token=token) as client:
        with pytest.raises(troupe.Unauthenticated) as info:
            await client.get_state("auth-back", "b1")
    message = str(info.value)
    assert "TROUPE_API_TOKEN" in message
    assert token is None or token not in message


@pytest.mark.parametrize("how", ["option", "file", "env file", "env", "app token"])
async def test_client_with_a_token_the_daemon_accepts(
    secured: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    client = troupe.Client(secured.address, timeout=10)
    if how == "option":
        client = troupe.Client(secured.address, timeout=10, token=API_TOKEN)
    elif how == "file":
        client = troupe.Client(
            secured.address, timeout=10, token_file=token_file(tmp_path, API_TOKEN)
        )
    elif how == "env file":
        # The daemon's variable, as a Kubernetes Secret mounted as a file gives it; it wins
        # over a stale token in $TROUPE_API_TOKEN.
        monkeypatch.setenv("TROUPE_API_TOKEN_FILE", str(token_file(tmp_path, API_TOKEN)))
        monkeypatch.setenv("TROUPE_API_TOKEN", "a-stale-token")
    elif how == "env":
        monkeypatch.setenv("TROUPE_API_TOKEN", f"{API_TOKEN},an-older-token")
    else:
        # ActorClient also accepts the app token, for an app's own calls.
        client = troupe.Client(secured.address, timeout=10, token=APP_TOKEN)
    async with client:
        assert await client.get_state("auth-back", "b1") == {}
        assert await client.list_reminders() == []


async def test_sync_client_sends_its_token(secured: Daemon) -> None:
    def read() -> dict[str, object]:
        with troupe.SyncClient(secured.address, timeout=10, token=API_TOKEN) as sync:
            return sync.get_state("auth-back", "b1")

    assert await asyncio.to_thread(read) == {}


@pytest.mark.parametrize("how", ["api token option", "api token in env", "no token"])
async def test_app_without_the_app_token_stops_with_unauthenticated(
    secured: Daemon, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    token = None
    if how == "api token option":
        token = API_TOKEN
    elif how == "api token in env":
        # A client credential in the environment is no app token: the app must not use it.
        monkeypatch.setenv("TROUPE_API_TOKEN", API_TOKEN)
    app = troupe.App([Back], address=secured.address, app_name="pytest", token=token)
    with pytest.raises(troupe.Unauthenticated) as info:
        await asyncio.wait_for(app.run(), 10)
    message = str(info.value)
    assert "TROUPE_APP_TOKEN" in message
    assert API_TOKEN not in message
    assert app.sessions == 0
    assert not app.registered


@pytest.mark.parametrize("how", ["option", "file", "env file", "env"])
async def test_app_with_the_app_token_hosts_and_calls_actors_from_turns(
    secured: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    token = APP_TOKEN if how == "option" else None
    path = token_file(tmp_path, APP_TOKEN) if how == "file" else None
    if how == "env":
        monkeypatch.setenv("TROUPE_APP_TOKEN", APP_TOKEN)
    if how == "env file":
        monkeypatch.setenv("TROUPE_APP_TOKEN_FILE", str(token_file(tmp_path, APP_TOKEN)))
    async with (
        hosting(secured.address, Front, Back, token=token, token_file=path) as app,
        troupe.Client(secured.address, timeout=10, token=API_TOKEN) as client,
    ):
        assert app.registered
        # Front's turn calls Back through the app's connection, with the app token.
        assert await client.actor("auth-front", "f1").relay("b1") == 1
        assert await client.actor("auth-front", "f1").relay("b1") == 2
        assert await client.get_state("auth-back", "b1") == {"n": 2}


async def test_app_reads_its_rotated_token_file_when_it_reconnects(
    secured: Daemon, tmp_path: Path
) -> None:
    """The Secret is rotated while the daemon restarts with the new token: the app reads the
    file again before each attempt (on the native core, when the core asks for credentials),
    so it registers again instead of being refused for good."""
    path = token_file(tmp_path, APP_TOKEN)
    rotated = "app-rotated-77c1"
    async with (
        hosting(secured.address, Back, token_file=path) as app,
        troupe.Client(secured.address, timeout=10, token=API_TOKEN) as client,
    ):
        assert await client.actor("auth-back", "r1").incr() == 1
        sessions = app.sessions
        assert await secured.stop() == 0, secured.log_tail()
        path.write_text(f"# rotated\n{rotated}\n", encoding="utf-8")
        secured.env = {**secured.env, "TROUPE_APP_TOKEN": rotated}
        await secured.start()
        await app.wait_registered(sessions=sessions + 1, timeout=15)
        assert await client.actor("auth-back", "r1").incr() == 2
