"""What a failed turn undoes in an actor's state view, and what the turns that saw its
writes find instead.

The daemon discards only a failed turn's own changes, so the view must too: each key goes
back to the write beneath the failed author's, unless another author wrote it since
(:meth:`Writes.undo`); turns and code outside turns that found one of the failed author's
writes now find what they would have without it. Kept in step with the TypeScript SDK's
state_rollback.ts.
"""

from __future__ import annotations

from ._payload import encode_state
from ._state_ledger import NO_TOUCH, StateLedger, Touch
from ._state_writes import ABSENT, COMMITTED, LOOSE
from ._turn import TurnScope

# What a turn finds: the value (encoded; None: absent), when it was written, and by whom.
_Found = tuple[bytes | None, int, object]
# What _found_instead leaves as it was.
_UNCHANGED: _Found = (None, -1, None)


def rollback(ledger: StateLedger, scope: TurnScope | None) -> None:
    """Undo what a failed turn (with no turn: code outside turns) changed: see _undo."""
    if scope is None:
        for key, (first, _, _, _) in ledger.loose.items():
            _undo(ledger, key, LOOSE, (first, 0, None), ledger.stored.get(key))
        ledger.loose.clear()
        ledger.loose_written.clear()
        ledger.loose_ttls.clear()
        return
    if scope.readonly:
        ledger.refuse(scope)
        return
    scope.ttls.clear()
    firsts = ledger.turns.get(scope, {})
    for key, snapshot in scope.snapshots.items():
        _undo(ledger, key, scope, firsts.get(key, NO_TOUCH), snapshot)


def _undo(
    ledger: StateLedger, key: str, author: object, touch: Touch, snapshot: bytes | None
) -> None:
    """Undo what ``author`` did to ``key``, which it first touched at ``touch``: back to
    what it found (``snapshot``), unless another author wrote the key since
    (:meth:`Writes.undo`). Turns that touched the key after the change saw the result.
    """
    back = ledger.writes.undo(key, author, touch[0], touch[1])
    if back is None:
        _found_instead(ledger, key, author, touch, snapshot)
        return
    since, who, value = back
    data = ledger.stored.get(key)
    if who is None and ledger.others_unsent(key):
        data = snapshot  # what it found holds others' unsent changes
    if who is None or who == COMMITTED:
        ledger.restore(key, data)
    else:
        if value is ABSENT:
            ledger.values.pop(key, None)
        else:
            ledger.values[key] = value
        try:
            data = None if value is ABSENT else encode_state(key, value)
        except TypeError:
            return  # its author cannot send it either: that turn fails too
    _found_instead(ledger, key, author, touch, snapshot, since, data)


def _found_instead(
    ledger: StateLedger,
    key: str,
    author: object,
    touch: Touch,
    snapshot: bytes | None,
    since: int | None = None,
    data: bytes | None = None,
) -> None:
    """``author``'s writes of ``key`` are undone: turns (and code outside turns) that
    found one of them now found what they would have without it, and those that first
    touched the key after ``since`` (the view went back to ``data`` then) find ``data``.
    ``touch`` and ``snapshot`` are ``author``'s."""
    latest = ledger.writes.latest(key)

    def found_instead(first: int, by: object) -> _Found:
        if by is author:
            return _found_before(ledger, key, first, touch, snapshot)
        if since is not None and first > since:
            return data, *latest
        return _UNCHANGED

    for turn, firsts in ledger.turns.items():
        first, _, by = firsts.get(key, NO_TOUCH)
        if turn is not author and first != 0:
            instead = found_instead(first, by)
            if instead is not _UNCHANGED:
                turn.snapshots[key] = instead[0]
                firsts[key] = (first, instead[1], instead[2])
    touched = ledger.loose.get(key)
    if author != LOOSE and touched is not None:
        instead = found_instead(touched[0], touched[2])
        if instead is not _UNCHANGED:
            ledger.loose[key] = (touched[0], instead[1], instead[2], instead[0])


def _found_before(
    ledger: StateLedger, key: str, first: int, touch: Touch, snapshot: bytes | None
) -> _Found:
    """What a turn first touching ``key`` at ``first`` finds now that the writes of the
    author that touched it at ``touch`` finding ``snapshot`` are undone: the latest write
    kept from before it, or else what that author found."""
    below = ledger.writes.beneath(key, first)
    if below is None or below[1] < touch[0]:
        found = snapshot if ledger.others_unsent(key) else ledger.stored.get(key)
        return found, touch[1], touch[2]
    who, at, value = below
    if who == COMMITTED or value is ABSENT:
        return (ledger.stored.get(key) if who == COMMITTED else None), at, who
    try:
        return encode_state(key, value), at, who
    except TypeError:
        return _UNCHANGED  # its author cannot send it either: that turn fails too
