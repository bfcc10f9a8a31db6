"""State keys that expire: State.set(..., ttl=...), what it sends (StateChange.ttl_ms), how
the view drops keys the daemon let expire (Turn.expired_keys), and all of it on the real
daemon through the test kit, its clock moved by advance()."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import troupe
from troupe import ReadOnlyStateError, State
from troupe._proto.troupe.v1 import common_pb2
from troupe._turn import TurnScope, current_turn
from troupe.testing import TestEnv

from .state_turns import in_turn as _turn

HOUR_MS = 3_600_000

# --- State, no daemon -------------------------------------------------------------------


def _in_turn(scope: TurnScope, fn: Callable[[], object]) -> None:
    token = current_turn.set(scope)
    try:
        fn()
    finally:
        current_turn.reset(token)


def _ended(s: State, scope: TurnScope) -> dict[str, tuple[bytes | None, int | None]]:
    """What the end of ``scope``, a turn that succeeded, sends, as _sent gives it."""
    changes = s._commit(scope)
    s._end(scope)
    return _sent(changes)


def _sent(changes: list[common_pb2.StateChange]) -> dict[str, tuple[bytes | None, int | None]]:
    """Each change as (value, ttl_ms): value None for a delete, ttl None when unset."""
    return {
        c.key: (
            None if c.WhichOneof("op") == "delete" else c.set,
            c.ttl_ms if c.HasField("ttl_ms") else None,
        )
        for c in changes
    }


def test_set_sends_the_ttl_and_a_plain_assignment_leaves_it_unset() -> None:
    s = State({})
    with _turn(s) as turn:
        s.set("otp", "1234", ttl="1h")
        s.set("session", {"user": "ada"}, ttl=timedelta(minutes=30))
        s.set("count", 1, ttl=90)  # a number is seconds
        s["plain"] = True
    assert _ended(s, turn) == {
        "otp": (b'"1234"', HOUR_MS),
        "session": (b'{"user":"ada"}', 1_800_000),
        "count": (b"1", 90_000),
        "plain": (b"true", None),
    }


def test_ttl_none_ends_the_expiry_with_ttl_zero() -> None:
    s = State({"otp": b'"1234"'})
    with _turn(s) as turn:
        s.set("otp", "1234", ttl=None)
    # Unchanged value, yet sent: ttl_ms 0 is what ends the daemon's expiry.
    assert _ended(s, turn) == {"otp": (b'"1234"', 0)}


def test_set_with_the_same_value_is_sent_to_renew_the_expiry() -> None:
    s = State({"otp": b'"1234"'})
    with _turn(s) as turn:
        s["otp"] = "1234"
    assert _ended(s, turn) == {}  # a plain assignment of the same value sends nothing
    with _turn(s) as turn:
        s.set("otp", "1234", ttl="10m")
    assert _ended(s, turn) == {"otp": (b'"1234"', 600_000)}
    # Sent once: the next changes carry no ttl for it.
    with _turn(s) as turn:
        s["otp"] = "5678"
    assert _ended(s, turn) == {"otp": (b'"5678"', None)}


def test_changes_in_place_keep_the_expiry() -> None:
    s = State({"items": b"[1]"})
    with _turn(s) as turn:
        s["items"].append(2)
    assert _ended(s, turn) == {"items": (b"[1,2]", None)}


def test_a_key_deleted_and_set_again_in_one_turn_loses_its_expiry() -> None:
    s = State({"otp": b'"1234"', "gone": b"1"})
    with _turn(s) as turn:
        del s["otp"]
        s["otp"] = "1234"
        del s["gone"]
    # Net, the key was set again: ttl 0 ends the expiry the daemon keeps for it.
    assert _ended(s, turn) == {"otp": (b'"1234"', 0), "gone": (None, None)}


def test_a_key_set_with_ttl_then_deleted_is_only_deleted() -> None:
    s = State({"otp": b'"1234"'})
    with _turn(s) as turn:
        s.set("otp", "5678", ttl="1h")
        del s["otp"]
    assert _ended(s, turn) == {"otp": (None, None)}


@pytest.mark.parametrize("ttl", [0.5, "500ms", timedelta(milliseconds=999), "PT0.1S"])
def test_a_ttl_under_a_second_is_refused_at_the_call(ttl: Any) -> None:
    s = State({"k": b"1"})
    with pytest.raises(ValueError, match=r"ttl must be at least a second.*bare number is seconds"):
        s.set("k", 2, ttl=ttl)
    assert s["k"] == 1
    assert s._commit() == []


def test_a_ttl_of_zero_points_to_none() -> None:
    s = State({})
    with pytest.raises(ValueError, match=r"at least a second, got 0 \(0 ms\); ttl=None makes"):
        s.set("k", 2, ttl=0)
    assert "k" not in s


def test_a_ttl_that_is_not_a_duration_is_refused() -> None:
    s = State({})
    with pytest.raises(troupe.InvalidArgument, match="ttl 'soon' is not a duration"):
        s.set("k", 1, ttl="soon")
    with pytest.raises(troupe.InvalidArgument, match="cannot be negative"):
        s.set("k", 1, ttl=-5)
    assert s._commit() == []


def test_the_daemons_expiry_key_cannot_be_written() -> None:
    s = State({})
    with pytest.raises(ValueError, match=r"'\$expires' is the daemon's"):
        s["$expires"] = 1
    with pytest.raises(ValueError, match=r"'\$expires' is the daemon's"):
        s.set("$expires", 1, ttl="1h")
    with pytest.raises(ValueError, match=r"'\$expires/token' is the daemon's"):
        s["$expires/token"] = 1
    assert s._commit() == []


def test_a_read_only_turn_cannot_set_a_ttl() -> None:
    s = State({"k": b"1"})
    scope = TurnScope(s, "t/1", "peek", readonly=True)
    with pytest.raises(ReadOnlyStateError, match="tried to set key 'k'"):
        _in_turn(scope, lambda: s.set("k", 1, ttl="1h"))
    assert s._refuse(scope) == []
    assert scope.ttls == {}


def test_a_failed_turn_forgets_its_ttls() -> None:
    s = State({"k": b"1"})
    failed = TurnScope(s, "t/1", "fail")
    _in_turn(failed, lambda: s.set("k", 1, ttl="1h"))
    s._rollback(failed)
    s._end(failed)
    after = TurnScope(s, "t/1", "after")
    _in_turn(after, lambda: s.__setitem__("k", 2))
    assert _sent(s._commit(after)) == {"k": (b"2", None)}


def test_each_turn_sends_only_its_own_ttls() -> None:
    s = State({"a": b"0"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(outer, lambda: s.set("a", 0, ttl="1h"))
    # The nested turn reads the outer turn's key and writes its own.
    _in_turn(inner, lambda: s.__setitem__("b", s["a"] + 1))
    assert _sent(s._commit(inner)) == {"b": (b"1", None)}
    s._end(inner)
    assert _sent(s._commit(outer)) == {"a": (b"0", HOUR_MS)}
    s._end(outer)


def test_expired_keys_leave_the_view_and_send_nothing() -> None:
    s = State({"otp": b'"1234"', "keep": b"1"})
    s._expire(["otp", "never-had"])
    assert dict(s) == {"keep": 1}
    assert s._commit() == []
    # Set again, the key is new to the daemon: sent even with its old value.
    with _turn(s) as turn:
        s["otp"] = "1234"
    assert _ended(s, turn) == {"otp": (b'"1234"', None)}


def test_a_running_turns_unsent_change_outlives_the_expiry() -> None:
    s = State({"a": b"0", "b": b"0", "c": b"[]", "d": b"0"})
    outer = TurnScope(s, "t/1", "outer")

    def change() -> None:
        s["a"] = 5  # assigned
        s["c"].append(1)  # changed in place
        _ = s["b"]  # only read
        s["d"] = 0  # assigned the value it holds

    _in_turn(outer, change)
    s._expire(["a", "b", "c", "d"])
    # The daemon applies the outer turn's changes after the expiry: they set the keys again.
    assert dict(s) == {"a": 5, "c": [1], "d": 0}
    assert _sent(s._commit(outer)) == {"a": (b"5", None), "c": (b"[1]", None), "d": (b"0", None)}
    s._end(outer)


def test_a_key_only_read_outside_turns_goes_with_the_expiry() -> None:
    s = State({"read": b"0", "kept": b"1"})
    _ = s["read"]  # by a task that outlived its turn
    s._expire(["read"])
    assert dict(s) == {"kept": 1}
    with _turn(s) as turn:
        pass
    assert _ended(s, turn) == {}


def test_a_failed_turn_does_not_bring_an_expired_value_back() -> None:
    s = State({"a": b"0"})
    outer = TurnScope(s, "t/1", "outer")
    inner = TurnScope(s, "t/1", "inner")
    _in_turn(outer, lambda: s["a"])
    s._expire(["a"])  # reported by the nested turn, before it runs

    def nested() -> None:
        s["b"] = "a" in s
        s["a"] = 1  # the nested turn touches "a" too, leaving it as it found it
        del s["a"]

    _in_turn(inner, nested)
    # The outer turn fails while the nested one still runs: "a" goes back to what the
    # outer turn first saw, which is absent now, not the expired value.
    s._rollback(outer)
    s._end(outer)
    assert "a" not in s
    assert _sent(s._commit(inner)) == {"b": (b"false", None)}
    s._end(inner)


# --- On the daemon ----------------------------------------------------------------------

# Activations per actor id: a key gone with no new activation came in Turn.expired_keys.
_ACTIVATIONS: Counter[str] = Counter()
# Changes an actor left for later, tried by the test outside any turn (as by a task that
# outlived its turn).
_LATER: list[Callable[[], None]] = []


@troupe.actor("ttl_box")
class TtlBox(troupe.Actor):
    async def on_activate(self) -> None:
        _ACTIVATIONS[self.id] += 1

    @troupe.method
    async def put(self, key: str, value: Any, ttl: Any) -> None:
        self.state.set(key, value, ttl=ttl)

    @troupe.method
    async def assign(self, key: str, value: Any) -> None:
        self.state[key] = value

    @troupe.method
    async def assign_later(self, key: str, value: Any) -> None:
        _LATER.append(lambda: self.state.__setitem__(key, value))

    @troupe.method
    async def remove(self, key: str) -> None:
        del self.state[key]

    @troupe.method
    async def recreate(self, key: str, value: Any) -> None:
        del self.state[key]
        self.state[key] = value

    @troupe.method
    async def put_then_fail(self, key: str, value: Any, ttl: Any) -> None:
        self.state.set(key, value, ttl=ttl)
        raise RuntimeError("the turn fails after set")

    @troupe.method(readonly=True)
    async def peek(self) -> dict[str, Any]:
        return dict(self.state)

    @troupe.method
    async def remind(self, due: str) -> None:
        await self.ctx.set_reminder("look", due)

    async def on_reminder(self, name: str, data: Any) -> None:
        self.state["saw_otp"] = "otp" in self.state


async def test_a_key_expires_after_its_ttl(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b1")
    before = await troupe_env.daemon.now()
    await box.put("otp", "1234", "1h")
    after = await troupe_env.daemon.now()
    await box.assign("keep", 1)
    expiry = await troupe_env.client.get_state_expiry("ttl_box", "b1")
    assert set(expiry) == {"otp"}
    assert before + timedelta(hours=1) <= expiry["otp"] <= after + timedelta(hours=1)

    await troupe_env.advance("59m")
    assert await box.peek() == {"otp": "1234", "keep": 1}
    assert await troupe_env.state(TtlBox, "b1") == {"otp": "1234", "keep": 1}
    await troupe_env.advance("2m")
    assert await troupe_env.state(TtlBox, "b1") == {"keep": 1}
    assert await troupe_env.client.get_state_expiry("ttl_box", "b1") == {}
    assert await box.peek() == {"keep": 1}
    assert _ACTIVATIONS["b1"] == 1  # the same instance, told by the turn


async def test_a_plain_assignment_keeps_the_expiry(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b2")
    await box.put("otp", "1234", "1h")
    await troupe_env.advance("30m")
    await box.assign("otp", "5678")
    await troupe_env.advance("29m")
    assert await box.peek() == {"otp": "5678"}
    await troupe_env.advance("2m")
    assert await box.peek() == {}
    assert await troupe_env.state(TtlBox, "b2") == {}


async def test_an_assignment_outside_turns_is_refused_and_the_key_still_expires(
    troupe_env: TestEnv,
) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b11")
    await box.put("otp", "1234", "1h")
    await box.assign_later("otp", "1234")
    # Before, the actor's next turn sent this assignment as its own, setting the key again.
    with pytest.raises(troupe.TroupeError, match="cannot set key 'otp' outside any turn"):
        _LATER.pop()()
    await troupe_env.advance("61m")
    await box.assign("other", 1)
    assert _ACTIVATIONS["b11"] == 1
    assert await troupe_env.state(TtlBox, "b11") == {"other": 1}


async def test_ttl_none_ends_the_expiry(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b3")
    await box.put("otp", "1234", "1h")
    await box.put("otp", "1234", None)
    assert await troupe_env.client.get_state_expiry("ttl_box", "b3") == {}
    await troupe_env.advance("2h")
    assert await box.peek() == {"otp": "1234"}
    assert await troupe_env.state(TtlBox, "b3") == {"otp": "1234"}


async def test_set_with_the_same_value_renews_the_expiry(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b4")
    await box.put("otp", "1234", "1h")
    await troupe_env.advance("40m")
    await box.put("otp", "1234", "1h")
    await troupe_env.advance("40m")  # 80 minutes after the first set
    assert await box.peek() == {"otp": "1234"}
    await troupe_env.advance("21m")
    assert await box.peek() == {}


async def test_a_key_deleted_and_set_again_without_ttl_does_not_expire(
    troupe_env: TestEnv,
) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b5")
    # In two turns, and in one.
    await box.put("a", 1, "1h")
    await box.remove("a")
    await box.assign("a", 2)
    await box.put("b", 1, "1h")
    await box.recreate("b", 1)
    await troupe_env.advance("2h")
    assert await box.peek() == {"a": 2, "b": 1}
    assert await troupe_env.state(TtlBox, "b5") == {"a": 2, "b": 1}


async def test_a_ttl_under_a_second_fails_the_turn_at_the_call(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b6")
    await box.assign("otp", "1234")
    with pytest.raises(troupe.ActorError) as raised:
        await box.put("otp", "5678", 0.5)
    assert raised.value.remote_type == "ValueError"
    assert "at least a second" in raised.value.message
    assert await troupe_env.state(TtlBox, "b6") == {"otp": "1234"}


async def test_a_failed_turns_ttl_is_not_applied(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b7")
    await box.assign("otp", "1234")
    with pytest.raises(troupe.ActorError, match="the turn fails after set"):
        await box.put_then_fail("otp", "1234", "1h")
    # A later writing turn of the key must not carry the failed turn's ttl either.
    await box.assign("otp", "1234")
    await box.assign("other", 1)
    assert await troupe_env.client.get_state_expiry("ttl_box", "b7") == {}
    await troupe_env.advance("2h")
    assert await box.peek() == {"otp": "1234", "other": 1}


async def test_an_expired_key_stays_gone_across_activations(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    told = troupe_env.actor(TtlBox, "b8")  # told in a turn, then deactivated
    await told.put("otp", "1234", "1h")
    await told.assign("keep", 1)
    idle = troupe_env.actor(TtlBox, "b9")  # not active when its key expires
    await idle.put("otp", "1234", "1h")
    await idle.assign("keep", 1)
    assert await troupe_env.deactivate(TtlBox, "b9")

    await troupe_env.advance("61m")
    assert await told.peek() == {"keep": 1}
    assert await troupe_env.deactivate(TtlBox, "b8")
    assert await told.peek() == {"keep": 1}
    assert await idle.peek() == {"keep": 1}
    assert _ACTIVATIONS["b8"] == 2 and _ACTIVATIONS["b9"] == 2
    assert await troupe_env.state(TtlBox, "b8") == {"keep": 1}
    assert await troupe_env.state(TtlBox, "b9") == {"keep": 1}


async def test_a_reminder_turn_does_not_see_an_expired_key(troupe_env: TestEnv) -> None:
    await troupe_env.host(TtlBox)
    box = troupe_env.actor(TtlBox, "b10")
    await box.put("otp", "1234", "1h")
    await box.remind("2h")
    await troupe_env.advance("3h")
    # The reminder ran (the daemon's own $expire reminder may have fired too).
    assert await troupe_env.state(TtlBox, "b10") == {"saw_otp": False}
    assert _ACTIVATIONS["b10"] == 1
