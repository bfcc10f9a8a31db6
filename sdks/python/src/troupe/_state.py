"""The dict-like view of an actor's state and the bookkeeping that turns it into changes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping, MutableSet
from typing import Any

from ._duration import DurationLike, to_millis
from ._errors import ReadOnlyStateError
from ._payload import decode_state, encode_state
from ._proto.troupe.v1 import common_pb2
from ._state_writes import ABSENT, COMMITTED, LOOSE, Writes
from ._turn import TurnScope, current_turn

# The daemon's lower bound on a key's ttl (it refuses a shorter one with the whole turn).
_MIN_TTL_MS = 1_000
# The daemon keeps the expiry times under this key and the keys below it ("$expires/KEY"),
# and refuses a turn that writes one.
_EXPIRES_KEY = "$expires"


class State(MutableMapping[str, Any]):
    """An actor's state: string keys, JSON-serialisable values.

    Changes made during a turn, including in-place changes to values read during
    the turn (``self.state["items"].append(x)``), are sent to the daemon when the
    turn ends and applied atomically. If the turn raises, they are discarded and
    the keys it touched return to what they were, except a key another turn wrote
    after it: that write stays.

    Several turns of one actor can be in flight at once (read-only methods, and
    a reentrant actor called back by a chain it is waiting on); each reports
    only the keys it changed itself. In a read-only method every write raises
    :class:`ReadOnlyStateError`.

    Keys that expire: :meth:`set` with ``ttl`` gives a key an expiry, after which it
    is gone as if deleted (the daemon deletes it and this view drops it before the
    actor's next turn runs). ``state[key] = value`` and in-place changes keep the
    expiry the key has; ``set(key, value, ttl=None)`` ends it; deleting the key ends
    it too, so a key deleted and set again does not expire unless set with a ttl.
    """

    def __init__(self, stored: Mapping[str, bytes]) -> None:
        # What the daemon holds, as far as this app knows: the baseline of every turn.
        self._stored: dict[str, bytes] = dict(stored)
        self._values: dict[str, Any] = {}
        for key, data in stored.items():
            try:
                self._values[key] = decode_state(data)
            except ValueError as e:
                raise ValueError(
                    f"stored value of state key {key!r} is not JSON ({e}); it was not written"
                    " by a troupe SDK, or the data dir holds another app's data"
                ) from None
        # Per key, how many running writing turns touched it: their changes are not
        # in _stored yet, so a turn touching the key later snapshots the live value.
        self._writers: dict[str, int] = {}
        # Keys touched outside any running turn (when first: as _turns has it, and the value
        # then, encoded, to tell changes made in place); the next writing turn sends them.
        self._loose: dict[str, tuple[int, int, object, bytes | None]] = {}
        # Of those, the keys assigned or deleted there (not only read). An expiry must not
        # drop such a key's value even when it equals the expired one: the daemon applies
        # the assignment after the expiry, setting the key again.
        self._loose_written: set[str] = set()
        # The expiries (ttl ms, 0: none) given outside any running turn, sent with _loose.
        self._loose_ttls: dict[str, int] = {}
        # The running turns that touched a key, whose snapshots an expiry or a rollback
        # must reach, and when each first touched each key (_writes ticks: then, and the
        # write it found, with its author: a failed author's writes are all undone).
        self._turns: dict[TurnScope, dict[str, tuple[int, int, object]]] = {}
        # Who wrote which key lately, for a rollback to undo only its turn's writes.
        self._writes = Writes()

    def _scope(self) -> TurnScope | None:
        scope = current_turn.get()
        if scope is None or scope.state is not self or not scope.live:
            return None
        return scope

    def _touch(self, key: str, write: str | None = None, value: Any = ABSENT) -> None:
        """Record that the running turn reads (or, with ``write``, changes to ``value``) ``key``.

        Only touched keys are re-encoded at turn end, so a turn costs O(keys
        touched), not O(state size). Call it before changing the value.
        """
        scope = self._scope()
        if scope is None:
            if key not in self._loose:
                snapshot = self._snapshot(key)
                self._loose[key] = (*self._writes.touch(key), snapshot)
            if write is not None:
                self._loose_written.add(key)
                self._writes.wrote(key, LOOSE, value)
            return
        if write is not None and scope.readonly:
            raise ReadOnlyStateError(
                f"method {scope.method!r} of {scope.actor} is read-only (declared with"
                f" @troupe.method(readonly=True)), so it cannot change self.state (it tried to"
                f" {write} key {key!r}); the state is unchanged. Remove readonly=True from the"
                " method, or make the change in a method that is not read-only"
            )
        if key not in scope.snapshots:
            scope.snapshots[key] = self._snapshot(key)
            self._turns.setdefault(scope, {})[key] = self._writes.touch(key)
            if not scope.readonly:
                self._writers[key] = self._writers.get(key, 0) + 1
        if write is not None:
            scope.written.add(key)
            self._writes.wrote(key, scope, value)

    def _snapshot(self, key: str) -> bytes | None:
        if not self._writers.get(key) and key not in self._loose:
            # Nobody has an unsent change of this key: the value is the stored one.
            return self._stored.get(key)
        if key not in self._values:
            return None
        try:
            return encode_state(key, self._values[key])
        except TypeError:
            return self._stored.get(key)

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        self._touch(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(f"state keys must be non-empty strings, got {key!r}")
        if key == _EXPIRES_KEY or key.startswith(_EXPIRES_KEY + "/"):
            # Refused here, at the write, rather than with the whole turn by the daemon.
            raise ValueError(
                f"state key {key!r} is the daemon's ({_EXPIRES_KEY!r} and the keys under"
                f" '{_EXPIRES_KEY}/' keep the expiry times of the other keys); use another key"
            )
        self._touch(key, "set", value)
        self._values[key] = value

    def __delitem__(self, key: str) -> None:
        self._touch(key, "delete")
        del self._values[key]
        # A deleted key loses its expiry: set again by this turn, it must reach the
        # daemon as a new key (ttl 0), not as a change keeping the expiry it had.
        self._pending_ttls()[key] = 0

    def set(self, key: str, value: Any, *, ttl: DurationLike | None) -> None:
        """Set ``key`` to ``value`` and give the key an expiry: ``ttl`` after the daemon
        stores this turn's changes, the key is gone, as if deleted.

        ``ttl`` is a duration as the SDK's other options take one (``"30m"``, ``"1h"``,
        ``"PT1H"``, a number of seconds, a ``timedelta``), at least a second; ``None``
        makes the key not expire. The expiry is sent with the turn's changes even when
        the value is unchanged, so setting the same value again renews it. If the turn
        raises, the value and the expiry are both discarded.

        Later writes keep the expiry: ``state[key] = other`` or an in-place change of the
        value does not end it; another ``set`` replaces it; deleting the key ends it.
        Outside a turn (a task that outlived its turn) the value and expiry go with the
        actor's next writing turn, like any other change made there.

        Raises ValueError for a ttl under a second, :class:`InvalidArgument` for one that
        is not a duration, and :class:`ReadOnlyStateError` in a read-only method, each
        before anything changes.
        """
        ttl_ms = _ttl_ms(ttl)
        self[key] = value
        self._pending_ttls()[key] = ttl_ms

    def _pending_ttls(self) -> dict[str, int]:
        """Where a write made now records a key's expiry: the running turn's (only it sends
        it), else the one of code outside turns."""
        scope = self._scope()
        return self._loose_ttls if scope is None else scope.ttls

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return f"State({self._values!r})"

    def _ttls(self, scope: TurnScope | None) -> dict[str, int]:
        """The expiries a writing turn (with no turn: code outside turns) sends: those given
        outside turns, which go with the next writing turn as loose changes do, and its own.
        A read-only turn sends none."""
        if scope is None:
            return dict(self._loose_ttls)
        if scope.readonly:
            return {}
        return {**self._loose_ttls, **scope.ttls}

    def _changed(
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
        loose = scope is None or not scope.readonly
        if scope is None:
            keys: Iterable[str] = sorted(self._loose)
        elif loose and self._loose:
            keys = sorted({*self._loose, *scope.snapshots})
        else:
            keys = sorted(scope.snapshots)
        out: dict[str, bytes | None] = {}
        for key in keys:
            base = self._stored.get(key)
            assigned = (scope is not None and key in scope.written) or (
                loose and key in self._loose_written
            )
            held = self._writes.held_back(key, authors) if assigned else None
            if held is not None:
                if held_back is not None:
                    held_back[key] = held[0]
                if held[0] is None:
                    continue
                current = None if held[1] is ABSENT else encode_state(key, held[1])
            else:
                current = encode_state(key, self._values[key]) if key in self._values else None
            if current is not None and key in ttls:
                out[key] = current
                continue
            if assigned:
                if current != base:
                    out[key] = current
                continue
            # Only read: sent if changed in place since first touched, unless another
            # author's write is what changed it. Else the view's value is not theirs.
            touched = self._loose.get(key) if loose else None
            snapshots = scope.snapshots if scope is not None else {}
            changed = current != base and (
                (key in snapshots and current != snapshots[key])
                or (touched is not None and current != touched[3])
            )
            if changed or touched is not None:
                firsts = [touched[0]] if touched is not None else []
                if scope is not None and key in snapshots:
                    firsts.append(self._turns.get(scope, {}).get(key, (0, 0, None))[0])
                if not self._writes.overwritten(key, authors, min(firsts)):
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

    def _commit(self, scope: TurnScope | None = None) -> list[common_pb2.StateChange]:
        """Return the changes of a writing turn (with no turn: of code outside turns) and make
        them the new baseline.

        A key given an expiry (:meth:`set`, or a delete then a set) carries it in ``ttl_ms``;
        any other ``set`` leaves ``ttl_ms`` unset, so the daemon keeps the key's expiry.
        Raises TypeError (leaving the baseline untouched) if a value cannot be encoded.
        """
        ttls = self._ttls(scope)
        held_back: dict[str, int | None] = {}
        kept: set[str] = set()
        encoded = self._changed(scope, ttls, held_back, kept)
        # The daemon now holds the view's value of these keys, whoever wrote it (or the
        # write held back): a failed turn must not undo that, only its own writes after.
        for key in {*encoded, *self._loose, *(scope.written if scope is not None else ())}:
            own = scope is not None and key in scope.snapshots
            watched = self._writers.get(key, 0) > (1 if own else 0)
            if key not in held_back:
                self._writes.committed(key, watched)
            elif (at := held_back[key]) is not None:
                self._writes.committed(key, watched, at)
        changes: list[common_pb2.StateChange] = []
        for key, value in encoded.items():
            if value is None:
                self._stored.pop(key, None)
                changes.append(common_pb2.StateChange(key=key, delete=True))
            else:
                self._stored[key] = value
                change = common_pb2.StateChange(key=key, set=value)
                if key in ttls:
                    change.ttl_ms = ttls[key]
                changes.append(change)
        if kept:
            self._loose = {key: self._loose[key] for key in kept}
        else:
            self._loose.clear()
        self._loose_written.clear()
        self._loose_ttls.clear()
        if scope is not None:
            scope.ttls.clear()
        return changes

    def _refuse(self, scope: TurnScope) -> list[common_pb2.StateChange]:
        """End a read-only turn: undo any in-place change it made and return those changes.

        Sent with the turn's result they make the daemon refuse it with
        FAILED_PRECONDITION, naming the keys; here the view is back to the daemon's.
        """
        try:
            encoded = {k: v for k, v in self._changed(scope, {}).items() if k in scope.snapshots}
        except TypeError:
            # A value that no longer encodes was certainly changed; undo every key read.
            encoded = {k: self._stored.get(k) for k in scope.snapshots}
        for key in encoded:
            self._restore(key, scope.snapshots[key])
        return [
            common_pb2.StateChange(key=k, delete=True)
            if v is None
            else common_pb2.StateChange(key=k, set=v)
            for k, v in encoded.items()
        ]

    def _rollback(self, scope: TurnScope | None = None) -> None:
        """Undo what a failed turn (with no turn: code outside turns) changed: see _undo."""
        if scope is None:
            for key, (first, _, _, _) in self._loose.items():
                self._undo(key, LOOSE, (first, 0, None), self._stored.get(key))
            self._loose.clear()
            self._loose_written.clear()
            self._loose_ttls.clear()
            return
        if scope.readonly:
            self._refuse(scope)
            return
        scope.ttls.clear()
        firsts = self._turns.get(scope, {})
        for key, snapshot in scope.snapshots.items():
            self._undo(key, scope, firsts.get(key, (0, 0, None)), snapshot)

    def _undo(
        self, key: str, author: object, touch: tuple[int, int, object], snapshot: bytes | None
    ) -> None:
        """Undo what ``author`` did to ``key``, which it first touched at ``touch``: back to
        what it found (``snapshot``), unless another author wrote the key since
        (:meth:`Writes.undo`). Turns that touched the key after the change saw the result.
        """
        back = self._writes.undo(key, author, touch[0], touch[1])
        if back is None:
            self._found_instead(key, author, touch, snapshot)
            return
        since, who, value = back
        data = self._stored.get(key)
        if who is None and (self._writers.get(key, 0) > 1 or key in self._loose):
            data = snapshot  # what it found holds others' unsent changes
        if who is None or who == COMMITTED:
            self._restore(key, data)
        else:
            if value is ABSENT:
                self._values.pop(key, None)
            else:
                self._values[key] = value
            try:
                data = None if value is ABSENT else encode_state(key, value)
            except TypeError:
                return  # its author cannot send it either: that turn fails too

        self._found_instead(key, author, touch, snapshot, since, data)

    def _found_instead(
        self,
        key: str,
        author: object,
        touch: tuple[int, int, object],
        snapshot: bytes | None,
        since: int | None = None,
        data: bytes | None = None,
    ) -> None:
        """``author``'s writes of ``key`` are undone: turns (and code outside turns) that
        found one of them now found what they would have without it, and those that first
        touched the key after ``since`` (the view went back to ``data`` then) find ``data``.
        ``touch`` and ``snapshot`` are ``author``'s."""
        latest = self._writes.latest(key)

        def found_instead(first: int, by: object) -> tuple[bytes | None, int, object]:
            if by is author:
                return self._found_before(key, first, touch, snapshot)
            if since is not None and first > since:
                return data, *latest
            return _UNCHANGED

        for turn, firsts in self._turns.items():
            first, _, by = firsts.get(key, (0, 0, None))
            if turn is not author and first != 0:
                instead = found_instead(first, by)
                if instead is not _UNCHANGED:
                    turn.snapshots[key] = instead[0]
                    firsts[key] = (first, instead[1], instead[2])
        touched = self._loose.get(key)
        if author != LOOSE and touched is not None:
            instead = found_instead(touched[0], touched[2])
            if instead is not _UNCHANGED:
                self._loose[key] = (touched[0], instead[1], instead[2], instead[0])

    def _found_before(
        self, key: str, first: int, touch: tuple[int, int, object], snapshot: bytes | None
    ) -> tuple[bytes | None, int, object]:
        """What a turn first touching ``key`` at ``first`` finds now that the writes of the
        author that touched it at ``touch`` finding ``snapshot`` are undone: the latest write
        kept from before it, or else what that author found."""
        below = self._writes.beneath(key, first)
        if below is None or below[1] < touch[0]:
            others = self._writers.get(key, 0) > 1 or key in self._loose
            return (snapshot if others else self._stored.get(key)), touch[1], touch[2]
        who, at, value = below
        if who == COMMITTED or value is ABSENT:
            return (self._stored.get(key) if who == COMMITTED else None), at, who
        try:
            return encode_state(key, value), at, who
        except TypeError:
            return _UNCHANGED  # its author cannot send it either: that turn fails too

    def _end(self, scope: TurnScope) -> None:
        """The turn is over: later touches from tasks it started are not its own."""
        scope.live = False
        self._turns.pop(scope, None)
        if scope.readonly:
            return
        for key in scope.snapshots:
            left = self._writers.get(key, 0) - 1
            if left > 0:
                self._writers[key] = left
            else:
                self._writers.pop(key, None)
            self._writes.ended(key, scope, left > 0)

    def _expire(self, keys: Iterable[str]) -> None:
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
            old = self._stored.pop(key, None)
            if old is None:
                # Not in the daemon's state as far as this app knows: anything here is unsent.
                continue
            if not self._unsent(key, old):
                self._values.pop(key, None)
            for scope in self._turns:
                if scope.snapshots.get(key) == old:
                    scope.snapshots[key] = None

    def _unsent(self, key: str, stored: bytes) -> bool:
        """Whether ``key`` has a change not sent yet, its daemon value being ``stored``."""
        if key not in self._values:
            return False
        # An assignment, even of the value the key had, sets the key again after the expiry;
        # not one that a commit since replaced, whose value the daemon held and let expire.
        if self._writes.unsent(key):
            return True
        if not self._writers.get(key) and key not in self._loose:
            return False
        try:
            return encode_state(key, self._values[key]) != stored
        except TypeError:
            # A value that no longer encodes was certainly changed.
            return True

    def _restore(self, key: str, data: bytes | None) -> None:
        if data is None:
            self._values.pop(key, None)
        else:
            self._values[key] = decode_state(data)


# What _found_instead leaves as it was.
_UNCHANGED: tuple[bytes | None, int, object] = (None, -1, None)


def _authors(scope: TurnScope | None) -> tuple[object, ...]:
    """Whose writes the end of ``scope`` (None: code outside turns) sends: its own, and
    those made outside turns, which go with a writing turn."""
    if scope is None:
        return (LOOSE,)
    return (scope,) if scope.readonly else (scope, LOOSE)


def _ttl_ms(ttl: DurationLike | None) -> int:
    """``State.set``'s ttl as ``StateChange.ttl_ms``: 0 (no expiry) for None."""
    if ttl is None:
        return 0
    ms = to_millis(ttl, "ttl", allow_zero=True)
    if ms < _MIN_TTL_MS:
        hint = (
            "ttl=None makes the key not expire"
            if ms == 0
            else "a bare number is seconds: write e.g. '30s' or '30m'"
        )
        raise ValueError(f"ttl must be at least a second, got {ttl!r} ({ms} ms); {hint}")
    return ms
