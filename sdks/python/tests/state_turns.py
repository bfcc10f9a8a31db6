"""Running a block as a turn of a State, for the state tests that need no daemon."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from troupe import State
from troupe._turn import TurnScope, current_turn


@contextlib.contextmanager
def in_turn(state: State, name: str = "turn") -> Iterator[TurnScope]:
    """Runs the block as a writing turn of ``state`` named ``name``."""
    scope = TurnScope(state, "t/1", name)
    token = current_turn.set(scope)
    try:
        yield scope
    finally:
        current_turn.reset(token)
