"""Any payload the daemon accepts reaches a Python app, and a turn too large for the
app's declared receive limit fails that call, never the app (real daemon binary)."""

from __future__ import annotations

import pytest

import troupe

from .conftest import Daemon, hosting

MIB = 1024 * 1024


@troupe.actor("echo")
class Echo(troupe.Actor):
    @troupe.method
    def echo(self, text: str) -> str:
        return text

    @troupe.method
    def size(self, text: str) -> int:
        return len(text)


@pytest.mark.daemon_args("--max-payload-bytes", str(9 * MIB))
async def test_an_8_mib_call_reaches_the_app_and_comes_back(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Echo) as app:
        text = "x" * (8 * MIB)
        assert await client.actor("echo", "big").echo(text) == text
        assert await client.actor("echo", "big").size("abc") == 3
        assert app.sessions == 1, "the app re-connected: its stream broke"


@pytest.mark.daemon_args("--max-payload-bytes", str(9 * MIB))
async def test_a_turn_over_the_apps_declared_limit_fails_that_call_not_the_app(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Echo, max_receive_bytes=MIB) as app:
        actor = client.actor("echo", "a")
        assert await actor.size("abc") == 3
        with pytest.raises(troupe.Overloaded) as err:
            await actor.size("x" * (2 * MIB))
        message = str(err.value)
        assert str(MIB) in message and "max_receive_bytes" in message, message
        # Too large stays too large: the daemon sends no retry pushback, so no resend.
        assert "retried" not in message, message
        # The same actor on the same stream serves the next call.
        assert await actor.size("abcd") == 4
        assert app.sessions == 1, "the app re-connected: its stream broke"


def test_the_receive_limit_is_declared_at_registration() -> None:
    assert troupe.App([Echo])._register_message().max_receive_bytes == 0
    app = troupe.App([Echo], max_receive_bytes=5 * MIB)
    assert app._register_message().max_receive_bytes == 5 * MIB


@pytest.mark.parametrize("bad", [0, 1000, 65535, -1, 1.5, True])
def test_a_receive_limit_the_daemon_would_refuse_is_refused_at_once(bad: object) -> None:
    with pytest.raises(ValueError, match="max_receive_bytes"):
        troupe.App([Echo], max_receive_bytes=bad)  # type: ignore[arg-type]
