"""State with turns side by side, checked against a model on random runs.

Turns of one actor interleave (a reentrant actor's nested turns, read-only turns) and end in
any order, each committing or failing; code outside turns reads, and each assignment or
deletion it tries raises and changes nothing. Whatever the order, a
key must end as its latest write by an author that did not fail, and the daemon (the
changes sent, applied in turn) must hold what the view holds. When the daemon lets a key
expire, it deletes what it holds: writes sent before go with it, writes not sent yet come
after it (and set the key again once sent). A list is changed in place
only by the author of its latest write, while no other author touched the key since and no
other running turn holds it: a change in place of a value two turns hold cannot be told apart.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from troupe import State, TroupeError
from troupe._proto.troupe.v1 import common_pb2
from troupe._turn import TurnScope, current_turn

_KEYS = ("a", "b", "c")
_GONE = object()
# The author of an expiry.
_DAEMON = object()


@dataclass
class _Write:
    author: object
    value: Any
    sent: bool = False


class _Run:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        initial = {k: rng.randrange(3) for k in _KEYS if rng.random() < 0.7}
        self.state = State({k: str(v).encode() for k, v in initial.items()})
        self.daemon: dict[str, bytes] = {k: str(v).encode() for k, v in initial.items()}
        self.initial: dict[str, Any] = dict(initial)
        # Per key, every write in the order it takes effect; the model keeps the latest
        # that stands.
        self.writes: dict[str, list[_Write]] = {k: [] for k in _KEYS}
        self.failed: set[object] = set()
        # Per key, who touched it since its latest write, and the running turns that did.
        self.touched: dict[str, set[object]] = {k: set() for k in _KEYS}
        self.holders: dict[str, set[object]] = {k: set() for k in _KEYS}
        self.running: list[TurnScope] = []
        self.log: list[str] = []
        self.values = iter(range(10, 10_000))

    def apply(self, changes: list[common_pb2.StateChange]) -> None:
        for change in changes:
            if change.WhichOneof("op") == "delete":
                self.daemon.pop(change.key, None)
            else:
                self.daemon[change.key] = change.set

    def act(self, scope: TurnScope | None) -> None:
        key = self.rng.choice(_KEYS)
        if scope is None:
            self._outside(key)
            return
        token = current_turn.set(scope)
        try:
            standing = [w for w in self.writes[key] if w.author not in self.failed]
            own = standing[-1].value if standing and standing[-1].author is scope else None
            if (scope is not None and scope.readonly) or self.rng.random() < 0.3:
                if key in self.state:
                    _ = self.state[key]
                    self._touched(key, scope)
                self.log.append(f"{_name(scope)} reads {key}")
            elif (
                isinstance(own, list)
                and self.touched[key] <= {scope}
                and self.holders[key] <= {scope}
                and self.rng.random() < 0.5
            ):
                value = next(self.values)
                held = self.state[key]
                held.append(value)
                if held is not own:
                    own.append(value)
                # A change not sent yet, of a value that may have been.
                self.writes[key].append(_Write(scope, own))
                self.log.append(f"{_name(scope)} appends {value} to {key}")
            elif self.rng.random() < 0.2 and key in self.state:
                del self.state[key]
                self._wrote(key, scope, _GONE)
                self.log.append(f"{_name(scope)} deletes {key}")
            else:
                value = next(self.values)
                new: Any = [value] if self.rng.random() < 0.3 else value
                self.state[key] = new
                self._wrote(key, scope, new)
                self.log.append(f"{_name(scope)} sets {key}={new}")
        finally:
            current_turn.reset(token)

    def _outside(self, key: str) -> None:
        """Code outside turns reads ``key``; an assignment or deletion it tries raises."""
        before = json.dumps(self.state[key]) if key in self.state else None
        if before is not None:
            self._touched(key, None)
        tries: list[tuple[str, Callable[[], object]]] = [
            ("sets", lambda: self.state.__setitem__(key, next(self.values))),
            ("deletes", lambda: self.state.__delitem__(key)),
            ("pops", lambda: self.state.pop(key, None)),
        ]
        verb, change = self.rng.choice(tries)
        if verb == "pops" and key not in self.state:
            return  # pop of an absent key changes nothing, so it raises nothing
        with pytest.raises(TroupeError):
            change()
        after = json.dumps(self.state[key]) if key in self.state else None
        assert after == before, f"a refused change outside turns changed {key}\n{self.trace()}"
        self.log.append(f"outside turns reads {key}, and {verb} it in vain")

    def _wrote(self, key: str, author: object, value: Any) -> None:
        self.writes[key].append(_Write(author, value))
        self.touched[key] = set()
        self._touched(key, author)

    def _touched(self, key: str, author: object) -> None:
        self.touched[key].add(author)
        if author is not None:
            self.holders[key].add(author)

    def end(self, scope: TurnScope) -> None:
        self.running.remove(scope)
        for holders in self.holders.values():
            holders.discard(scope)
        if scope.readonly:
            refused = self.state._refuse(scope)
            self.log.append(f"{_name(scope)} ends (read-only)")
            assert refused == [], f"a read-only turn was refused: {refused}\n{self.trace()}"
        elif self.rng.random() < 0.5:
            changes = self.state._commit(scope)
            self.log.append(f"{_name(scope)} commits {_shown(changes)}")
            self.apply(changes)
            self.sent(scope)
        else:
            self.state._rollback(scope)
            self.failed.add(scope)
            self.log.append(f"{_name(scope)} fails")
        self.state._end(scope)

    def sent(self, scope: TurnScope) -> None:
        """A commit by ``scope`` sent its writes."""
        for writes in self.writes.values():
            for write in writes:
                if write.author is scope:
                    write.sent = True

    def expire(self) -> None:
        key = self.rng.choice(_KEYS)
        if key not in self.daemon:
            return
        del self.daemon[key]
        self.state._expire([key])
        writes = self.writes[key]
        after = max(
            (i + 1 for i, w in enumerate(writes) if w.sent and w.author not in self.failed),
            default=0,
        )
        writes.insert(after, _Write(_DAEMON, _GONE, sent=True))
        self.log.append(f"{key} expires")

    def expected(self) -> dict[str, Any]:
        out = dict(self.initial)
        for key, writes in self.writes.items():
            standing = [w.value for w in writes if w.author not in self.failed]
            if standing:
                if standing[-1] is _GONE:
                    out.pop(key, None)
                else:
                    out[key] = standing[-1]
        return out

    def trace(self) -> str:
        return "\n".join(self.log)


def _name(scope: TurnScope | None) -> str:
    return "outside turns" if scope is None else scope.method


def _shown(changes: list[common_pb2.StateChange]) -> str:
    return str({c.key: None if c.WhichOneof("op") == "delete" else c.set for c in changes})


def _run(seed: int) -> None:
    rng = random.Random(seed)
    run = _Run(rng)
    started = 0
    for _ in range(rng.randrange(4, 24)):
        roll = rng.random()
        if roll < 0.2 and started < 4:
            readonly = rng.random() < 0.25
            scope = TurnScope(run.state, "t/1", f"turn{started}", readonly=readonly)
            started += 1
            run.running.append(scope)
            run.log.append(f"{scope.method} starts" + (" (read-only)" if readonly else ""))
        elif roll < 0.35 and run.running:
            run.end(rng.choice(run.running))
        elif roll < 0.42:
            run.act(None)
        elif roll < 0.47:
            run.expire()
        elif run.running:
            run.act(rng.choice(run.running))
    while run.running:
        run.end(rng.choice(run.running))
    # Code outside turns changed nothing, so it has nothing for a next turn to send.
    leftover = run.state._commit()
    assert leftover == [], f"code outside turns left changes to send\n{run.trace()}"
    expected = run.expected()
    assert dict(run.state) == expected, f"the view is not the model\n{run.trace()}"
    daemon = {k: json.loads(v) for k, v in run.daemon.items()}
    assert daemon == expected, f"the daemon is not the model\n{run.trace()}"


@pytest.mark.parametrize("block", range(8))
def test_turns_side_by_side_leave_each_key_at_its_latest_write_that_stands(block: int) -> None:
    for seed in range(block * 2500, (block + 1) * 2500):
        try:
            _run(seed)
        except AssertionError as e:
            raise AssertionError(f"seed {seed}: {e}") from None
