"""TLS to a daemon that has it on: the CA its certificate must chain to, and a client
certificate for a daemon that requires one (``--tls-client-certs required``).

Each of ``tls_ca``, ``tls_cert`` and ``tls_key`` is the option given to the Client or App,
else ``$TROUPE_TLS_CA``, ``$TROUPE_TLS_CERT``, ``$TROUPE_TLS_KEY`` (the variables the daemon
and the CLI read). A CA turns TLS on: the daemon's certificate is then checked against the
name the client dials. The files are read each time a channel is opened, so a renewed
certificate is used from the next connection on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import grpc

from ._errors import TlsConfigError

TLS_CA_ENV = "TROUPE_TLS_CA"
TLS_CERT_ENV = "TROUPE_TLS_CERT"
TLS_KEY_ENV = "TROUPE_TLS_KEY"

TlsPath = str | os.PathLike[str]

_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_PRIVATE_KEY = b"PRIVATE KEY-----"


class _File(NamedTuple):
    where: str  # the option ("tls_ca") or the variable ("$TROUPE_TLS_CA") that named it
    path: Path

    def __str__(self) -> str:
        return f"{self.where} {str(self.path)!r}"


def _option(value: TlsPath | None, name: str) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a path (str or os.PathLike) or None, not {type(value).__name__}"
        )
    if os.fspath(value) == "":
        raise TlsConfigError(f"{name} is empty; give the path of a PEM file, or None", option=name)
    return Path(value)


def _from_env(variable: str) -> _File | None:
    value = os.environ.get(variable, "")
    return _File(f"${variable}", Path(value)) if value else None


def _read(file: _File, marker: bytes, holds: str) -> bytes:
    try:
        data = file.path.read_bytes()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise TlsConfigError(
            f"{file} cannot be read ({reason}); give the path of a PEM file holding {holds}",
            option=file.where,
            path=str(file.path),
        ) from e
    if marker not in data:
        raise TlsConfigError(
            f"{file} holds no PEM {holds} (no {marker.decode()!r} in it)",
            option=file.where,
            path=str(file.path),
        )
    return data


class TlsSource:
    """The TLS files of one Client or App: each option, else its environment variable.

    Without a CA (neither ``tls_ca`` nor ``$TROUPE_TLS_CA``) the channel is plaintext, as
    before TLS existed; ``$TROUPE_TLS_CERT`` and ``$TROUPE_TLS_KEY`` are then ignored (as by
    the CLI: the same variables serve the daemon beside it), the ``tls_cert`` and
    ``tls_key`` options are an error.
    """

    __slots__ = ("_ca", "_cert", "_key")

    def __init__(
        self, tls_ca: TlsPath | None, tls_cert: TlsPath | None, tls_key: TlsPath | None
    ) -> None:
        self._ca = _option(tls_ca, "tls_ca")
        self._cert = _option(tls_cert, "tls_cert")
        self._key = _option(tls_key, "tls_key")
        if (self._cert is None) != (self._key is None):
            missing = "tls_key" if self._key is None else "tls_cert"
            raise TlsConfigError(
                "tls_cert and tls_key go together (a client certificate and its private key);"
                " give both or neither",
                option=missing,
            )

    def files(self) -> tuple[_File, tuple[_File, _File] | None] | None:
        """The CA and the client certificate and key to use now, or None for plaintext.

        Raises TlsConfigError for a certificate without its key, or one without a CA.
        """
        ca = _File("tls_ca", self._ca) if self._ca is not None else _from_env(TLS_CA_ENV)
        if self._cert is not None and self._key is not None:
            if ca is None:
                raise TlsConfigError(
                    f"tls_cert and tls_key need tls_ca (or ${TLS_CA_ENV}): the CA the"
                    " daemon's certificate must chain to, which turns TLS on",
                    option="tls_ca",
                )
            return ca, (_File("tls_cert", self._cert), _File("tls_key", self._key))
        if ca is None:
            return None
        cert, key = _from_env(TLS_CERT_ENV), _from_env(TLS_KEY_ENV)
        if cert is not None and key is not None:
            return ca, (cert, key)
        if cert is not None or key is not None:
            raise TlsConfigError(
                f"${TLS_CERT_ENV} and ${TLS_KEY_ENV} go together (a client certificate and"
                " its private key); set both or neither",
                option=f"${TLS_KEY_ENV}" if key is None else f"${TLS_CERT_ENV}",
            )
        return ca, None

    def pem(self) -> tuple[bytes, tuple[bytes, bytes] | None] | None:
        """The CA and the client certificate and key as they are now (PEM bytes), or None for
        plaintext. Raises TlsConfigError when a file cannot be read or holds no PEM."""
        files = self.files()
        if files is None:
            return None
        ca, client = files
        root = _read(ca, _CERTIFICATE, "a CA certificate")
        if client is None:
            return root, None
        chain = _read(client[0], _CERTIFICATE, "a certificate")
        key = _read(client[1], _PRIVATE_KEY, "a private key")
        return root, (chain, key)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Credentials of a new TLS channel from the files as they are now, or None for
        plaintext. Raises TlsConfigError when a file cannot be read or holds no PEM."""
        pem = self.pem()
        if pem is None:
            return None
        root, client = pem
        if client is None:
            return grpc.ssl_channel_credentials(root_certificates=root)
        chain, key = client
        return grpc.ssl_channel_credentials(
            root_certificates=root, private_key=key, certificate_chain=chain
        )

    def describe(self) -> str:
        """For reprs: where the TLS files come from, or "" for plaintext."""
        try:
            files = self.files()
        except TlsConfigError as e:
            return f"TLS misconfigured: {e}"
        if files is None:
            return ""
        ca, client = files
        if client is None:
            return f"TLS with CA from {ca}"
        return f"TLS with CA from {ca}, client certificate from {client[0]}"

    def __repr__(self) -> str:
        return f"<troupe {self.describe() or 'no TLS'}>"
