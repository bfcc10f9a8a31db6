"""The pytest plugin of :mod:`troupe.testing` (registered as ``pytest11`` entry
point ``troupe``): the ``troupe_daemon``, ``troupe_env`` and
``troupe_shared_env`` fixtures.

Loaded by every pytest run in an environment with troupe installed, so it
imports nothing heavy and fails only the tests that use its async fixtures
when pytest-asyncio is missing.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterator

import pytest

from ._daemon import TestDaemon
from ._env import TestEnv


@pytest.fixture(scope="session")
def troupe_daemon() -> Iterator[TestDaemon]:
    """One test daemon for the whole session (state and clock shared by its tests)."""
    with TestDaemon.start() as daemon:
        yield daemon


if importlib.util.find_spec("pytest_asyncio") is not None:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def troupe_env() -> AsyncIterator[TestEnv]:
        """A daemon of this test's own: fresh state, and a clock only this test moves."""
        with TestDaemon.start() as daemon:
            async with TestEnv(daemon, owns_clock=True) as env:
                yield env

    @pytest_asyncio.fixture
    async def troupe_shared_env(troupe_daemon: TestDaemon) -> AsyncIterator[TestEnv]:
        """An env on the session's daemon: cheaper, but state is shared (use unique ids)
        and the clock cannot be moved."""
        async with TestEnv(troupe_daemon, owns_clock=False) as env:
            yield env

else:

    @pytest.fixture
    def troupe_env() -> None:
        pytest.fail("troupe_env is async and needs pytest-asyncio: pip install pytest-asyncio")

    @pytest.fixture
    def troupe_shared_env() -> None:
        pytest.fail(
            "troupe_shared_env is async and needs pytest-asyncio: pip install pytest-asyncio"
        )
