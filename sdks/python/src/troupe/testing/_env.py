"""One test's view of a test daemon: apps hosting the actor classes under
test in this process, a client, state reads and writes, and the clock.

A :class:`TestEnv` owns what it starts (apps, client) and stops it in
:meth:`TestEnv.aclose`; the daemon is given to it, and whether the env may
move that daemon's clock (only when the daemon is the test's alone) too.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, overload

from .._actor import Actor, spec_of
from .._app import App
from .._client import Client
from .._duration import DurationLike
from .._filters import CallFilter
from .._payload import encode_state
from .._proxy import A, ActorProxy
from .._state import _ttl_ms
from ._daemon import Advanced, Duration, TestDaemon, TestDaemonError

# How long hosting waits for the daemon to accept the app's types.
_REGISTER_TIMEOUT = 30.0


class _KeepExpiry(enum.Enum):
    """``set_state``'s ttl when none is given: unlike ``ttl=None``, which ends a key's
    expiry, this leaves each key the expiry it has, as ``state[key] = value`` does."""

    KEEP = "keep"

    def __repr__(self) -> str:
        return "<keep each key's expiry>"


class TestEnv:
    """Host actors, call them, read their state and move the clock, on ``daemon``.

    ``owns_clock``: whether :meth:`advance` may move the daemon's clock. The
    clock is the daemon's, shared by every test on it: a test sharing a daemon
    cannot move it without firing other tests' reminders, so only an env on a
    daemon of its own may (the ``troupe_env`` fixture; ``troupe_shared_env``
    refuses).
    """

    __test__ = False

    def __init__(self, daemon: TestDaemon, *, owns_clock: bool = True, timeout: float = 30.0):
        self.daemon = daemon
        self.client = Client(daemon.address, timeout=timeout)
        """A client of the daemon; every call waits at most ``timeout`` seconds."""
        self._owns_clock = owns_clock
        self._apps: list[tuple[App, asyncio.Task[None]]] = []

    async def host(self, *actors: type[Actor], filters: Sequence[CallFilter] = ()) -> App:
        """Host ``actors`` in this process (an :class:`App` on the daemon, with the call
        ``filters`` it is given) until the env closes; returns once the daemon accepted
        their types."""
        app = App(
            list(actors), address=self.daemon.address, max_reconnect_delay=0.2, filters=filters
        )
        task = asyncio.create_task(app.run(), name=f"troupe test app {app.app_name}")
        self._apps.append((app, task))
        registered = asyncio.create_task(app.wait_registered())
        done, _ = await asyncio.wait(
            {task, registered}, timeout=_REGISTER_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if registered in done:
            return app
        registered.cancel()
        if task in done:
            task.result()  # raises why the app stopped (a refused registration)
        raise TestDaemonError(
            f"the daemon did not register {', '.join(spec_of(a).name for a in actors)} within "
            f"{_REGISTER_TIMEOUT}s; its log:\n{self.daemon.log()}"
        )

    @overload
    def actor(self, actor_type: type[A], actor_id: str) -> ActorProxy[A]: ...

    @overload
    def actor(self, actor_type: str, actor_id: str) -> ActorProxy[Any]: ...

    def actor(self, actor_type: str | type[Actor], actor_id: str) -> ActorProxy[Any]:
        """A proxy to call one actor: ``await env.actor(Cart, "c1").add("apple", 2)``, or
        type-checked, ``await env.actor(Cart, "c1").call(Cart.add, "apple", 2)``."""
        return self.client.actor(_type_name(actor_type), actor_id)

    async def state(
        self, actor_type: str | type[Actor], actor_id: str, *keys: str
    ) -> dict[str, Any]:
        """The actor's state as stored (every key, or only ``keys``), without running a turn."""
        return await self.client.get_state(_type_name(actor_type), actor_id, keys)

    async def set_state(
        self,
        actor_type: str | type[Actor],
        actor_id: str,
        values: Mapping[str, Any] | None = None,
        *,
        delete: Sequence[str] = (),
        ttl: DurationLike | _KeepExpiry | None = _KeepExpiry.KEEP,
    ) -> None:
        """Give an actor state without running a turn, as a test's starting point (a cart
        with items, a device that went silent a week ago): each of ``values`` is stored as
        the actor's own writes store it, the keys in ``delete`` go, other keys stay. An
        active actor is deactivated first, so its next turn starts on this state.

        ``ttl`` gives every key in ``values`` an expiry, counted from this edit, as
        ``self.state.set(key, value, ttl=...)`` does from a turn, and read as it reads it
        (``"1h"``, seconds as a number, a ``timedelta``; at least a second): ``ttl="1h"``
        then ``advance("1h")`` and the keys are gone. ``ttl=None`` ends the keys' expiry;
        without ``ttl`` each key keeps the expiry it has (none for a new key).

        Raises ValueError for a ttl under a second, :class:`troupe.InvalidArgument` for one
        that is not a duration, and TypeError for a ttl without ``values``, each before
        anything changes."""
        ttl_ms: int | None = None
        if ttl is not _KeepExpiry.KEEP:
            if not values:
                raise TypeError(
                    "set_state's ttl expires the keys in values, and no values were given;"
                    " pass the keys to expire with their values (a deleted key's expiry ends"
                    " with it), or drop ttl"
                )
            ttl_ms = _ttl_ms(ttl)
        encoded = {key: encode_state(key, value) for key, value in (values or {}).items()}
        if not encoded and not delete:
            raise TypeError("set_state needs values to store or keys to delete")
        await self.daemon.edit_state(_type_name(actor_type), actor_id, encoded, delete, ttl_ms)

    async def deactivate(self, actor_type: str | type[Actor], actor_id: str) -> bool:
        """End the actor's activation now, as its idle timeout would: its running turn
        finishes, ``on_deactivate`` runs and its state is stored; the next call activates
        it again. For testing deactivation hooks and a type's ``retention``. False if the
        actor was not active."""
        return await self.daemon.deactivate(_type_name(actor_type), actor_id)

    async def advance(self, by: Duration) -> Advanced:
        """Move the clock forward by ``by`` (seconds, a timedelta or "720h"): every reminder,
        alarm and timer due on the way fires in due order, and this returns once their turns
        ran, so the state they left can be asserted at once."""
        if not self._owns_clock:
            raise TestDaemonError(
                "this test shares its daemon, whose clock is every test's: moving it would fire "
                "other tests' reminders. Use the troupe_env fixture (a daemon of the test's own) "
                "to move time."
            )
        return await self.daemon.advance(by)

    @staticmethod
    def unique_id(prefix: str = "") -> str:
        """A fresh actor id, so tests sharing a daemon never meet each other's actors."""
        return f"{prefix}{uuid.uuid4().hex[:12]}"

    async def aclose(self) -> None:
        """Stop the apps this env started and close its client."""
        apps, self._apps = self._apps, []
        for app, task in apps:
            app.stop()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10)
        await self.client.close()

    async def __aenter__(self) -> TestEnv:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


def _type_name(actor_type: str | type[Actor]) -> str:
    return actor_type if isinstance(actor_type, str) else spec_of(actor_type).name
