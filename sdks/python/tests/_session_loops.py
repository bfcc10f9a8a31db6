"""Test support: an app session's read and write loops running on a fake Attach stream,
for unit tests of the app stream without the daemon."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from troupe._session import _Session


@contextlib.asynccontextmanager
async def loops_on(session: _Session, stream: object) -> AsyncIterator[None]:
    """Runs ``session``'s loops on ``stream`` (with ``read`` and ``write`` as the real
    stream's) until the block ends, then cancels them and the tasks they started."""
    loops = [
        asyncio.create_task(session._read_loop(stream)),  # type: ignore[arg-type]
        asyncio.create_task(session._write_loop(stream)),  # type: ignore[arg-type]
    ]
    try:
        yield
    finally:
        for task in loops:
            task.cancel()
        for task in list(session.tasks):
            task.cancel()
        await asyncio.gather(*loops, *session.tasks, return_exceptions=True)
