"""TLS to the daemon: the options and variables, and the real daemon with TLS on (and with
client certificates required), its certificates made by `troupe certs`."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

import troupe
from troupe._tls import TlsSource

from .conftest import Daemon, hosting, troupe_bin

API_TOKEN = "api-tls-secret-51d0"
APP_TOKEN = "app-tls-secret-8e3a"


@dataclass(frozen=True)
class Certs:
    """One CA's files as `troupe certs` writes them."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    def pem(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


def make_certs(directory: Path) -> Certs:
    """A CA, a daemon's certificate `d1` and a client's `app`, as a user would make them."""
    binary = str(troupe_bin())
    for args in (["ca"], ["issue", "d1"], ["issue", "app", "--client"]):
        subprocess.run(
            [binary, "certs", *args, "--dir", str(directory)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    return Certs(directory)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Another CA: the daemon's certificate does not chain to it."""
    return make_certs(tmp_path_factory.mktemp("other-certs"))


def tls_daemon_of(
    binary: Path,
    tmp_path: Path,
    certs: Certs,
    *,
    require_client_certs: bool = False,
    env: dict[str, str] | None = None,
) -> Daemon:
    args = ["--host-wait", "200ms"]
    args += ["--tls-cert", str(certs.pem("d1")), "--tls-key", str(certs.key("d1"))]
    args += ["--tls-ca", str(certs.ca)]
    client_cert: dict[str, bytes] = {}
    if require_client_certs:
        args += ["--tls-client-certs", "required"]
        client_cert = {
            "private_key": certs.key("app").read_bytes(),
            "certificate_chain": certs.pem("app").read_bytes(),
        }
    return Daemon(
        binary=binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=args,
        env=env or {},
        health_credentials=grpc.ssl_channel_credentials(certs.ca.read_bytes(), **client_cert),
    )


@pytest.fixture
async def tls_daemon(daemon_binary: Path, tmp_path: Path, certs: Certs) -> AsyncIterator[Daemon]:
    d = tls_daemon_of(daemon_binary, tmp_path, certs)
    await d.start()
    try:
        yield d
    finally:
        await d.kill()


@pytest.fixture
async def mtls_daemon(daemon_binary: Path, tmp_path: Path, certs: Certs) -> AsyncIterator[Daemon]:
    """Every client and app must present a certificate from the CA."""
    d = tls_daemon_of(daemon_binary, tmp_path, certs, require_client_certs=True)
    await d.start()
    try:
        yield d
    finally:
        await d.kill()


@troupe.actor("tls-back")
class Back(troupe.Actor):
    @troupe.method
    def incr(self) -> int:
        self.state["n"] = self.state.get("n", 0) + 1
        return int(self.state["n"])


@troupe.actor("tls-front")
class Front(troupe.Actor):
    @troupe.method
    async def relay(self, back_id: str) -> int:
        # On the app's own connection: over TLS too.
        result: int = await self.ctx.actor("tls-back", back_id).incr()
        return result


async def round_trip(client: troupe.Client) -> None:
    assert await client.actor("tls-front", "f1").relay("b1") == 1
    assert await client.actor("tls-front", "f1").relay("b1") == 2
    assert await client.get_state("tls-back", "b1") == {"n": 2}


# -- options and variables, no daemon ---------------------------------------------------


def test_option_over_variable_and_no_ca_is_plaintext(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certs: Certs
) -> None:
    assert TlsSource(None, None, None).files() is None
    assert TlsSource(None, None, None).credentials() is None
    # The daemon's own variables beside it turn nothing on without a CA (as for the CLI).
    monkeypatch.setenv("TROUPE_TLS_CERT", str(certs.pem("d1")))
    monkeypatch.setenv("TROUPE_TLS_KEY", str(certs.key("d1")))
    assert TlsSource(None, None, None).files() is None
    monkeypatch.setenv("TROUPE_TLS_CA", str(tmp_path / "env-ca.pem"))
    files = TlsSource(certs.ca, None, None).files()
    assert files is not None
    ca, client = files
    assert (ca.where, ca.path) == ("tls_ca", certs.ca)
    assert client is not None
    assert [(f.where, f.path) for f in client] == [
        ("$TROUPE_TLS_CERT", certs.pem("d1")),
        ("$TROUPE_TLS_KEY", certs.key("d1")),
    ]
    files = TlsSource(None, str(certs.pem("app")), certs.key("app")).files()
    assert files is not None
    ca, client = files
    assert (ca.where, ca.path) == ("$TROUPE_TLS_CA", tmp_path / "env-ca.pem")
    assert client is not None
    assert [(f.where, f.path) for f in client] == [
        ("tls_cert", certs.pem("app")),
        ("tls_key", certs.key("app")),
    ]


def test_a_certificate_needs_its_key_and_a_ca(
    monkeypatch: pytest.MonkeyPatch, certs: Certs
) -> None:
    with pytest.raises(troupe.TlsConfigError, match="tls_cert and tls_key go together") as info:
        troupe.Client(tls_ca=certs.ca, tls_cert=certs.pem("app"))
    assert info.value.option == "tls_key"
    with pytest.raises(troupe.TlsConfigError, match="go together"):
        troupe.App([Back], tls_key=certs.key("app"))
    with pytest.raises(troupe.TlsConfigError, match="go together"):
        troupe.SyncClient(tls_cert=certs.pem("app"))
    with pytest.raises(troupe.TlsConfigError, match=r"need tls_ca \(or \$TROUPE_TLS_CA\)"):
        TlsSource(None, certs.pem("app"), certs.key("app")).credentials()
    monkeypatch.setenv("TROUPE_TLS_CA", str(certs.ca))
    monkeypatch.setenv("TROUPE_TLS_CERT", str(certs.pem("app")))
    with pytest.raises(troupe.TlsConfigError, match=r"\$TROUPE_TLS_KEY go together") as info:
        TlsSource(None, None, None).credentials()
    assert info.value.option == "$TROUPE_TLS_KEY"
    with pytest.raises(troupe.TlsConfigError, match="tls_ca is empty"):
        troupe.Client(tls_ca="")
    with pytest.raises(TypeError, match="tls_ca must be a path"):
        troupe.Client(tls_ca=b"ca.pem")  # type: ignore[arg-type]


def test_files_are_read_when_a_channel_is_opened(tmp_path: Path, certs: Certs) -> None:
    ca = tmp_path / "ca.pem"
    source = TlsSource(ca, None, None)  # not there yet: no error
    with pytest.raises(troupe.TlsConfigError, match="cannot be read") as info:
        source.credentials()
    assert isinstance(info.value.__cause__, FileNotFoundError)
    ca.write_text("not a certificate\n", encoding="utf-8")
    with pytest.raises(troupe.TlsConfigError, match="holds no PEM a CA certificate"):
        source.credentials()
    shutil.copyfile(certs.ca, ca)
    assert source.credentials() is not None
    key = tmp_path / "app.key"
    key.write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
    with pytest.raises(troupe.TlsConfigError, match=r"tls_key '.*app\.key' holds no PEM"):
        TlsSource(ca, certs.pem("app"), key).credentials()


def test_repr_shows_where_tls_comes_from(monkeypatch: pytest.MonkeyPatch, certs: Certs) -> None:
    assert repr(troupe.Client("127.0.0.1:1")) == "<troupe.Client 127.0.0.1:1, no token>"
    client = troupe.Client("127.0.0.1:1", tls_ca=certs.ca)
    assert (
        repr(client)
        == f"<troupe.Client 127.0.0.1:1, no token, TLS with CA from tls_ca {str(certs.ca)!r}>"
    )
    monkeypatch.setenv("TROUPE_TLS_CA", str(certs.ca))
    app = troupe.App(
        [Back], address="127.0.0.1:1", tls_cert=certs.pem("app"), tls_key=certs.key("app")
    )
    assert repr(app).endswith(
        f"TLS with CA from $TROUPE_TLS_CA {str(certs.ca)!r},"
        f" client certificate from tls_cert {str(certs.pem('app'))!r}>"
    )


@pytest.mark.parametrize("how", ["option", "env"])
async def test_a_missing_ca_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    missing = tmp_path / "no-such-ca.pem"
    where = "tls_ca"
    if how == "env":
        monkeypatch.setenv("TROUPE_TLS_CA", str(missing))
        where = "$TROUPE_TLS_CA"
    option = missing if how == "option" else None
    expected = f"{where} {str(missing)!r} cannot be read (No such file or directory)"
    async with troupe.Client("127.0.0.1:1", timeout=5, tls_ca=option) as client:
        with pytest.raises(troupe.TlsConfigError) as info:
            await client.get_state("tls-back", "b1")
    assert expected in str(info.value)
    assert (info.value.option, info.value.path) == (where, str(missing))
    app = troupe.App([Back], address="127.0.0.1:1", app_name="pytest", tls_ca=option)
    with pytest.raises(troupe.TlsConfigError) as info:
        await asyncio.wait_for(app.run(), 10)
    assert expected in str(info.value)
    assert app.sessions == 0


# -- against the daemon ------------------------------------------------------------------


async def test_client_and_app_with_tls_ca_round_trip(tls_daemon: Daemon, certs: Certs) -> None:
    async with (
        hosting(tls_daemon.address, Front, Back, tls_ca=certs.ca) as app,
        troupe.Client(tls_daemon.address, timeout=10, tls_ca=str(certs.ca)) as client,
    ):
        assert app.registered
        await round_trip(client)

        def read() -> dict[str, object]:
            with troupe.SyncClient(tls_daemon.address, timeout=10, tls_ca=certs.ca) as sync:
                return sync.get_state("tls-back", "b1")

        assert await asyncio.to_thread(read) == {"n": 2}


@pytest.mark.parametrize("how", ["plaintext", "another CA"])
async def test_client_without_the_right_ca_fails_fast(
    tls_daemon: Daemon, other_certs: Certs, how: str
) -> None:
    ca = other_certs.ca if how == "another CA" else None
    async with troupe.Client(tls_daemon.address, timeout=5, tls_ca=ca) as client:
        with pytest.raises(troupe.Unavailable):
            # Bounded twice: the call's deadline, and this in case the SDK waited on.
            await asyncio.wait_for(client.get_state("tls-back", "b1"), 10)


class _FirstWarning(logging.Handler):
    """Sets ``event`` at the first warning logged (in the event loop's thread)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = asyncio.Event()
        self.message = ""

    def emit(self, record: logging.LogRecord) -> None:
        if not self.event.is_set():
            self.message = record.getMessage()
            self.event.set()


async def test_app_without_tls_keeps_reconnecting_with_a_warning(tls_daemon: Daemon) -> None:
    handler = _FirstWarning()
    logger = logging.getLogger("troupe")
    logger.addHandler(handler)
    app = troupe.App([Back], address=tls_daemon.address, app_name="pytest-plain")
    task = asyncio.create_task(app.run())
    try:
        await asyncio.wait_for(handler.event.wait(), 10)
        assert "no connection to the daemon" in handler.message
        assert "retrying" in handler.message
        assert not task.done()
        assert app.sessions == 0
    finally:
        logger.removeHandler(handler)
        app.stop()
        await asyncio.wait_for(task, 10)


async def test_client_certificates_required(mtls_daemon: Daemon, certs: Certs) -> None:
    cert, key = certs.pem("app"), certs.key("app")
    async with (
        hosting(
            mtls_daemon.address, Front, Back, tls_ca=certs.ca, tls_cert=cert, tls_key=key
        ) as app,
        troupe.Client(
            mtls_daemon.address, timeout=10, tls_ca=certs.ca, tls_cert=cert, tls_key=key
        ) as client,
    ):
        assert app.registered
        await round_trip(client)
    async with troupe.Client(mtls_daemon.address, timeout=5, tls_ca=certs.ca) as without:
        with pytest.raises(troupe.Unavailable):
            await asyncio.wait_for(without.get_state("tls-back", "b1"), 10)


async def test_environment_variables_are_the_defaults(
    mtls_daemon: Daemon, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TROUPE_TLS_CA", str(certs.ca))
    monkeypatch.setenv("TROUPE_TLS_CERT", str(certs.pem("app")))
    monkeypatch.setenv("TROUPE_TLS_KEY", str(certs.key("app")))
    async with (
        hosting(mtls_daemon.address, Front, Back) as app,
        troupe.Client(mtls_daemon.address, timeout=10) as client,
    ):
        assert app.registered
        await round_trip(client)


async def test_tls_ca_variable_alone(
    tls_daemon: Daemon, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TROUPE_TLS_CA", str(certs.ca))
    async with (
        hosting(tls_daemon.address, Front, Back),
        troupe.Client(tls_daemon.address, timeout=10) as client,
    ):
        await round_trip(client)


async def test_tokens_travel_over_tls(daemon_binary: Path, tmp_path: Path, certs: Certs) -> None:
    d = tls_daemon_of(
        daemon_binary,
        tmp_path,
        certs,
        env={"TROUPE_API_TOKEN": API_TOKEN, "TROUPE_APP_TOKEN": APP_TOKEN},
    )
    await d.start()
    try:
        async with troupe.Client(d.address, timeout=10, tls_ca=certs.ca) as anonymous:
            with pytest.raises(troupe.Unauthenticated):
                await anonymous.get_state("tls-back", "b1")
        async with (
            hosting(d.address, Front, Back, token=APP_TOKEN, tls_ca=certs.ca),
            troupe.Client(d.address, timeout=10, token=API_TOKEN, tls_ca=certs.ca) as client,
        ):
            await round_trip(client)
    finally:
        await d.kill()


async def test_app_reads_renewed_files_when_it_reconnects(
    daemon_binary: Path, tmp_path: Path, certs: Certs, other_certs: Certs
) -> None:
    """The app's CA file is replaced while the daemon restarts with a certificate from the new
    CA: the app re-connects with the new file."""
    ca = tmp_path / "ca.pem"
    shutil.copyfile(certs.ca, ca)
    d = tls_daemon_of(daemon_binary, tmp_path, certs)
    await d.start()
    try:
        async with hosting(d.address, Back, tls_ca=ca) as app:
            await d.stop()
            renewed = tmp_path / "ca.pem.new"
            shutil.copyfile(other_certs.ca, renewed)
            os.replace(renewed, ca)
            restarted = tls_daemon_of(daemon_binary, tmp_path, other_certs)
            restarted.port = d.port
            d = restarted
            await d.start()
            await app.wait_registered(sessions=2, timeout=20)
            async with troupe.Client(d.address, timeout=10, tls_ca=ca) as client:
                assert await client.actor("tls-back", "b9").incr() == 1
    finally:
        await d.kill()
