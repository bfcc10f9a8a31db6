"""The bookkeeping behind an actor's state view: what the daemon holds, which running turns
(and code outside turns) touched and wrote which key, and what each turn's end sends.

What a failed turn undoes is in ``_state_rollback.py``; the dict-like view users see is
``_state.State``. Kept in step with the TypeScript SDK's state_ledger.ts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableSet
from typing import Any

from ._payload import decode_state, encode_state
from ._proto.troupe.v1 import common_pb2
from ._state_writes import ABSENT, LOOSE, Writes
from ._turn import TurnScope

# When an author first touched a key, and the write it found then: (first, at, by).
Touch = tuple[int, int, object]
# A key no running turn touched.
NO_TOUCH: Touch = (0, 0, None)


class StateLedger:
    """One actor's state as this app holds it (``values``, the view's dict) and the record
    that tells, at the end of each turn, which changes are that turn's own."""

    def __init__(self, stored: Mapping[str, bytes]) -> None:
        # What the daemon holds, as far as this app knows: the baseline of every turn.
        self.stored: dict[str, bytes] = dict(stored)
        self.values: dict[str, Any] = {}
        for key, data in stored.items():
            try:
                self.values[key] = decode_state(data)
            except ValueError as e:
                raise ValueError(
                    f"stored value of state key {key!r} is not JSON ({e}); it was not written"
                    " by a troupe SDK, or the data dir holds another app's data"
                ) from None
        # Per key, how many running writing turns touched it: their changes are not
        # in stored yet, so a turn touching the key later snapshots the live value.
        self.writers: dict[str, int] = {}
        # Keys touched outside any running turn (when first: as turns has it, and the value
        # then, encoded, to tell changes made in place); the next writing turn sends them.
        self.loose: dict[str, tuple[int, int, object, bytes | None]] = {}
        # Of those, the keys assigned or deleted there (not only read). An expiry must not
        # drop such a key's value even when it equals the expired one: the daemon applies
        # the assignment after the expiry, setting the key again.
        self.loose_written: set[str] = set()
        # The expiries (ttl ms, 0: none) given outside any running turn, sent with loose.
        self.loose_ttls: dict[str, int] = {}
        # The running turns that touched a key, whose snapshots an expiry or a rollback
        # must reach, and when each first touched each key (writes ticks: then, and the
        # write it found, with its author: a failed author's writes are all undone).
        self.turns: dict[TurnScope, dict[str, Touch]] = {}
        # Who wrote which key lately, for a rollback to undo only its turn's writes.
        self.writes = Writes()

    def touch(self, key: str, scope: TurnScope | None, write: bool, value: Any = ABSENT) -> None:
        """Record that ``scope`` (None: code outside turns) reads ``key`` (or, with ``write``,
        sets it to ``value``; ABSENT: deletes it). Only touched keys are re-encoded at turn
        end, so a turn costs O(keys touched), not O(state size). Call it before changing the
        value; a read-only turn's writes are refused before this."""
        if scope is None:
            if key not in self.loose:
                snapshot = self.snapshot(key)
                self.loose[key] = (*self.writes.touch(key), snapshot)
            if write:
                self.loose_written.add(key)
                self.writes.wrote(key, LOOSE, value)
            return
        if key not in scope.snapshots:
            scope.snapshots[key] = self.snapshot(key)
            self.turns.setdefault(scope, {})[key] = self.writes.touch(key)
            if not scope.readonly:
                self.writers[key] = self.writers.get(key, 0) + 1
        if write:
            scope.written.add(key)
            self.writes.wrote(key, scope, value)

    def snapshot(self, key: str) -> bytes | None:
        """The value of ``key`` now, encoded (None: absent), as a turn first touching it
        finds it."""
        if not self.writers.get(key) and key not in self.loose:
            # Nobody has an unsent change of this key: the value is the stored one.
            return self.stored.get(key)
        if key not in self.values:
            return None
        try:
            return encode_state(key, self.values[key])
        except TypeError:
            return self.stored.get(key)

    def others_unsent(self, key: str) -> bool:
        """Whether an author besides the one at hand may hold an unsent change of ``key``: the
        value it found is then its snapshot, not the stored one."""
        return self.writers.get(key, 0) > 1 or key in self.loose

    def ttls(self, scope: TurnScope | None) -> dict[str, int]:
        """The expiries a writing turn (with no turn: code outside turns) sends: those given
        outside turns, which go with the next writing turn as loose changes do, and its own.
        A read-only turn sends none."""
        if scope is None:
            return dict(self.loose_ttls)
        if scope.readonly:
            return {}
        return {**self.loose_ttls, **scope.ttls}

    def changed(
        self,
        scope: TurnScope | None,
        ttls: Mapping[str, int],
        held_back: dict[str, int | None] | None = None,
        kept: MutableSet[str] | None = None,
    ) -> dict[str, bytes | None]:
        """The keys whose value differs from the daemon's because of this turn (or, without a
        turn, of code outside turns), encoded; None means deleted. A key with an expiry in
        ``ttls`` counts while it has a value, changed or not: its expiry must be sent.

        A writing turn also sends what code outside turns changed. Each sends only its own
        writes: a key another running author wrote later goes as the senders last wrote it
        (the later write is its author's to send, and to undo), recorded in ``held_back``
        with the time of the write sent, None if none is (a commit since replaced theirs).
        A key only read counts when changed in place since first touched, not by another
        author's write: a nested turn does not send the outer turn's unsent changes, and a
        read-only turn is not refused for another's write (``held_back`` None otherwise).
        A change made in place outside turns under another running author's later write
        goes in ``kept``: it is sent once that author is done, or undone with it.
        Raises TypeError if a value cannot be encoded.
        """
        authors = _authors(scope)
        loose = LOOSE in authors
        if scope is None:
            keys: Iterable[str] = sorted(self.loose)
        elif loose and self.loose:
            keys = sorted({*self.loose, *scope.snapshots})
        else:
            keys = sorted(scope.snapshots)
        out: dict[str, bytes | None] = {}
        for key in keys:
            base = self.stored.get(key)
            assigned = (scope is not None and key in scope.written) or (
                loose and key in self.loose_written
            )
            held = self.writes.held_back(key, authors) if assigned else None
            if held is not None:
                if held_back is not None:
                    held_back[key] = held[0]
                if held[0] is None:
                    continue
                current = None if held[1] is ABSENT else encode_state(key, held[1])
            else:
                current = encode_state(key, self.values[key]) if key in self.values else None
            if current is not None and key in ttls:
                out[key] = current
                continue
            if assigned:
                if current != base:
                    out[key] = current
                continue
            # Only read: sent if changed in place since first touched, unless another
            # author's write is what changed it. Else the view's value is not theirs.
            touched = self.loose.get(key) if loose else None
            snapshots = scope.snapshots if scope is not None else {}
            changed = current != base and (
                (key in snapshots and current != snapshots[key])
                or (touched is not None and current != touched[3])
            )
            if changed or touched is not None:
                firsts = [touched[0]] if touched is not None else []
                if scope is not None and key in snapshots:
                    firsts.append(self.turns.get(scope, {}).get(key, NO_TOUCH)[0])
                if not self.writes.overwritten(key, authors, min(firsts)):
                    if changed:
                        out[key] = current
                        continue
                elif kept is not None and touched is not None:
                    # What was changed outside turns, if anything, lies under another
                    # author's write: it is known once that one is sent or undone.
                    kept.add(key)
            if held_back is not None and touched is not None:
                held_back[key] = None
        return out

    def commit(self, scope: TurnScope | None = None) -> list[common_pb2.StateChange]:
        """Return the changes of a writing turn (with no turn: of code outside turns) and make
        them the new baseline.

        A key given an expiry (``State.set``, or a delete then a set) carries it in ``ttl_ms``;
        any other ``set`` leaves ``ttl_ms`` unset, so the daemon keeps the key's expiry.
        Raises TypeError (leaving the baseline untouched) if a value cannot be encoded.
        """
        ttls = self.ttls(scope)
        held_back: dict[str, int | None] = {}
        kept: set[str] = set()
        encoded = self.changed(scope, ttls, held_back, kept)
        # The daemon now holds the view's value of these keys, whoever wrote it (or the
        # write held back): a failed turn must not undo that, only its own writes after.
        for key in {*encoded, *self.loose, *(scope.written if scope is not None else ())}:
            own = scope is not None and key in scope.snapshots
            watched = self.writers.get(key, 0) > (1 if own else 0)
            if key not in held_back:
                self.writes.committed(key, watched)
            elif (at := held_back[key]) is not None:
                self.writes.committed(key, watched, at)
        for key, value in encoded.items():
            if value is None:
                self.stored.pop(key, None)
            else:
                self.stored[key] = value
        if kept:
            self.loose = {key: self.loose[key] for key in kept}
        else:
            self.loose.clear()
        self.loose_written.clear()
        self.loose_ttls.clear()
        if scope is not None:
            scope.ttls.clear()
        return _to_changes(encoded, ttls)

    def refuse(self, scope: TurnScope) -> list[common_pb2.StateChange]:
        """End a read-only turn: undo any in-place change it made and return those changes.

        Sent with the turn's result they make the daemon refuse it with
        FAILED_PRECONDITION, naming the keys; here the view is back to the daemon's.
        """
        try:
            encoded = {k: v for k, v in self.changed(scope, {}).items() if k in scope.snapshots}
        except TypeError:
            # A value that no longer encodes was certainly changed; undo every key read.
            encoded = {k: self.stored.get(k) for k in scope.snapshots}
        for key in encoded:
            self.restore(key, scope.snapshots[key])
        return _to_changes(encoded, {})

    def end(self, scope: TurnScope) -> None:
        """The turn is over: later touches from tasks it started are not its own."""
        scope.live = False
        self.turns.pop(scope, None)
        if scope.readonly:
            return
        for key in scope.snapshots:
            left = self.writers.get(key, 0) - 1
            if left > 0:
                self.writers[key] = left
            else:
                self.writers.pop(key, None)
            self.writes.ended(key, scope, left > 0)

    def expire(self, keys: Iterable[str]) -> None:
        """Drop keys the daemon let expire (``Turn.expired_keys``; it has deleted them), before
        the turn that reports them runs.

        Each leaves the baseline. Its value goes too, unless a change of it is still unsent
        (a running turn or code outside turns assigned it, even the value it had, and no
        commit replaced that since, or changed it in place): the daemon applies that change
        after the expiry, setting the key again, so the value stays and is sent as usual.
        Running turns that saw the expired value now see it as absent when they first
        touched the key, so a failed one does not bring the value back.
        """
        for key in keys:
            old = self.stored.pop(key, None)
            if old is None:
                # Not in the daemon's state as far as this app knows: anything here is unsent.
                continue
            if not self.unsent(key, old):
                self.values.pop(key, None)
            for scope in self.turns:
                if scope.snapshots.get(key) == old:
                    scope.snapshots[key] = None

    def unsent(self, key: str, stored: bytes) -> bool:
        """Whether ``key`` has a change not sent yet, its daemon value being ``stored``."""
        if key not in self.values:
            return False
        # An assignment, even of the value the key had, sets the key again after the expiry;
        # not one that a commit since replaced, whose value the daemon held and let expire.
        if self.writes.unsent(key):
            return True
        if not self.writers.get(key) and key not in self.loose:
            return False
        try:
            return encode_state(key, self.values[key]) != stored
        except TypeError:
            # A value that no longer encodes was certainly changed.
            return True

    def restore(self, key: str, data: bytes | None) -> None:
        if data is None:
            self.values.pop(key, None)
        else:
            self.values[key] = decode_state(data)


def _authors(scope: TurnScope | None) -> tuple[object, ...]:
    """Whose writes the end of ``scope`` (None: code outside turns) sends: its own, and
    those made outside turns, which go with a writing turn."""
    if scope is None:
        return (LOOSE,)
    return (scope,) if scope.readonly else (scope, LOOSE)


def _to_changes(
    encoded: Mapping[str, bytes | None], ttls: Mapping[str, int]
) -> list[common_pb2.StateChange]:
    """The changes to send: each key's encoded value (None: deleted), a set with its
    ``ttl_ms`` from ``ttls`` if any. As the TypeScript SDK's ``toChanges``."""
    changes: list[common_pb2.StateChange] = []
    for key, value in encoded.items():
        if value is None:
            changes.append(common_pb2.StateChange(key=key, delete=True))
        else:
            change = common_pb2.StateChange(key=key, set=value)
            if key in ttls:
                change.ttl_ms = ttls[key]
            changes.append(change)
    return changes
