"""The dict-like view of an actor's state and the bookkeeping that turns it into changes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from ._payload import decode_state, encode_state
from ._proto.troupe.v1 import common_pb2


class State(MutableMapping[str, Any]):
    """An actor's state: string keys, JSON-serialisable values.

    Changes made during a turn, including in-place changes to values read during
    the turn (``self.state["items"].append(x)``), are sent to the daemon when the
    turn ends and applied atomically. If the turn raises, they are discarded and
    the view returns to what it was before the turn.
    """

    def __init__(self, stored: Mapping[str, bytes]) -> None:
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
        # Keys read or written since the last commit. Only these are re-encoded
        # at turn end, so a turn costs O(keys touched), not O(state size).
        self._touched: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        self._touched.add(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(f"state keys must be non-empty strings, got {key!r}")
        self._values[key] = value
        self._touched.add(key)

    def __delitem__(self, key: str) -> None:
        del self._values[key]
        self._touched.add(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return f"State({self._values!r})"

    def _commit(self) -> list[common_pb2.StateChange]:
        """Return the changes since the last commit and make them the new baseline.

        Raises TypeError (leaving the baseline untouched) if a value cannot be encoded.
        """
        encoded: dict[str, bytes | None] = {}
        for key in sorted(self._touched):
            if key in self._values:
                data = encode_state(key, self._values[key])
                if self._stored.get(key) != data:
                    encoded[key] = data
            elif key in self._stored:
                encoded[key] = None
        changes: list[common_pb2.StateChange] = []
        for key, value in encoded.items():
            if value is None:
                del self._stored[key]
                changes.append(common_pb2.StateChange(key=key, delete=True))
            else:
                self._stored[key] = value
                changes.append(common_pb2.StateChange(key=key, set=value))
        self._touched.clear()
        return changes

    def _rollback(self) -> None:
        """Forget every change since the last commit."""
        for key in self._touched:
            if key in self._stored:
                self._values[key] = decode_state(self._stored[key])
            else:
                self._values.pop(key, None)
        self._touched.clear()
