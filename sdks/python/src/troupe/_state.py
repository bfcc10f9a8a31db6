"""The dict-like view of an actor's state and the bookkeeping that turns it into changes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from ._errors import ReadOnlyStateError
from ._payload import decode_state, encode_state
from ._proto.troupe.v1 import common_pb2
from ._turn import TurnScope, current_turn


class State(MutableMapping[str, Any]):
    """An actor's state: string keys, JSON-serialisable values.

    Changes made during a turn, including in-place changes to values read during
    the turn (``self.state["items"].append(x)``), are sent to the daemon when the
    turn ends and applied atomically. If the turn raises, they are discarded and
    the keys it touched return to what they were.

    Several turns of one actor can be in flight at once (read-only methods, and
    a reentrant actor called back by a chain it is waiting on); each reports
    only the keys it changed itself. In a read-only method every write raises
    :class:`ReadOnlyStateError`.
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
        # Keys touched outside any running turn; the next writing turn sends them.
        self._loose: set[str] = set()

    def _scope(self) -> TurnScope | None:
        scope = current_turn.get()
        if scope is None or scope.state is not self or not scope.live:
            return None
        return scope

    def _touch(self, key: str, write: str | None = None) -> None:
        """Record that the running turn reads (or, with ``write``, changes) ``key``.

        Only touched keys are re-encoded at turn end, so a turn costs O(keys
        touched), not O(state size). Call it before changing the value.
        """
        scope = self._scope()
        if scope is None:
            self._loose.add(key)
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
            if not scope.readonly:
                self._writers[key] = self._writers.get(key, 0) + 1
        if write is not None:
            scope.written.add(key)

    def _snapshot(self, key: str) -> bytes | None:
        if not self._writers.get(key):
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
        self._touch(key, "set")
        self._values[key] = value

    def __delitem__(self, key: str) -> None:
        self._touch(key, "delete")
        del self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return f"State({self._values!r})"

    def _changed(self, scope: TurnScope | None) -> dict[str, bytes | None]:
        """The keys whose value differs from the daemon's because of this turn (or, without a
        turn, of code outside turns), encoded; None means deleted.

        A key the turn only read counts when its value changed since the turn first
        touched it (in place), so a turn nested in another one does not send the
        outer turn's unsent changes. Raises TypeError if a value cannot be encoded.
        """
        keys = set(self._loose)
        if scope is not None:
            keys.update(scope.snapshots)
        out: dict[str, bytes | None] = {}
        for key in sorted(keys):
            current = encode_state(key, self._values[key]) if key in self._values else None
            base = self._stored.get(key)
            if current == base:
                continue
            snapshot = scope.snapshots.get(key, base) if scope is not None else base
            written = scope is None or key in scope.written
            if written or current != snapshot:
                out[key] = current
        return out

    def _commit(self, scope: TurnScope | None = None) -> list[common_pb2.StateChange]:
        """Return the changes of a writing turn (with no turn: of code outside turns) and make
        them the new baseline.

        Raises TypeError (leaving the baseline untouched) if a value cannot be encoded.
        """
        encoded = self._changed(scope)
        changes: list[common_pb2.StateChange] = []
        for key, value in encoded.items():
            if value is None:
                self._stored.pop(key, None)
                changes.append(common_pb2.StateChange(key=key, delete=True))
            else:
                self._stored[key] = value
                changes.append(common_pb2.StateChange(key=key, set=value))
        self._loose.clear()
        return changes

    def _refuse(self, scope: TurnScope) -> list[common_pb2.StateChange]:
        """End a read-only turn: undo any in-place change it made and return those changes.

        Sent with the turn's result they make the daemon refuse it with
        FAILED_PRECONDITION, naming the keys; here the view is back to the daemon's.
        """
        try:
            encoded = {k: v for k, v in self._changed(scope).items() if k in scope.snapshots}
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
        """Undo what a failed turn (with no turn: code outside turns) changed.

        A key another running turn also touched goes back to what it was when this
        turn first touched it, keeping that turn's unsent change; any other key
        goes back to the daemon's value.
        """
        if scope is None:
            for key in self._loose:
                self._restore(key, self._stored.get(key))
            self._loose.clear()
            return
        if scope.readonly:
            self._refuse(scope)
            return
        for key, snapshot in scope.snapshots.items():
            others = self._writers.get(key, 0) - 1
            self._restore(key, snapshot if others > 0 else self._stored.get(key))

    def _end(self, scope: TurnScope) -> None:
        """The turn is over: later touches from tasks it started are not its own."""
        scope.live = False
        if scope.readonly:
            return
        for key in scope.snapshots:
            left = self._writers.get(key, 0) - 1
            if left > 0:
                self._writers[key] = left
            else:
                self._writers.pop(key, None)

    def _restore(self, key: str, data: bytes | None) -> None:
        if data is None:
            self._values.pop(key, None)
        else:
            self._values[key] = decode_state(data)
