"""How an app's Attach stream fails, on either core: which registration refusals end
App.run() (and the TroupeError each raises, ApiVersionMismatch among them), which errors
are a lost connection to ride out, and the log lines an outage writes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from ._address import API_VERSION, SDK_NAME
from ._errors import (
    API_VERSION_TRAILER,
    INSTALL_MATCHING,
    ApiVersionMismatch,
    error_for_code,
)
from ._proto.troupe.v1 import app_pb2

# Records carry the logger's name ("troupe"), so messages do not repeat it.
log = logging.getLogger("troupe")

# Registration failures that a retry cannot fix: report them instead of looping.
# UNAUTHENTICATED among them: a missing or wrong token stays wrong until someone fixes it.
_FATAL_CODES = {
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNIMPLEMENTED,
}

# What a daemon restart or a dropped stream looks like; anything else is a bug or
# a refused registration and ends App.run().
CONNECTION_ERRORS = (grpc.aio.AioRpcError, ConnectionError, OSError, asyncio.InvalidStateError)


class StreamEnded(ConnectionError):
    """The daemon ended the app's stream without an error: it is stopping or restarting,
    which an app rides out by re-connecting."""


def log_stream_closed(address: str) -> None:
    """The daemon closed the app's stream: an expected end (it is stopping, e.g. for a
    restart), said once; the failed attempts while it is down are only debug records."""
    log.warning(
        "the daemon at %s closed the app's stream (stopping or restarting);"
        " re-connecting until it is back",
        address,
    )


def log_no_connection(address: str, cause: str, *, first: bool) -> None:
    """An attempt to attach failed: the first failure of an outage loudly, the retries
    quietly."""
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "no connection to the daemon at %s (%s); retrying",
        address,
        cause,
    )


def describe(error: BaseException) -> str:
    """A lost connection's cause, for log_no_connection."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__


def raise_refusal(code: grpc.StatusCode, details: str | None, trailers: Any = None) -> None:
    """Raise the TroupeError of a registration refused for good (see _FATAL_CODES).

    ``trailers``: the status's trailing metadata, as grpc.aio gives it ((key, value) pairs).
    """
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        for key, value in trailers or ():
            if key == API_VERSION_TRAILER:
                text = value.decode() if isinstance(value, bytes) else str(value)
                daemon_api_version = int(text) if text.isdigit() else 0
                raise ApiVersionMismatch(
                    f"daemon refused the registration: {details}",
                    sdk_api_version=API_VERSION,
                    daemon_api_version=daemon_api_version,
                ) from None
    if code in _FATAL_CODES:
        raise error_for_code(code, f"daemon refused the registration: {details}") from None


def check_api_version(address: str, registered: app_pb2.Registered) -> None:
    """Raise ApiVersionMismatch unless the daemon speaks this SDK's app API version.

    A daemon of another version would have refused our Register; one that answers
    anyway either accepts several versions, or is from before API versions (0), and
    then what it lacks is unknown: stopping with a clear message beats failing later
    on a message one side misreads.
    """
    if registered.api_version == API_VERSION:
        return
    daemon = f"the daemon at {address} (troupe {registered.daemon_version or '?'})"
    if registered.api_version == 0:
        speaks = f"{daemon} is from before app API versions (it names none)"
    else:
        speaks = f"{daemon} speaks app API version {registered.api_version}"
    raise ApiVersionMismatch(
        f"{speaks}, this SDK ({SDK_NAME}) speaks version {API_VERSION}: {INSTALL_MATCHING}",
        sdk_api_version=API_VERSION,
        daemon_api_version=registered.api_version,
    )
