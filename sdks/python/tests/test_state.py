from __future__ import annotations

from troupe import State
from troupe._proto.troupe.v1 import common_pb2


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
