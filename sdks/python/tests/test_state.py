from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest

import troupe
from troupe import ReadOnlyStateError, State
from troupe._proto.troupe.v1 import common_pb2
from troupe._turn import TurnScope, current_turn
from troupe.testing import TestEnv

from .state_turns import in_turn as _turn


def _changes(state: State, scope: TurnScope) -> dict[str, bytes | None]:
    """What the end of ``scope``, a writing turn that succeeded, sends."""
    out: dict[str, bytes | None] = {}
    for c in state._commit(scope):
        out[c.key] = None if c.WhichOneof("op") == "delete" else c.set
    state._end(scope)
    return out


def test_values_are_stored_as_json_bytes() -> None:
    s = State({})
    with _turn(s) as turn:
        s["count"] = 5
        s["name"] = "bus 7"
    assert _changes(s, turn) == {"count": b"5", "name": b'"bus 7"'}


def test_loads_stored_state_and_reports_only_real_changes() -> None:
    s = State({"count": b"5", "items": b"[1]"})
    with _turn(s) as turn:
        assert s["count"] == 5
        s["count"] = 5  # same value: nothing to write
        s["items"].append(2)  # in-place change of a value read during the turn
        del s["count"]
    assert _changes(s, turn) == {"items": b"[1,2]", "count": None}
    with _turn(s) as turn:
        assert s["items"] == [1, 2]
    assert _changes(s, turn) == {}


def test_rollback_restores_previous_values() -> None:
    s = State({"items": b"[1]"})
    with _turn(s) as turn:
        s["items"].append(2)
        s["new"] = True
    s._rollback(turn)
    s._end(turn)
    assert dict(s) == {"items": [1]}
    assert s._commit() == []


def test_unencodable_value_fails_commit() -> None:
    s = State({})
    with _turn(s) as turn:
        s["bad"] = object()
    try:
        s._commit(turn)
    except TypeError as e:
        assert "state['bad']" in str(e)
    else:
        raise AssertionError("commit accepted a value JSON cannot encode")
    s._rollback(turn)
    s._end(turn)
    assert "bad" not in s


def test_change_messages() -> None:
    s = State({"a": b"1"})
    with _turn(s) as turn:
        del s["a"]
    (change,) = s._commit(turn)
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


def _outer_then_nested_wrote_k() -> tuple[State, TurnScope, TurnScope]:
    """Key k stored as 1; an outer turn wrote 2, then a nested turn wrote 3. Both run."""
    s = State({"k": b"1"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s.__setitem__("k", 2))
    _in_turn(s, inner, lambda: s.__setitem__("k", 3))
    return s, outer, inner


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


# --- A failed turn undoes its own changes only, whatever ran beside it --------------------
# Turns of one actor can run at once (a reentrant actor called back by a chain it waits on).
# The daemon discards only a failed turn's own changes, so the view must too: a key another
# turn wrote (or code outside turns changed in place) after the failed turn first touched it
# keeps that change, sent or still to be sent by its author.


def test_a_failed_outer_turn_keeps_what_a_nested_turn_committed() -> None:
    s, outer, inner = _outer_then_nested_wrote_k()
    assert _as_dict(s._commit(inner)) == {"k": b"3"}
    s._end(inner)
    s._rollback(outer)
    s._end(outer)
    assert dict(s) == {"k": 3}  # what the daemon holds
    assert s._commit() == []


def test_a_nested_turns_committed_write_stays_while_a_third_turn_that_read_the_key_runs() -> None:
    s = State({"k": b"1"})
    outer = TurnScope(s, "t/1", "outer")
    reader = TurnScope(s, "t/1", "reader")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s.__setitem__("k", 2))
    _in_turn(s, reader, lambda: s["k"])
    _in_turn(s, inner, lambda: s.__setitem__("k", 3))
    assert _as_dict(s._commit(inner)) == {"k": b"3"}
    s._end(inner)
    s._rollback(outer)
    s._end(outer)
    assert dict(s) == {"k": 3}
    assert s._commit(reader) == []
    s._end(reader)


