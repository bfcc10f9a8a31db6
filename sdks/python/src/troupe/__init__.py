"""Troupe: virtual actors hosted by the ``troupe`` sidecar daemon.

Host actors::

    @troupe.actor("counter")
    class Counter(troupe.Actor):
        @troupe.method
        async def incr(self, by: int = 1) -> int:
            self.state["count"] = self.state.get("count", 0) + by
            return self.state["count"]

    troupe.App(actors=[Counter]).run_forever()

Call them::

    async with troupe.Client() as client:
        await client.actor("counter", "c1").incr(by=5)

Schedule work (durable reminders, one alarm per actor, in-memory timers) by
overriding ``on_reminder(name, data)``, ``on_alarm(data)`` and
``on_timer(name, data)`` and setting them with ``self.ctx.set_reminder(...)``
or ``client.set_reminder(type, id, ...)``; see docs/scheduling.md.

Publish events from a turn with ``self.ctx.publish(value)``; watch them with
``async with client.watch(type, id) as events: async for event in events: ...``
(:class:`ActorEvent`; resume with ``after=event.cursor``); see docs/events.md.

A daemon that requires tokens gets them from ``Client(token=...)`` /
``token_file=...`` or ``$TROUPE_API_TOKEN``, and ``App(token=...)`` /
``token_file=...`` or ``$TROUPE_APP_TOKEN``; a missing or wrong one raises
:class:`Unauthenticated`. A daemon with TLS on is reached with ``tls_ca=`` (or
``$TROUPE_TLS_CA``), and ``tls_cert=`` / ``tls_key=`` when it requires client
certificates; an unusable TLS file raises :class:`TlsConfigError`.
"""

from ._actor import Actor, actor, method
from ._address import API_VERSION, SDK_VERSION
from ._app import App
from ._client import Client
from ._context import Context
from ._daemon import DaemonNotFound, daemon_path
from ._errors import (
    ActorError,
    ApiVersionMismatch,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    ReadOnlyStateError,
    TlsConfigError,
    TroupeError,
    Unauthenticated,
    Unavailable,
)
from ._events import ActorEvent, Watch
from ._filters import CallFilter, IncomingCall, Next
from ._proxy import ActorProxy
from ._retry import RetryBudget
from ._schedule import Reminder, RetryPolicy
from ._state import State
from ._sync_client import SyncClient
from ._sync_handles import SyncActorProxy, SyncWatch

__version__ = SDK_VERSION

__all__ = [
    "API_VERSION",
    "Actor",
    "ActorError",
    "ActorEvent",
    "ActorProxy",
    "ApiVersionMismatch",
    "App",
    "CallFilter",
    "Client",
    "Context",
    "DaemonNotFound",
    "DeadlineExceeded",
    "FailedPrecondition",
    "IncomingCall",
    "InvalidArgument",
    "Next",
    "NotFound",
    "Overloaded",
    "ReadOnlyStateError",
    "Reminder",
    "RetryBudget",
    "RetryPolicy",
    "State",
    "SyncActorProxy",
    "SyncClient",
    "SyncWatch",
    "TlsConfigError",
    "TroupeError",
    "Unauthenticated",
    "Unavailable",
    "Watch",
    "__version__",
    "actor",
    "daemon_path",
    "method",
]

# Errors print as users name them, `troupe.ActorError: ...` rather than
# `troupe._errors.ActorError: ...`, in tracebacks and reprs, and pickle by
# that name too.
for _name in __all__:
    _exported = globals()[_name]
    if isinstance(_exported, type) and issubclass(_exported, BaseException):
        _exported.__module__ = __name__
del _name, _exported
