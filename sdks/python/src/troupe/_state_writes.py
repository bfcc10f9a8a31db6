"""Who wrote each state key lately: what a failed turn's rollback must keep.

Turns of one actor can run at once (a reentrant actor called back by a chain it waits on),
and code outside turns (a task that outlived its turn) can write too. The daemon discards
only a failed turn's own changes, so the view must too: a key another author wrote after
the failed turn first touched it keeps that write, which the daemon holds or will get from
its author. Kept in step with the TypeScript SDK's state_writes.ts.
"""

from __future__ import annotations

from typing import Any

# Authors besides the turns (a TurnScope each): code outside any running turn, and a commit
# (the daemon then held the view's value, whoever wrote it).
LOOSE = "loose"
COMMITTED = "committed"
# What a deletion wrote.
ABSENT: Any = object()


class Writes:
    """Per key, the latest write of each author, oldest first, timed on a clock that also
    times when turns first touch keys (:meth:`tick`)."""

    def __init__(self) -> None:
        self._clock = 0
        self._keys: dict[str, dict[object, tuple[int, Any]]] = {}

    def tick(self) -> int:
        self._clock += 1
        return self._clock

    def wrote(self, key: str, author: object, value: Any) -> None:
        writes = self._keys.setdefault(key, {})
        writes.pop(author, None)  # its latest write goes last
        writes[author] = (self.tick(), value)

    def committed(self, key: str, watched: bool) -> None:
        """The daemon now holds the view's value of ``key``: no rollback goes behind it.
        ``watched``: a running writing turn touched the key (only their rollbacks look)."""
        if watched:
            self._keys[key] = {COMMITTED: (self.tick(), None)}
        else:
            self._keys.pop(key, None)

    def ended(self, key: str, turn: object, watched: bool) -> None:
        """``turn``, which touched ``key``, is over; ``watched`` as for :meth:`committed`.
        Writes made outside turns stay until a commit sends them."""
        writes = self._keys.get(key)
        if writes is not None:
            writes.pop(turn, None)
            if not writes or (not watched and LOOSE not in writes):
                del self._keys[key]

    def found(self, key: str) -> int:
        """When the latest write of ``key`` was (0: none is kept): what a turn touching the
        key now finds, for :meth:`undo` to tell whether that write was undone since."""
        writes = self._keys.get(key)
        return next(reversed(writes.values()))[0] if writes else 0

    def touch(self, key: str) -> tuple[int, int]:
        """A turn first touches ``key``: now, and the write it finds (see :meth:`undo`)."""
        return self.tick(), self.found(key)

    def undo(
        self, key: str, author: object, first: int, found: int
    ) -> tuple[int, object, Any] | None:
        """Forget ``author``'s write of ``key``, which it first touched at ``first`` finding
        the write of time ``found``, and say what the key goes back to.

        None: it keeps its value, another author's write made since (``author`` did not write
        the key again after it). Else ``(since, who, value)``: back to the write of ``value``
        by ``who`` (for COMMITTED, the stored value), the latest before ``author``'s own, or,
        with ``who`` None, to what ``author`` found; turns that first touched the key after
        ``since`` saw ``author``'s change.
        """
        writes = self._keys.get(key, {})
        mine = writes.pop(author, None)
        if not writes:
            self._keys.pop(key, None)
            # What it found was written by a turn that failed since: back to the stored value.
            return first, None if found == 0 else COMMITTED, None
        who, (at, value) = next(reversed(writes.items()))
        if at > first:
            if mine is not None and mine[0] > at:
                return mine[0], who, value
            # Another author's write stands; a commit is what the daemon holds, without any
            # change ``author`` made in place since.
            return (at, who, value) if who == COMMITTED else None
        # What it found stands: its snapshot holds that and changes made in place before it.
        # Code outside turns keeps no snapshot.
        return (first, None, None) if at == found and author != LOOSE else (first, who, value)
