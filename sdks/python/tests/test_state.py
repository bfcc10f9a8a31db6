from __future__ import annotations

from collections.abc import Callable

import pytest

from troupe import ReadOnlyStateError, State
from troupe._proto.troupe.v1 import common_pb2
from troupe._turn import TurnScope, current_turn


def _changes(state: State) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for c in state._commit():
        out[c.key] = None if c.WhichOneof("op") == "delete" else c.set
    return out


def test_values_are_stored_as_json_bytes() -> None:
    s = State({})
    s["count"] = 5
    s["name"] = "bus 7"
    assert _changes(s) == {"count": b"5", "name": b'"bus 7"'}


def test_loads_stored_state_and_reports_only_real_changes() -> None:
    s = State({"count": b"5", "items": b"[1]"})
    assert s["count"] == 5
    s["count"] = 5  # same value: nothing to write
    s["items"].append(2)  # in-place change of a value read during the turn
    del s["count"]
    assert _changes(s) == {"items": b"[1,2]", "count": None}
    assert _changes(s) == {}


def test_rollback_restores_previous_values() -> None:
    s = State({"items": b"[1]"})
    s["items"].append(2)
    s["new"] = True
    s._rollback()
    assert dict(s) == {"items": [1]}
    assert s._commit() == []


def test_unencodable_value_fails_commit() -> None:
    s = State({})
    s["bad"] = object()
    try:
        s._commit()
    except TypeError as e:
        assert "state['bad']" in str(e)
    else:
        raise AssertionError("commit accepted a value JSON cannot encode")
    s._rollback()
    assert "bad" not in s


def test_change_messages() -> None:
    s = State({"a": b"1"})
    del s["a"]
    (change,) = s._commit()
    assert change == common_pb2.StateChange(key="a", delete=True)


def test_non_json_stored_value_is_explained() -> None:
    try:
        State({"blob": b"\xff\x00"})
    except ValueError as e:
        assert "'blob'" in str(e) and "not JSON" in str(e)
    else:
        raise AssertionError("State accepted a stored value that is not JSON")


def _in_turn(state: State, scope: TurnScope, fn: Callable[[], None]) -> None:
    token = current_turn.set(scope)
    try:
        fn()
    finally:
        current_turn.reset(token)


def _as_dict(changes: list[common_pb2.StateChange]) -> dict[str, bytes | None]:
    return {c.key: None if c.WhichOneof("op") == "delete" else c.set for c in changes}


def test_a_nested_turn_sends_only_its_own_changes() -> None:
    s = State({"a": b"0", "b": b"0"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s.__setitem__("a", 1))
    # The nested turn reads the outer turn's unsent change and writes another key.
    _in_turn(s, inner, lambda: s.__setitem__("b", s["a"] + 1))
    assert _as_dict(s._commit(inner)) == {"b": b"2"}
    s._end(inner)
    assert _as_dict(s._commit(outer)) == {"a": b"1"}
    s._end(outer)


def test_a_failed_nested_turn_keeps_the_outer_turns_changes() -> None:
    s = State({"a": b"0"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s.__setitem__("a", 1))
    _in_turn(s, inner, lambda: s.__setitem__("a", 5))
    s._rollback(inner)
    s._end(inner)
    assert s["a"] == 1
    assert _as_dict(s._commit(outer)) == {"a": b"1"}


def test_a_failed_outer_turn_returns_to_what_the_daemon_holds() -> None:
    s = State({"a": b"0"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s.__setitem__("x", 1))
    _in_turn(s, inner, lambda: s.__setitem__("a", 7))
    assert _as_dict(s._commit(inner)) == {"a": b"7"}
    s._end(inner)
    _in_turn(s, outer, lambda: s.__setitem__("a", 8))
    s._rollback(outer)
    s._end(outer)
    assert dict(s) == {"a": 7}


def test_read_only_turn_cannot_write() -> None:
    s = State({"a": b"[1]"})
    scope = TurnScope(s, "t/1", "peek", readonly=True)
    with pytest.raises(ReadOnlyStateError, match=r"method 'peek' of t/1 is read-only"):
        _in_turn(s, scope, lambda: s.__setitem__("a", 2))
    with pytest.raises(ReadOnlyStateError, match="tried to delete key 'a'"):
        _in_turn(s, scope, lambda: s.__delitem__("a"))
    assert s._refuse(scope) == []
    # A change in place is undone and handed back for the daemon to refuse.
    _in_turn(s, scope, lambda: s["a"].append(2))
    assert _as_dict(s._refuse(scope)) == {"a": b"[1,2]"}
    assert dict(s) == {"a": [1]}
