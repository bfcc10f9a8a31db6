"""What a failed turn tells the daemon: the exception as an ActorFailure, and whether the
method ran (its FailureKind) for the failures that are the caller's mistake."""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from ._errors import ActorError
from ._proto.troupe.v1 import common_pb2

_MAX_DETAILS = 8 * 1024


# Set on an exception that says the caller was at fault (nothing ran): its
# FailureKind. Any other exception the method raised.
_FAILURE_KIND_ATTR = "_troupe_failure_kind"


def callers_mistake(exc: BaseException, kind: common_pb2.FailureKind) -> None:
    setattr(exc, _FAILURE_KIND_ATTR, kind)


def failure(exc: BaseException) -> common_pb2.ActorFailure:
    # An ActorError from a nested call propagates like any exception up a stack:
    # the caller sees the type that was originally raised (and that this method
    # raised: a nested call's bad arguments are this method's bug).
    if isinstance(exc, ActorError):
        ty, message = exc.remote_type, exc.message
    else:
        ty, message = type(exc).__name__, str(exc)
    kind = getattr(exc, _FAILURE_KIND_ATTR, common_pb2.FAILURE_KIND_RAISED)
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return common_pb2.ActorFailure(
        type=ty, message=message, details=details[-_MAX_DETAILS:], kind=kind
    )


def bound(method: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``method`` called with the call's arguments, marking a TypeError that the call
    itself raised (the arguments do not bind: nothing of the method ran) as the
    caller's mistake, apart from one its body raised."""

    def call() -> Any:
        declared = _wrapped_signature(method)
        if declared is not None:
            # A decorator's ``(*args, **kwargs)`` wrapper takes anything: the
            # arguments are checked against the method it wraps before it runs.
            try:
                declared.bind(*args, **kwargs)
            except TypeError as e:
                callers_mistake(e, common_pb2.FAILURE_KIND_BAD_ARGUMENTS)
                raise
        try:
            return method(*args, **kwargs)
        except TypeError as e:
            # Raised here, not in a frame of the method: binding failed.
            if e.__traceback__ is not None and e.__traceback__.tb_next is None:
                callers_mistake(e, common_pb2.FAILURE_KIND_BAD_ARGUMENTS)
            raise

    return call


@functools.lru_cache(maxsize=1024)
def _declared(function: Callable[..., Any], of_instance: bool) -> inspect.Signature | None:
    """What ``function`` declares through its decorators (``inspect.signature`` follows
    ``__wrapped__``), without its first parameter when ``of_instance`` gives it."""
    try:
        declared = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    if of_instance:
        declared = declared.replace(parameters=list(declared.parameters.values())[1:])
    return declared


def _wrapped_signature(method: Callable[..., Any]) -> inspect.Signature | None:
    """The signature a method wrapped by a decorator (``functools.wraps`` sets
    ``__wrapped__``) declares, as its callers call it; None for a plain method, whose
    call binds its arguments itself."""
    function = getattr(method, "__func__", method)
    if getattr(function, "__wrapped__", None) is None:
        return None
    return _declared(function, function is not method)
