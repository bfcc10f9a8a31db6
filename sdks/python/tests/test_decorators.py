from __future__ import annotations

import re
from datetime import timedelta

import pytest

import troupe
from troupe._actor import spec_of
from troupe._proto.troupe.v1 import common_pb2


def test_actor_spec_carries_options_and_methods() -> None:
    @troupe.actor("counter", idle_timeout=timedelta(seconds=30), state="durable", max_mailbox=8)
    class Counter(troupe.Actor):
        @troupe.method
        async def incr(self, by: int = 1) -> int:
            return by

        @troupe.method(name="get", readonly=True)
        def current(self) -> int:
            return 0

        async def helper(self) -> None:  # not exposed
            pass

    spec = spec_of(Counter)
    assert spec.methods == {"incr": "incr", "get": "current"}
    proto = spec.to_proto()
    assert proto.name == "counter"
    assert proto.idle_timeout_ms == 30_000
    assert proto.state_mode == common_pb2.STATE_MODE_DURABLE
    assert proto.max_mailbox == 8
    assert list(proto.readonly_methods) == ["get"]
    assert proto.retention_ms == 0


def test_retention_reaches_the_registration() -> None:
    @troupe.actor("session", retention="90d")
    class Session(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

    assert spec_of(Session).to_proto().retention_ms == 90 * 24 * 3600 * 1000


def test_methods_are_inherited() -> None:
    class Base(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

    @troupe.actor("child")
    class Child(Base):
        pass

    assert spec_of(Child).methods == {"ping": "ping"}


def test_misuse_is_explained() -> None:
    with pytest.raises(TypeError, match=re.escape("no @troupe.method")):

        @troupe.actor("empty")
        class Empty(troupe.Actor):
            pass

    with pytest.raises(TypeError, match=re.escape("subclass of troupe.Actor")):
        troupe.actor("x")(object)  # type: ignore[type-var]

    with pytest.raises(ValueError, match="state must be"):
        troupe.actor("x", state="eventually")  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="actor type name"):
        troupe.actor("has space")

    class Plain(troupe.Actor):
        pass

    with pytest.raises(TypeError, match=re.escape("decorate it with @troupe.actor")):
        troupe.App(actors=[Plain])


def test_duplicate_type_names_are_refused() -> None:
    def make() -> type[troupe.Actor]:
        @troupe.actor("dup")
        class Dup(troupe.Actor):
            @troupe.method
            def m(self) -> None:
                pass

        return Dup

    with pytest.raises(ValueError, match="dup"):
        troupe.App(actors=[make(), make()])


def test_errors_form_a_hierarchy() -> None:
    for cls in (
        troupe.NotFound,
        troupe.InvalidArgument,
        troupe.Overloaded,
        troupe.Unavailable,
        troupe.DeadlineExceeded,
        troupe.FailedPrecondition,
        troupe.ActorError,
    ):
        assert issubclass(cls, troupe.TroupeError)
    e = troupe.ActorError("ValueError", "bad")
    assert (e.remote_type, e.message, str(e)) == ("ValueError", "bad", "ValueError: bad")
