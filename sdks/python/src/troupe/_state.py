"""The dict-like view of an actor's state that actors use as ``self.state``.

The view checks what users write and resolves the running turn; the bookkeeping that turns
writes into each turn's changes is ``_state_ledger.StateLedger``, and what a failed turn
undoes is ``_state_rollback``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from ._duration import DurationLike, to_millis
from ._errors import ReadOnlyStateError, TroupeError
from ._proto.troupe.v1 import common_pb2
from ._state_ledger import StateLedger
from ._state_rollback import rollback
from ._state_writes import ABSENT
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

    State changes only during the actor's turns (methods, ``on_activate``,
    ``on_deactivate``, ``on_reminder``, ``on_timer``, ``on_alarm``, and tasks they await).
    Outside them (a task a method left running after it returned), assigning or deleting a
    key raises :class:`TroupeError` and changes nothing; reads work anywhere. A value read
    there and changed in place cannot be seen at the change: don't.

    Keys that expire: :meth:`set` with ``ttl`` gives a key an expiry, after which it
    is gone as if deleted (the daemon deletes it and this view drops it before the
    actor's next turn runs). ``state[key] = value`` and in-place changes keep the
    expiry the key has; ``set(key, value, ttl=None)`` ends it; deleting the key ends
    it too, so a key deleted and set again does not expire unless set with a ttl.
    """

    def __init__(self, stored: Mapping[str, bytes]) -> None:
        self._ledger = StateLedger(stored)
        # The ledger's dict, held here too: reads are the hot path.
        self._values = self._ledger.values

    def _scope(self) -> TurnScope | None:
        scope = current_turn.get()
        if scope is None or scope.state is not self or not scope.live:
            return None
        return scope

    def _touch(self, key: str, write: str | None = None, value: Any = ABSENT) -> None:
        """Record that the running turn reads (or, with ``write``, changes to ``value``)
        ``key``; call it before changing the value. Raises, before anything changes,
        TroupeError for a write outside the actor's turns and ReadOnlyStateError for one in
        a read-only turn."""
        scope = self._scope()
        if write is not None and scope is None:
            raise self._outside_turns(f"{write} key {key!r}")
        if write is not None and scope is not None and scope.readonly:
            raise ReadOnlyStateError(
                f"method {scope.method!r} of {scope.actor} is read-only (declared with"
                f" @troupe.method(readonly=True)), so it cannot change self.state (it tried to"
                f" {write} key {key!r}); the state is unchanged. Remove readonly=True from the"
                " method, or make the change in a method that is not read-only"
            )
        self._ledger.touch(key, scope, write is not None, value)

    def _outside_turns(self, change: str) -> TroupeError:
        """The error of a change outside the actor's turns. Only a turn's end sends changes,
        so one made elsewhere would wait for whichever turn came next and be saved (or
        undone) with that turn's, which did not make it."""
        scope = current_turn.get()
        if scope is None:
            where = "outside any turn"
        elif scope.state is not self:
            where = f"in {scope.method} of {scope.actor}, which is not this state's actor"
        else:
            where = (
                f"after its turn ended (in a task that {scope.method} of {scope.actor} started"
                " and did not await)"
            )
        return TroupeError(
            f"self.state cannot {change} {where}: an actor's state changes only during its"
            " turns (methods, on_activate, on_deactivate, on_reminder, on_timer, on_alarm),"
            " whose end saves them; the state is unchanged. Await that work inside the turn,"
            " or make the change in a turn: call or tell the actor, or set a timer or reminder"
            " whose handler makes it"
        )

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

        Raises ValueError for a ttl under a second, :class:`InvalidArgument` for one that
        is not a duration, :class:`ReadOnlyStateError` in a read-only method and
        :class:`TroupeError` outside the actor's turns, each before anything changes.
        """
        ttl_ms = _ttl_ms(ttl)
        self[key] = value
        self._pending_ttls()[key] = ttl_ms

    def _pending_ttls(self) -> dict[str, int]:
        """Where a write made now records a key's expiry: the running turn's (only it sends
        it), else the one of code outside turns."""
        scope = self._scope()
        return self._ledger.loose_ttls if scope is None else scope.ttls

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return f"State({self._values!r})"

    # The SDK's side of a turn's end (the actor host calls these): see StateLedger.

    def _commit(self, scope: TurnScope | None = None) -> list[common_pb2.StateChange]:
        return self._ledger.commit(scope)

    def _refuse(self, scope: TurnScope) -> list[common_pb2.StateChange]:
        return self._ledger.refuse(scope)

    def _rollback(self, scope: TurnScope | None = None) -> None:
        rollback(self._ledger, scope)

    def _end(self, scope: TurnScope) -> None:
        self._ledger.end(scope)

    def _expire(self, keys: Iterable[str]) -> None:
        self._ledger.expire(keys)


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
