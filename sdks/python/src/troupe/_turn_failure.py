"""What a failed turn tells the daemon: the exception as an ActorFailure, and whether the
method ran (its FailureKind) for the failures that are the caller's mistake."""

from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from ._errors import ActorError
from ._proto.troupe.v1 import common_pb2

# A failure's traceback, as callers see it: its end (the raising line) last, within
# what the daemon passes on whole (4 KiB percent-encoded; it keeps the end of more).
_MAX_DETAILS = 3 * 1024


# Set on an exception that says the caller was at fault (nothing ran): its
# FailureKind. Any other exception the method raised.
_FAILURE_KIND_ATTR = "_troupe_failure_kind"


# The SDK's own frames that run a turn (read from the stream, dispatch, await the
# handler) lead every traceback and say nothing about the actor: callers see the
# traceback from the actor's first frame on.
_SDK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def from_the_actor(exc: BaseException) -> TracebackType | None:
    """``exc``'s traceback from its first frame outside this SDK; all of it when every
    frame is the SDK's (a call whose arguments did not bind)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_SDK_DIR):
        tb = tb.tb_next
    return tb if tb is not None else exc.__traceback__


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
    details = "".join(traceback.format_exception(type(exc), exc, from_the_actor(exc)))
    return common_pb2.ActorFailure(
        type=ty, message=message, details=details[-_MAX_DETAILS:], kind=kind
    )


def bound(
    method: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    declared: inspect.Signature | None = None,
) -> Any:
    """``method`` called with the call's arguments, marking a TypeError that the call
    itself raised (the arguments do not bind: nothing of the method ran) as the
    caller's mistake, apart from one its body raised. ``declared`` is what a method behind
    a decorator declares (:func:`declared_signature`), checked before the wrapper runs."""

    def call() -> Any:
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


def declared_signature(value: Any) -> inspect.Signature | None:
    """What a class attribute that is a method behind a decorator (``functools.wraps``
    sets ``__wrapped__``) declares, as its callers call it (without ``self``, or ``cls``
    for a classmethod); None for a plain method, whose call binds its arguments itself.
    Read once per method when its actor type is declared."""
    function = getattr(value, "__func__", value)  # a staticmethod's or classmethod's
    if getattr(function, "__wrapped__", None) is None:
        return None
    try:
        declared = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    if isinstance(value, staticmethod):
        return declared
    return declared.replace(parameters=list(declared.parameters.values())[1:])
