"""The token a Client or App presents to the daemon, as ``authorization: Bearer <token>``.

The daemon checks two credentials: the client API token (``$TROUPE_API_TOKEN``) on
ActorClient and Admin, and the app token (``$TROUPE_APP_TOKEN``) on AppHost, which
ActorClient also accepts so that actors can call others with the app's one token.
A token is never put in a repr, a log message or an exception's text.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._tracing import Metadata

API_TOKEN_ENV = "TROUPE_API_TOKEN"
APP_TOKEN_ENV = "TROUPE_APP_TOKEN"
AUTHORIZATION = "authorization"

TokenPath = str | os.PathLike[str]


def parse_tokens(text: str) -> list[str]:
    """Tokens in text as the daemon reads them: one per line or comma-separated, surrounding
    spaces trimmed, blank lines and lines starting with ``#`` skipped."""
    tokens: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        tokens.extend(t for t in (part.strip() for part in line.split(",")) if t)
    return tokens


def _sendable(token: str, where: str) -> str:
    # gRPC refuses other characters in metadata, and its error would quote the value.
    if not all(" " <= c <= "~" for c in token):
        raise ValueError(
            f"the token from {where} holds characters that cannot travel in gRPC metadata;"
            " use printable ASCII"
        )
    return token


def _from_file(path: Path, where: str) -> str:
    tokens = parse_tokens(path.read_text(encoding="utf-8"))
    if not tokens:
        # A file given but empty is a mistake (a Secret not mounted yet, say): sending
        # nothing, or the environment's token instead, would only fail later and less clearly.
        raise ValueError(
            f"{where} holds no token; put the token on a line of its own"
            " (lines starting with # are comments)"
        )
    return _sendable(tokens[0], where)


class TokenSource:
    """Where one Client's or App's token comes from: the ``token`` option, else the first
    token of ``token_file``, else of the file named by ``$<env>_FILE`` (the variable the
    daemon reads too, and how Kubernetes hands over a mounted Secret), else the first
    token of the environment variable ``env``, else none. Files are read each time a
    connection is opened, so a rotated file is picked up."""

    __slots__ = ("_env", "_file", "_token")

    def __init__(self, token: str | None, token_file: TokenPath | None, env: str) -> None:
        if token is not None:
            if not isinstance(token, str):
                raise TypeError(f"token must be a str or None, not {type(token).__name__}")
            token = _sendable(token.strip(), "the token option")
            if not token:
                raise ValueError(
                    f"token is empty; pass a token, or None to read token_file or ${env}"
                )
        self._token = token
        self._file = Path(token_file) if token_file is not None else None
        self._env = env

    def token(self) -> str | None:
        """The token to send now, or None. Raises OSError when ``token_file`` cannot be read
        and ValueError when it holds no token."""
        if self._token is not None:
            return self._token
        if self._file is not None:
            return _from_file(self._file, f"token_file {str(self._file)!r}")
        env_file = os.environ.get(f"{self._env}_FILE", "").strip()
        if env_file:
            return _from_file(Path(env_file), f"${self._env}_FILE ({env_file!r})")
        tokens = parse_tokens(os.environ.get(self._env, ""))
        return _sendable(tokens[0], f"${self._env}") if tokens else None

    def metadata(self) -> Metadata:
        """The call metadata that carries the token now (empty without one)."""
        token = self.token()
        return ((AUTHORIZATION, f"Bearer {token}"),) if token is not None else ()

    def describe(self) -> str:
        """Where the token comes from, for reprs: never the token itself."""
        if self._token is not None:
            return "token from the token option"
        if self._file is not None:
            return f"token from token_file {str(self._file)!r}"
        if os.environ.get(f"{self._env}_FILE", "").strip():
            return f"token from the file in ${self._env}_FILE"
        if parse_tokens(os.environ.get(self._env, "")):
            return f"token from ${self._env}"
        return "no token"

    def __repr__(self) -> str:
        return f"<troupe {self.describe()}>"
