"""The exceptions SDK users see. Every one derives from TroupeError."""

from __future__ import annotations

import functools
import sys
from typing import Any, Literal
from urllib.parse import unquote

import grpc

ERROR_TYPE_TRAILER = "troupe-error-type"
# Beside it: whether the method ran ("raised") or the caller was at fault.
FAILURE_KIND_TRAILER = "troupe-failure-kind"
# And the traceback the actor's SDK sent, percent-encoded as grpc-message is (a
# header carries no newlines); the daemon keeps its last 4 KiB.
ERROR_DETAILS_TRAILER = "troupe-error-details"
_REMOTE_NOTE = "where the actor raised it (the traceback its SDK sent):"
FailureKind = Literal["raised", "no-such-method", "bad-arguments"]
_KINDS: dict[str, FailureKind] = {
    "raised": "raised",
    "no-such-method": "no-such-method",
    "bad-arguments": "bad-arguments",
}
# On the FAILED_PRECONDITION that refuses an app of another app API version: the
# daemon's version (its message says the rest).
API_VERSION_TRAILER = "troupe-api-version"
# What to do about an API version mismatch, in the SDK's messages as in the daemon's.
INSTALL_MATCHING = (
    "install matching versions: the SDK and the daemon ship together in"
    " `pip install troupe` / `npm install @troupe/sdk` (or run the daemon built from"
    " the same checkout as the SDK)"
)


class TroupeError(Exception):
    """Base class of every error raised by the troupe SDK.

    Each one pickles and copies with its attributes, so it can cross processes
    (``multiprocessing``, ``concurrent.futures``, task queues): an error whose
    constructor takes more than its message says how to make it again
    (``__reduce__``), as Python's default would call it with the message alone.
    """


class NotFound(TroupeError):
    """No app has registered the actor type (the message lists the registered ones)."""


class InvalidArgument(TroupeError):
    """The request was malformed: empty or oversize type/id/method, or a payload over the limit."""


class Overloaded(TroupeError):
    """RESOURCE_EXHAUSTED: a bound (the actor's mailbox, the daemon's in-flight limit),
    memory near the daemon's limit, or a message over a size limit. The client resends
    the first two itself within the call's timeout (they carry a retry pushback), so
    this means they outlasted it, or the call was sent with ``retry=False``."""


class Unavailable(TroupeError):
    """The daemon is unreachable or shutting down, or the app hosting the actor disconnected."""


class DeadlineExceeded(TroupeError):
    """The call did not finish before its deadline (the caller's timeout or the turn timeout)."""


class FailedPrecondition(TroupeError):
    """The daemon refused the call as it stands: it would close a cycle of calls into an actor
    type that is not reentrant (a deadlock), the call chain is too deep or is not one the
    daemon issued to a turn still running, a read-only method changed state, or a timer was
    set on an inactive actor; or, as :class:`ApiVersionMismatch`, it speaks another app
    API version. The message says which."""


class ApiVersionMismatch(FailedPrecondition):
    """The daemon speaks another app API version than this SDK, so the app cannot attach.

    Raised by :meth:`App.run` at once, not retried: either the daemon refused the SDK's
    version, or it answered with another one, or with none (a daemon from before API
    versions, whose protocol the SDK cannot vouch for). The message names both versions;
    the fix is to install an SDK and a daemon of the same release.

    Attributes:
        sdk_api_version: the version this SDK speaks (``troupe.API_VERSION``).
        daemon_api_version: the daemon's, 0 for a daemon from before API versions.
    """

    def __init__(self, message: str, *, sdk_api_version: int, daemon_api_version: int) -> None:
        super().__init__(message)
        self.sdk_api_version = sdk_api_version
        self.daemon_api_version = daemon_api_version

    def __reduce__(self) -> tuple[Any, ...]:
        made = functools.partial(
            type(self),
            sdk_api_version=self.sdk_api_version,
            daemon_api_version=self.daemon_api_version,
        )
        return (made, self.args)


class Unauthenticated(TroupeError):
    """The daemon requires a token and none was sent, or not one it accepts.

    The message says which token the daemon expects (the client API token,
    ``$TROUPE_API_TOKEN``, or the app token, ``$TROUPE_APP_TOKEN``) and where the daemon
    is configured with it; it never contains the token sent. Retrying does not help.
    """


