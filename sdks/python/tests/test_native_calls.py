"""On the native core every client RPC goes through troupe._native: a Client and an
actor's context make no grpcio call, the rarer RPCs included (state reads, reminders),
neither opens a grpcio channel, and a bad idempotency key is refused by the core with
the SDK's words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc.aio._channel import UnaryUnaryMultiCallable

import troupe
from troupe import _core

from .conftest import Daemon, hosting

pytestmark = pytest.mark.skipif(_core.native is None, reason="the native core is not in use")


@pytest.fixture
def grpcio_rpcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The unary grpcio RPCs made while the test ran, by method."""
    made: list[str] = []
    original = UnaryUnaryMultiCallable.__call__

    def call(self: UnaryUnaryMultiCallable[Any, Any], *args: Any, **kwargs: Any) -> Any:
        made.append(str(getattr(self, "_method", b"?")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(UnaryUnaryMultiCallable, "__call__", call)
    yield made


@pytest.fixture
def grpcio_channels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The targets of the grpcio channels opened while the test ran."""
    opened: list[str] = []
    for name in ("insecure_channel", "secure_channel"):
        original = getattr(grpc.aio, name)

        def channel(target: str, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            opened.append(target)
            return _original(target, *args, **kwargs)

        monkeypatch.setattr(grpc.aio, name, channel)
    return opened


@troupe.actor("native_pinger")
class Pinger(troupe.Actor):
    @troupe.method
    async def arm(self) -> str | None:
        self.state["armed"] = True
        await self.ctx.set_reminder("wake", due="1h")
        reminder = await self.ctx.get_reminder("wake")
        await self.ctx.delete_reminder("wake")
        return reminder.name if reminder is not None else None


async def test_rarer_rpcs_from_a_turn_and_a_client_use_no_grpcio(
    daemon: Daemon, grpcio_rpcs: list[str], grpcio_channels: list[str]
) -> None:
    async with (
        hosting(daemon.address, Pinger),
        troupe.Client(daemon.address, timeout=10) as client,
    ):
        assert await client.actor("native_pinger", "p").arm() == "wake"
        assert await client.get_state("native_pinger", "p") == {"armed": True}
        assert await client.get_reminder("native_pinger", "p", "wake") is None
        await client.set_alarm("native_pinger", "p", "1h")
        assert await client.delete_alarm("native_pinger", "p") is True
    assert grpcio_rpcs == []
    assert grpcio_channels == []


async def test_a_bad_key_is_refused_before_anything_is_sent(daemon: Daemon) -> None:
    async with troupe.Client(daemon.address, timeout=10) as client:
        with pytest.raises(troupe.InvalidArgument) as info:
            await client.invoke("nobody", "x", "m", idempotency_key="")
        assert str(info.value) == (
            "idempotency_key is empty; pass 1 to 256 bytes of printable UTF-8, or None to"
            " let the SDK make a fresh key"
        )
        with pytest.raises(troupe.InvalidArgument, match="at most 256 bytes"):
            await client.tell("nobody", "x", "m", idempotency_key="k" * 257)
