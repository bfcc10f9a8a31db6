"""Which token a Client or App sends, how it travels, and that it never shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

import troupe
from troupe._auth import TokenSource, parse_tokens
from troupe._caller import Caller
from troupe._proto.troupe.v1 import client_pb2
from troupe._tracing import Metadata, Tracing

SECRET = "s3cret-token-7d"


@pytest.fixture(autouse=True)
def no_tokens_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TROUPE_API_TOKEN", raising=False)
    monkeypatch.delenv("TROUPE_APP_TOKEN", raising=False)


@troupe.actor("token-unit")
class Unit(troupe.Actor):
    @troupe.method
    def ping(self) -> str:
        return "pong"


def test_parse_tokens_as_the_daemon_does() -> None:
    text = "# comment, not, tokens\n\n  first , second\nthird\n  # indented comment\n"
    assert parse_tokens(text) == ["first", "second", "third"]
    assert parse_tokens("") == []


def test_token_option_then_file_then_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TROUPE_API_TOKEN", "from-env, second-from-env")
    path = tmp_path / "token"
    path.write_text("# the API token\nfrom-file\nnext-from-file\n", encoding="utf-8")
    assert TokenSource(" explicit ", path, "TROUPE_API_TOKEN").token() == "explicit"
    assert TokenSource(None, path, "TROUPE_API_TOKEN").token() == "from-file"
    assert TokenSource(None, str(path), "TROUPE_API_TOKEN").token() == "from-file"
    assert TokenSource(None, None, "TROUPE_API_TOKEN").token() == "from-env"
    assert TokenSource(None, None, "TROUPE_APP_TOKEN").token() is None
    assert TokenSource(None, None, "TROUPE_APP_TOKEN").metadata() == ()
    assert TokenSource("t", None, "TROUPE_APP_TOKEN").metadata() == (("authorization", "Bearer t"),)


def test_token_file_is_read_when_connecting(tmp_path: Path) -> None:
    path = tmp_path / "token"
    source = TokenSource(None, path, "TROUPE_API_TOKEN")  # not there yet: no error
    with pytest.raises(FileNotFoundError):
        source.token()
    path.write_text("# nothing but comments\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no token"):
        source.token()
    path.write_text("rotated\n", encoding="utf-8")
    assert source.token() == "rotated"


def test_unusable_tokens_are_refused_without_showing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="token is empty"):
        troupe.Client(token="  ")
    with pytest.raises(ValueError, match="printable ASCII") as info:
        troupe.App([Unit], token=SECRET + "\u00e9")
    assert SECRET not in str(info.value)
    monkeypatch.setenv("TROUPE_API_TOKEN", SECRET + "\x01")
    with pytest.raises(ValueError, match=r"\$TROUPE_API_TOKEN") as info:
        TokenSource(None, None, "TROUPE_API_TOKEN").token()
    assert SECRET not in str(info.value)


def test_repr_never_shows_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text(SECRET, encoding="utf-8")
    monkeypatch.setenv("TROUPE_APP_TOKEN", SECRET)
    client = troupe.Client("127.0.0.1:1", token=SECRET)
    from_file = troupe.Client("127.0.0.1:1", token_file=path)
    app = troupe.App([Unit], address="127.0.0.1:1", token=SECRET)
    app_from_env = troupe.App([Unit], address="127.0.0.1:1")
    with troupe.SyncClient("127.0.0.1:1", token=SECRET) as sync:
        shown = [repr(client), repr(from_file), repr(app), repr(app_from_env), repr(sync)]
        shown += [str(vars(client)), str(vars(app)), repr(client._auth)]
    for text in shown:
        assert SECRET not in text
    assert repr(client) == "<troupe.Client 127.0.0.1:1, token from the token option>"
    assert "token_file" in repr(from_file)
    assert "$TROUPE_APP_TOKEN" in repr(app_from_env)
    assert repr(troupe.Client("127.0.0.1:1")).endswith("no token>")


class _RecordingStub:
    def __init__(self) -> None:
        self.metadata: list[Metadata | None] = []

    async def GetState(self, request: Any, *, timeout: Any, metadata: Metadata | None) -> Any:
        self.metadata.append(metadata)
        return client_pb2.GetStateResponse()


async def test_calls_send_the_token_beside_the_trace_context() -> None:
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    caller = Caller(channel, Tracing(TracerProvider()), (("authorization", "Bearer t"),))
    stub = _RecordingStub()
    caller._stub = stub
    try:
        await caller.get_state("token-unit", "u1")
    finally:
        await channel.close()
    [sent] = stub.metadata
    assert sent is not None
    assert ("authorization", "Bearer t") in sent
    assert "traceparent" in dict(sent)