def test_a_failed_outer_turn_keeps_a_running_nested_turns_write() -> None:
    s = State({"k": b"1", "r": b"1"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")

    def outer_part() -> None:
        s["k"] = 2
        _ = s["r"]  # only read by the outer turn

    def inner_part() -> None:
        s["k"] = 3
        s["r"] = 3

    _in_turn(s, outer, outer_part)
    _in_turn(s, inner, inner_part)
    s._rollback(outer)
    s._end(outer)
    assert dict(s) == {"k": 3, "r": 3}
    assert _as_dict(s._commit(inner)) == {"k": b"3", "r": b"3"}
    s._end(inner)


def test_a_turn_ending_first_does_not_send_a_running_turns_write_of_a_key_it_only_read() -> None:
    s = State({"k": b"1", "r": b"1"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")

    def outer_part() -> None:
        s["k"] = 2
        _ = s["r"]

    _in_turn(s, outer, outer_part)
    _in_turn(s, inner, lambda: s.__setitem__("r", 3))
    assert _as_dict(s._commit(outer)) == {"k": b"2"}
    s._end(outer)
    # The nested turn then fails: the daemon never got its write, and the view drops it.
    s._rollback(inner)
    s._end(inner)
    assert dict(s) == {"k": 2, "r": 1}
    assert s._commit() == []


def test_a_turn_ending_first_sends_its_own_write_under_a_running_turns_later_one() -> None:
    s, outer, inner = _outer_then_nested_wrote_k()
    assert _as_dict(s._commit(outer)) == {"k": b"2"}
    s._end(outer)
    assert dict(s) == {"k": 3}  # the nested turn's write, still to be sent
    s._rollback(inner)
    s._end(inner)
    assert dict(s) == {"k": 2}
    assert s._commit() == []


def test_a_change_in_place_outside_turns_outlives_a_later_write_that_fails() -> None:
    s = State({"k": b"[1]"})
    s["k"].append(2)  # outside turns: sent with the next writing turn
    writer = TurnScope(s, "t/1", "writer")
    other = TurnScope(s, "t/1", "other")
    _in_turn(s, writer, lambda: s.__setitem__("k", [9]))
    # Another turn ends first: the change outside turns is under the writer's, so it waits.
    _in_turn(s, other, lambda: s.__setitem__("x", 1))
    assert _as_dict(s._commit(other)) == {"x": b"1"}
    s._end(other)
    s._rollback(writer)
    s._end(writer)
    assert dict(s) == {"k": [1, 2], "x": 1}
    assert _as_dict(s._commit()) == {"k": b"[1,2]"}


def test_a_turn_that_found_an_earlier_write_of_a_failed_turn_goes_back_beneath_it() -> None:
    s = State({"k": b"[1]"})
    s["k"].append(2)  # outside turns, not sent yet
    first = TurnScope(s, "t/1", "first")
    second = TurnScope(s, "t/1", "second")
    _in_turn(s, first, lambda: s.__setitem__("k", 3))
    _in_turn(s, second, lambda: s.__delitem__("k"))  # found the first turn's 3
    _in_turn(s, first, lambda: s.__setitem__("k", 4))
    s._rollback(first)
    s._end(first)
    assert dict(s) == {}  # the second turn's delete stands
    s._rollback(second)
    s._end(second)
    assert dict(s) == {"k": [1, 2]}
    assert _as_dict(s._commit()) == {"k": b"[1,2]"}


def test_a_turns_write_that_a_committed_one_replaced_does_not_outlive_its_expiry() -> None:
    s, outer, inner = _outer_then_nested_wrote_k()
    assert _as_dict(s._commit(inner)) == {"k": b"3"}
    s._end(inner)
    s._expire(["k"])  # the daemon let the nested turn's 3 expire
    assert dict(s) == {}
    assert s._commit(outer) == []  # not 3 again, as a key that never expires
    s._end(outer)


def test_a_read_only_turn_ending_first_is_not_refused_for_a_running_turns_write() -> None:
    s = State({"r": b"1"})
    reader = TurnScope(s, "t/1", "peek", readonly=True)
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, reader, lambda: s["r"])
    _in_turn(s, inner, lambda: s.__setitem__("r", 3))
    assert s._refuse(reader) == []
    s._end(reader)
    assert dict(s) == {"r": 3}
    assert _as_dict(s._commit(inner)) == {"r": b"3"}
    s._end(inner)


def test_a_failed_nested_turn_that_read_the_outer_turns_change_goes_back_to_it() -> None:
    s = State({"k": b"1"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s.__setitem__("k", 2))
    _in_turn(s, inner, lambda: s["k"])
    s._rollback(inner)
    s._end(inner)
    assert dict(s) == {"k": 2}
    assert _as_dict(s._commit(outer)) == {"k": b"2"}
    s._end(outer)


def test_a_failed_turn_alone_goes_back_to_the_stored_value() -> None:
    s = State({"k": b"1", "d": b"1"})
    turn = TurnScope(s, "t/1", "turn")

    def change() -> None:
        s["k"] = 2
        del s["d"]
        s["new"] = 1

    _in_turn(s, turn, change)
    s._rollback(turn)
    s._end(turn)
    assert dict(s) == {"k": 1, "d": 1}
    assert s._commit() == []


@pytest.mark.parametrize(("failed", "kept", "left"), [("outer", "inner", 3), ("inner", "outer", 4)])
def test_a_failed_turn_that_wrote_last_goes_back_to_the_write_it_replaced(
    failed: str, kept: str, left: int
) -> None:
    s = State({"k": b"1"})
    turns = {name: TurnScope(s, "t/1", name) for name in ("outer", "inner")}
    _in_turn(s, turns["outer"], lambda: s.__setitem__("k", 2))
    _in_turn(s, turns["inner"], lambda: s.__setitem__("k", 3))
    # The outer turn writes again (from a task of its own) after the nested turn's write.
    _in_turn(s, turns["outer"], lambda: s.__setitem__("k", 4))
    s._rollback(turns[failed])
    s._end(turns[failed])
    assert dict(s) == {"k": left}
    assert _as_dict(s._commit(turns[kept])) == {"k": str(left).encode()}
    s._end(turns[kept])


def test_a_failed_turns_change_in_place_of_a_value_another_turn_committed_is_undone() -> None:
    s = State({"k": b"[1]"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(s, outer, lambda: s["k"])
    _in_turn(s, inner, lambda: s.__setitem__("k", [2]))
    assert _as_dict(s._commit(inner)) == {"k": b"[2]"}
    s._end(inner)
    _in_turn(s, outer, lambda: s["k"].append(3))  # the committed value, changed in place
    s._rollback(outer)
    s._end(outer)
    assert dict(s) == {"k": [2]}  # what the daemon holds
    assert s._commit() == []


def test_a_read_only_turn_may_read_a_change_made_in_place_outside_turns() -> None:
    s = State({"k": b"[1]"})
    s["k"].append(2)  # by a task that outlived its turn, not sent yet
    reader = TurnScope(s, "t/1", "peek", readonly=True)
    _in_turn(s, reader, lambda: s["k"])
    assert s._refuse(reader) == []  # it changed nothing
    s._end(reader)
    assert dict(s) == {"k": [1, 2]}
    assert _as_dict(s._commit()) == {"k": b"[1,2]"}


def test_a_failed_turn_does_not_bring_back_what_an_earlier_failed_turn_discarded() -> None:
    s = State({"k": b"1"})
    first = TurnScope(s, "t/1", "first")
    second = TurnScope(s, "t/1", "second")
    third = TurnScope(s, "t/1", "third")
    _in_turn(s, first, lambda: s.__setitem__("k", 2))
    _in_turn(s, second, lambda: s["k"])  # saw the first turn's unsent 2
    _in_turn(s, third, lambda: s["k"])
    s._rollback(first)
    s._end(first)
    assert dict(s) == {"k": 1}
    s._rollback(second)
    s._end(second)
    assert dict(s) == {"k": 1}
    assert s._commit(third) == []
    s._end(third)


# On the daemon: an outer turn fails while the turn nested in it (its chain called back into
# the actor) still runs, which the daemon allows; the nested turn's write is then applied.

# What the nested turn and the test wait for: set by the test, per run.
_SIDE: dict[str, Any] = {}


@troupe.actor("ledger", reentrant=True)
class Ledger(troupe.Actor):
    @troupe.method
    async def outer_fails(self) -> None:
        self.state["k"] = 2
        # The peer calls back into set_and_wait, nested in this turn; the call is left
        # running when this turn fails.
        _SIDE["call"] = asyncio.ensure_future(self.ctx.actor("ledger_peer", "p").call_back(self.id))
        await _SIDE["nested_set"].wait()
        raise RuntimeError("the outer turn fails")

    @troupe.method
    async def set_and_wait(self) -> None:
        self.state["k"] = 3
        _SIDE["nested_set"].set()
        await _SIDE["release"].wait()

    @troupe.method(readonly=True)
    async def peek(self) -> dict[str, Any]:
        return dict(self.state)

    @troupe.method(readonly=True)
    async def peek_beside_a_nested_write(self) -> dict[str, Any]:
        seen = dict(self.state)
        # The nested turn writes a key this turn read, and is still running when this
        # turn ends: the write is its own, not a change this read-only turn made.
        _SIDE["call"] = asyncio.ensure_future(self.ctx.actor("ledger_peer", "p").call_back(self.id))
        await _SIDE["nested_set"].wait()
        return seen


@troupe.actor("ledger_peer")
class LedgerPeer(troupe.Actor):
    @troupe.method
    async def call_back(self, ledger_id: str) -> None:
        await self.ctx.actor("ledger", ledger_id).set_and_wait()


async def test_a_failed_outer_turn_keeps_the_write_of_a_nested_turn_still_running(
    troupe_env: TestEnv,
) -> None:
    _SIDE.update(nested_set=asyncio.Event(), release=asyncio.Event())
    await troupe_env.host(Ledger, LedgerPeer)
    ledger = troupe_env.actor(Ledger, "l1")
    with pytest.raises(troupe.ActorError, match="the outer turn fails"):
        await ledger.outer_fails()
    _SIDE["release"].set()
    await asyncio.wait_for(_SIDE["call"], 10)  # the nested turn ended and was applied
    assert await troupe_env.state(Ledger, "l1") == {"k": 3}
    assert await ledger.peek() == {"k": 3}


async def test_a_read_only_turn_ending_before_a_nested_turn_that_writes_succeeds(
    troupe_env: TestEnv,
) -> None:
    _SIDE.update(nested_set=asyncio.Event(), release=asyncio.Event())
    await troupe_env.host(Ledger, LedgerPeer)
    await troupe_env.set_state(Ledger, "l2", {"k": 1})
    ledger = troupe_env.actor(Ledger, "l2")
    assert await ledger.peek_beside_a_nested_write() == {"k": 1}
    _SIDE["release"].set()
    await asyncio.wait_for(_SIDE["call"], 10)
    assert await troupe_env.state(Ledger, "l2") == {"k": 3}
    assert await ledger.peek() == {"k": 3}


# --- State changes only during the actor's turns ------------------------------------------
# A change made elsewhere (a task a method left running after it returned) raises TroupeError
# and changes nothing; before, the actor's next writing turn sent it as its own.

_INSTEAD = (
    r"an actor's state changes only during its turns .*; the state is unchanged\. Await that"
    r" work inside the turn, or make the change in a turn: call or tell the actor, or set a"
    r" timer or reminder whose handler makes it$"
)


def test_outside_turns_every_assignment_and_deletion_raises_and_changes_nothing() -> None:
    s = State({"count": b"1", "items": b'["a"]'})
    changes: list[tuple[str, Callable[[], object]]] = [
        ("set key 'count'", lambda: s.__setitem__("count", 2)),
        ("set key 'count'", lambda: s.set("count", 2, ttl="1h")),
        ("delete key 'count'", lambda: s.__delitem__("count")),
        ("delete key 'count'", lambda: s.pop("count")),
        ("delete key", s.clear),
        ("set key 'added'", lambda: s.setdefault("added", 1)),
        ("set key 'count'", lambda: s.update(count=3)),
    ]
    for change, attempt in changes:
        with pytest.raises(troupe.TroupeError) as raised:
            attempt()
        message = str(raised.value)
        assert message.startswith(f"self.state cannot {change}"), message
        assert " outside any turn: " in message, message
        assert re.search(_INSTEAD, message), message
    # Reads work, setdefault of a key there too.
    assert s.setdefault("count", 5) == 1
    assert dict(s) == {"count": 1, "items": ["a"]}
    assert s._commit() == []


def test_outside_turns_the_error_says_whose_turn_the_task_came_from() -> None:
    s = State({"count": b"1"})
    ended = TurnScope(s, "t/1", "incr")
    s._end(ended)
    with pytest.raises(troupe.TroupeError, match=_INSTEAD) as raised:
        _in_turn(s, ended, lambda: s.__setitem__("count", 2))
    assert str(raised.value).startswith(
        "self.state cannot set key 'count' after its turn ended (in a task that incr of t/1"
        " started and did not await): "
    )
    other = State({})
    with pytest.raises(
        troupe.TroupeError, match=r"cannot set key 'count' in elsewhere of t/1, which is not"
    ):
        _in_turn(s, TurnScope(other, "t/1", "elsewhere"), lambda: s.__setitem__("count", 2))
    assert dict(s) == {"count": 1}


# What the test and LateWriter wait for: set by the test.
_LATE: dict[str, Any] = {}


@troupe.actor("late_writer")
class LateWriter(troupe.Actor):
    @troupe.method
    async def leave_work(self) -> int:
        async def later() -> None:
            await _LATE["go"].wait()
            thrown: list[BaseException | None] = []
            changes: list[Callable[[], object]] = [
                lambda: self.state.__setitem__("count", 99),
                lambda: self.state.setdefault("items", []),
                lambda: self.state.update(count=98),
            ]
            for change in changes:
                try:
                    change()
                    thrown.append(None)
                except Exception as e:
                    thrown.append(e)
            _LATE["thrown"].set_result(thrown)

        # Left running: the task outlives this turn.
        _LATE["task"] = asyncio.ensure_future(later())
        return int(self.state.get("count", 0))

    @troupe.method
    async def incr_when_released(self) -> int:
        """Waits for the test, then adds one to count: a turn running while the task does."""
        _LATE["running"] += 1
        if _LATE["running"] == 2:
            _LATE["both_running"].set()
        await _LATE["release"].wait()
        self.state["count"] = self.state.get("count", 0) + 1
        return int(self.state["count"])


async def test_a_task_that_outlived_its_turn_cannot_change_state(troupe_env: TestEnv) -> None:
    loop = asyncio.get_running_loop()
    _LATE.update(
        go=asyncio.Event(),
        release=asyncio.Event(),
        both_running=asyncio.Event(),
        running=0,
        thrown=loop.create_future(),
    )
    await troupe_env.host(LateWriter)
    writer = troupe_env.actor(LateWriter, "w1")
    assert await writer.leave_work() == 0
    # A turn of the same actor and one of another run while the task does.
    same = asyncio.ensure_future(writer.incr_when_released())
    other = asyncio.ensure_future(troupe_env.actor(LateWriter, "w2").incr_when_released())
    await asyncio.wait_for(_LATE["both_running"].wait(), 10)
    _LATE["go"].set()
    thrown = await asyncio.wait_for(_LATE["thrown"], 10)
    assert [type(e) for e in thrown] == [troupe.TroupeError] * 3, thrown
    assert str(thrown[0]).startswith(
        "self.state cannot set key 'count' after its turn ended (in a task that leave_work of"
        " late_writer/w1 started and did not await): "
    )
    _LATE["release"].set()
    assert await asyncio.gather(same, other) == [1, 1]
    assert await troupe_env.state(LateWriter, "w1") == {"count": 1}
    assert await troupe_env.state(LateWriter, "w2") == {"count": 1}
