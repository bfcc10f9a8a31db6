"""Testing actors against a real daemon, with a clock the test moves.

As a pytest plugin (installed with the package; needs pytest-asyncio)::

    async def test_abandoned_cart(troupe_env: TestEnv) -> None:
        await troupe_env.host(Cart)
        await troupe_env.actor(Cart, "c1").add("apple", 2)
        await troupe_env.advance(timedelta(days=30))
        assert await troupe_env.state(Cart, "c1") == {}

Fixtures: ``troupe_env`` (a daemon of the test's own, whose clock it may
move), ``troupe_shared_env`` (the session's daemon; use :meth:`TestEnv.unique_id`
for actor ids; the clock cannot be moved) and ``troupe_daemon`` (that session
daemon). Without pytest, :class:`TestDaemon` and :class:`TestEnv` work as
context managers. See docs/testing.md.
"""

from ._daemon import Advanced, Duration, TestDaemon, TestDaemonError
from ._env import TestEnv

__all__ = ["Advanced", "Duration", "TestDaemon", "TestDaemonError", "TestEnv"]