class TlsConfigError(TroupeError):
    """A TLS option or variable cannot be used: its file is missing, unreadable or holds no
    PEM, or a client certificate comes without its key (or without a CA).

    Raised where the files are read, when a channel is opened (a Client's first call, each
    (re-)connect of an App), or by the constructor for options that cannot work. The message
    names the option (``tls_ca``, ``tls_cert``, ``tls_key``) or variable (``$TROUPE_TLS_CA``,
    ``$TROUPE_TLS_CERT``, ``$TROUPE_TLS_KEY``) and the path.

    Attributes:
        option: the option or variable at fault, e.g. ``"tls_ca"`` or ``"$TROUPE_TLS_CA"``.
        path: the file's path, or None when the error is not about one file.
    """

    def __init__(self, message: str, *, option: str, path: str | None = None) -> None:
        super().__init__(message)
        self.option = option
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial(type(self), option=self.option, path=self.path), self.args)


class ReadOnlyStateError(TroupeError):
    """A read-only method (``@troupe.method(readonly=True)``) tried to change ``self.state``.

    Raised inside the handler, at the write; if the handler lets it escape, its caller
    gets an :class:`ActorError` whose ``remote_type`` is ``"ReadOnlyStateError"``.
    """


class ActorError(TroupeError):
    """The actor's code raised an exception while handling the call.

    Attributes:
        remote_type: name of the exception type raised in the actor, e.g. ``"ValueError"``.
        message: the exception's message.
        kind: whether the method ran: ``"raised"`` (it did, and raised), or the caller's
            mistake, where nothing ran: ``"no-such-method"`` (the actor's type has no
            method of that name) or ``"bad-arguments"`` (the arguments could not be
            decoded or do not fit the method's parameters). ``None`` when the app's SDK
            does not say (one from before this attribute). Python and JavaScript name
            both a bad call and a bug in the method ``TypeError``; ``kind`` tells them
            apart.
        remote_traceback: where the actor raised it: the traceback (or JavaScript stack)
            its SDK sent, at most its last 4 KiB; ``""`` when it sent none. From Python
            3.11 it is also the exception's note, so an uncaught ``ActorError`` prints it.
    """

    def __init__(
        self,
        remote_type: str,
        message: str,
        kind: FailureKind | None = None,
        remote_traceback: str = "",
    ) -> None:
        super().__init__(f"{remote_type}: {message}" if message else remote_type)
        self.remote_type = remote_type
        self.message = message
        self.kind = kind
        self.remote_traceback = remote_traceback
        if remote_traceback and sys.version_info >= (3, 11):
            # Printed under the error when nobody catches it, so the caller's
            # traceback leads on to the line in the actor that raised.
            self.add_note(f"{_REMOTE_NOTE}\n{remote_traceback.rstrip()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.remote_type, self.message, self.kind, self.remote_traceback))


_BY_CODE: dict[grpc.StatusCode, type[TroupeError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Overloaded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}


def error_for_code(code: grpc.StatusCode | None, message: str) -> TroupeError:
    """The SDK exception for a gRPC status code (TroupeError for codes without their own)."""
    return _BY_CODE.get(code, TroupeError)(message) if code is not None else TroupeError(message)


def from_rpc_error(err: grpc.aio.AioRpcError, what: str, *, note: str = "") -> TroupeError:
    """Translate a gRPC status into the SDK's exception; `what` names the call for context,
    `note` is appended to the message (not to an ActorError's, which is the actor's own)."""
    code = err.code()
    details = err.details() or ""
    if code == grpc.StatusCode.UNKNOWN:
        # grpc.aio yields (key, value) pairs; the stubs describe the sync API's objects.
        trailers: Any = err.trailing_metadata() or ()
        found = {
            key: value.decode() if isinstance(value, bytes) else str(value)
            for key, value in trailers
            if key in (ERROR_TYPE_TRAILER, FAILURE_KIND_TRAILER, ERROR_DETAILS_TRAILER)
        }
        remote = found.get(ERROR_TYPE_TRAILER)
        if remote is not None:
            return ActorError(
                remote,
                details,
                _KINDS.get(found.get(FAILURE_KIND_TRAILER, "")),
                unquote(found.get(ERROR_DETAILS_TRAILER, ""), errors="replace"),
            )
    cls = _BY_CODE.get(code, TroupeError)
    name = code.name if code is not None else "UNKNOWN"
    message = f"{what}: {details} ({name})" if details else f"{what}: {name}"
    return cls(message + note)
