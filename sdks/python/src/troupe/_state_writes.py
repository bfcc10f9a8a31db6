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

    def committed(self, key: str, watched: bool, held_back: int | None = None) -> None:
        """The daemon now holds the view's value of ``key``: no rollback goes behind it.
        ``watched``: a running writing turn touched the key (only their rollbacks look).
        ``held_back``: it holds the write of that time instead (:meth:`held_back`); the
        later writes, not sent, stay."""
        writes = self._keys.get(key, {})
        if held_back is not None:
            later = {who: write for who, write in writes.items() if write[0] > held_back}
            self._keys[key] = {COMMITTED: (held_back, None), **later}
        elif watched:
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

    def unsent(self, key: str) -> bool:
        """Whether a running author's write of ``key`` is kept that no commit has sent or
        replaced since."""
        return any(who != COMMITTED for who in self._keys.get(key, ()))

    def latest(self, key: str) -> tuple[int, object]:
        """The latest write of ``key`` kept: when, and by whom ((0, None): none is kept). What
        a turn touching the key now finds, for :meth:`undo` to tell whether that write was
        undone since."""
        writes = self._keys.get(key)
        if not writes:
            return 0, None
        who, (at, _) = next(reversed(writes.items()))
        return at, who

    def overwritten(self, key: str, authors: tuple[object, ...], since: int) -> bool:
        """Whether an author other than ``authors`` (a running turn, or code outside turns)
        wrote ``key`` after ``since``. A value that changed so is that author's change: only
        it sends the write, and only its rollback undoes it."""
        writes = self._keys.get(key)
        return writes is not None and any(
            at > since for who, (at, _) in writes.items() if who not in authors and who != COMMITTED
        )

    def held_back(self, key: str, authors: tuple[object, ...]) -> tuple[int | None, Any] | None:
        """What a commit by ``authors`` sends of ``key`` when another running turn (or code
        outside turns) wrote it after them: their latest write, as (when, value), or
        (None, _) when a commit since replaced their writes. None: the view's value is
        theirs to send."""
        writes = self._keys.get(key)
        if writes is None or len(writes) < 2:
            return None  # one author alone: nobody wrote after it
        mine = None
        for who, write in writes.items():  # oldest first
            if who in authors or (mine is None and who == COMMITTED):
                mine = (who, write)
        if mine is None or not self.overwritten(key, authors, mine[1][0]):
            return None
        who, (at, value) = mine
        return (None, None) if who == COMMITTED else (at, value)

    def beneath(self, key: str, at: int) -> tuple[object, int, Any] | None:
        """The latest write of ``key`` kept from before time ``at``: (who, when, value)."""
        below = None
        for who, write in self._keys.get(key, {}).items():  # oldest first
            if write[0] < at:
                below = (who, *write)
        return below

    def touch(self, key: str) -> tuple[int, int, object]:
        """A turn first touches ``key``: now, and the write it finds (see :meth:`undo`): when,
        and by whom (None: none is kept)."""
        self._clock += 1
        writes = self._keys.get(key)
        if not writes:
            return self._clock, 0, None
        who, (at, _) = next(reversed(writes.items()))
        return self._clock, at, who

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
