"""End-to-end tests: the SDK on both sides of the real daemon binary."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import pytest

import troupe

from .conftest import Daemon, hosting


@troupe.actor("counter")
class Counter(troupe.Actor):
    @troupe.method
    async def incr(self, by: int = 1) -> int:
        self.state["count"] = self.state.get("count", 0) + by
        return int(self.state["count"])

    @troupe.method
    def get(self) -> int:
        return int(self.state.get("count", 0))

    @troupe.method
    async def fail_after_write(self, value: int) -> None:
        self.state["count"] = value
        raise ValueError(f"bad value {value}")

    @troupe.method
    def echo_bytes(self, data: bytes) -> bytes:
        return data[::-1]


async def test_decorated_actor_called_from_separate_client(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Counter):
        c1 = client.actor("counter", "c1")
        assert await c1.incr(by=5) == 5
        assert await c1.incr(2) == 7
        assert await client.invoke("counter", "c1", "incr", {"by": 3}) == 10
        assert await client.invoke("counter", "c1", "incr", [1]) == 11
        await client.tell("counter", "c1", "incr", {"by": 100})
        # The mailbox is ordered, so this call runs after the told one.
        assert await c1.get() == 111
        await client.actor(Counter, "c1").tell(Counter.incr, by=1000)
        assert await c1.get() == 1111
        await c1.tell("incr", 10000)
        assert await c1.get() == 11111
        assert await client.get_state("counter", "c1") == {"count": 11111}
        assert await client.get_state("counter", "c1", raw=True) == {"count": b"11111"}
        assert await client.get_state("counter", "other") == {}
        assert await client.invoke("counter", "c1", "echo_bytes", b"\x00abc") == b"cba\x00"
        with troupe.SyncClient(daemon.address) as sync:
            assert await asyncio.to_thread(lambda: sync.actor("counter", "c2").incr(by=4)) == 4
            await asyncio.to_thread(lambda: sync.actor(Counter, "c2").tell(Counter.incr, by=6))
            assert await client.actor("counter", "c2").get() == 10


async def test_state_survives_daemon_restart_and_app_reconnects(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Counter) as app:
        assert await client.actor("counter", "persist").incr(by=3) == 3
        sessions = app.sessions
        assert await daemon.stop() == 0, daemon.log_tail()
        await daemon.start()
        await app.wait_registered(sessions=sessions + 1, timeout=15)
        assert await client.get_state("counter", "persist") == {"count": 3}
        assert await client.actor("counter", "persist").incr(by=1) == 4


async def test_a_daemon_restart_is_logged_once_as_a_reconnect(
    daemon: Daemon, client: troupe.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="troupe")
    async with hosting(daemon.address, Counter) as app:
        sessions = app.sessions
        assert await daemon.stop() == 0, daemon.log_tail()
        await daemon.start()
        await app.wait_registered(sessions=sessions + 1, timeout=15)
    records = [r for r in caplog.records if r.name == "troupe"]
    messages = [r.getMessage() for r in records]
    # The record names its logger; the message does not repeat it ("troupe: troupe: ...").
    assert not [m for m in messages if m.startswith("troupe:")], messages
    # A stream the daemon ended cleanly is a restart to ride out, not a gRPC status to show.
    assert not [m for m in messages if "StatusCode" in m], messages
    loud = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert loud == [
        f"the daemon at {daemon.address} closed the app's stream (stopping or restarting);"
        " re-connecting until it is back"
    ], messages
    registered = [m for m in messages if m.startswith("registered counter with daemon")]
    assert len(registered) == 2, messages


async def test_concurrent_calls_on_one_actor_are_serialised(
    daemon: Daemon, client: troupe.Client
) -> None:
    inside = 0
    overlaps = 0

    @troupe.actor("serial")
    class Serial(troupe.Actor):
        @troupe.method
        async def incr(self) -> int:
            nonlocal inside, overlaps
            inside += 1
            overlaps += inside > 1
            # Yield to the loop so an overlapping turn, if the daemon sent one, would run now.
            for _ in range(3):
                await asyncio.sleep(0)
            self.state["n"] = self.state.get("n", 0) + 1
            inside -= 1
            return int(self.state["n"])

    async with hosting(daemon.address, Serial):
        proxy = client.actor("serial", "s1")
        results = await asyncio.gather(*(proxy.incr() for _ in range(100)))
        assert sorted(results) == list(range(1, 101))
        assert overlaps == 0
        assert await client.get_state("serial", "s1") == {"n": 100}


async def test_different_actors_run_concurrently(daemon: Daemon, client: troupe.Client) -> None:
    arrived = 0
    everyone_in = asyncio.Event()

    @troupe.actor("meet")
    class Meet(troupe.Actor):
        @troupe.method
        async def rendezvous(self) -> str:
            nonlocal arrived
            arrived += 1
            if arrived == 10:
                everyone_in.set()
            # Completes only if all 10 turns are in flight at once.
            await asyncio.wait_for(everyone_in.wait(), 10)
            return self.id

    async with hosting(daemon.address, Meet):
        ids = [f"m{i}" for i in range(10)]
        results = await asyncio.gather(*(client.actor("meet", i).rendezvous() for i in ids))
        assert results == ids


async def test_actor_calls_another_actor_inside_a_turn(
    daemon: Daemon, client: troupe.Client
) -> None:
    @troupe.actor("front")
    class Front(troupe.Actor):
        @troupe.method
        async def add_twice(self, target: str, by: int) -> list[int]:
            first = await self.ctx.actor("counter", target).incr(by=by)
            second = await self.ctx.invoke("counter", target, "incr", {"by": by})
            await self.ctx.tell("counter", target, "incr", {"by": 0})
            await self.ctx.actor(Counter, target).tell(Counter.incr, by=10)
            self.state["last"] = second
            return [first, second]

        @troupe.method
        async def relay_failure(self) -> None:
            await self.ctx.actor("counter", "x").fail_after_write(value=13)

    async with hosting(daemon.address, Counter, Front):
        assert await client.actor("front", "f").add_twice("t1", 2) == [2, 4]
        assert await client.get_state("front", "f") == {"last": 4}
        # Both tells were queued before the turn ended, so they ran before this call.
        assert await client.actor("counter", "t1").get() == 14
        with pytest.raises(troupe.ActorError) as err:
            await client.actor("front", "f").relay_failure()
        assert err.value.remote_type == "ValueError"
        assert "bad value 13" in err.value.message
        # The relaying actor's traceback leads on to the one that raised.
        trace = err.value.remote_traceback
        assert "in relay_failure" in trace, trace
        assert 'raise ValueError(f"bad value {value}")' in trace, trace
        assert trace.index("in relay_failure") < trace.index("in fail_after_write"), trace


async def test_remote_exception_becomes_actor_error_and_rolls_back(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Counter):
        c = client.actor("counter", "err")
        assert await c.incr(by=1) == 1
        with pytest.raises(troupe.ActorError) as err:
            await c.fail_after_write(value=99)
        assert err.value.remote_type == "ValueError"
        assert err.value.message == "bad value 99"
        # Where it raised: the app's traceback, as the daemon passed it on.
        trace = err.value.remote_traceback
        assert "in fail_after_write" in trace, trace
        # ...from the actor's first frame: not the SDK's frames that ran the turn.
        assert trace.splitlines()[1].startswith(f'  File "{__file__}"'), trace
        assert trace.rstrip().endswith("ValueError: bad value 99"), trace
        if sys.version_info >= (3, 11):
            assert trace.rstrip() in "\n".join(err.value.__notes__)
        # Neither the stored state nor the instance's own view kept the failed write.
        assert await client.get_state("counter", "err") == {"count": 1}
        assert await c.get() == 1
        with pytest.raises(troupe.ActorError) as err:
            await c.no_such_method()
        assert "incr" in err.value.message
        with pytest.raises(troupe.ActorError) as err:
            await c.incr(by=1, unexpected=2)
        assert err.value.remote_type == "TypeError"


async def test_a_failed_tell_is_logged_in_the_app(
    daemon: Daemon, client: troupe.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="troupe")

    def warned() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "troupe" and "raised" in r.getMessage()]

    async with hosting(daemon.address, Counter):
        # A best-effort tell's error reaches no caller: the app logs it, with where.
        await client.tell("counter", "told", "fail_after_write", {"value": 7})
        # One turn of an actor at a time, in order per caller: once this call is
        # answered, the tell's turn has ended.
        assert await client.actor("counter", "told").get() == 0
        [record] = warned()
        assert record.getMessage().startswith(
            "tell fail_after_write of counter/told raised ValueError: bad value 7"
        ), record.getMessage()
        logged = caplog.text
        assert 'raise ValueError(f"bad value {value}")' in logged, logged
        assert "in _run_turn" not in logged, logged  # the SDK's frames are left out
        # An invoke's error goes to its caller, and is not logged here too.
        with pytest.raises(troupe.ActorError):
            await client.actor("counter", "told").fail_after_write(value=8)
        assert len(warned()) == 1, caplog.text


async def test_lifecycle_hooks(daemon: Daemon, client: troupe.Client) -> None:
    deactivated = asyncio.Event()

    @troupe.actor("hooks", idle_timeout=0.3)
    class Hooks(troupe.Actor):
        async def on_activate(self) -> None:
            self.state["activations"] = self.state.get("activations", 0) + 1

        def on_deactivate(self) -> None:
            self.state["deactivated"] = True
            deactivated.set()

        @troupe.method
        def activations(self) -> int:
            return int(self.state["activations"])

    async with hosting(daemon.address, Hooks):
        assert await client.actor("hooks", "h").activations() == 1
        await asyncio.wait_for(deactivated.wait(), 15)
        state: dict[str, Any] = {}
        for _ in range(100):
            state = await client.get_state("hooks", "h")
            if state.get("deactivated"):
                break
            await asyncio.sleep(0.05)  # the deactivation's changes land just after the hook
        assert state == {"activations": 1, "deactivated": True}
        assert await client.actor("hooks", "h").activations() == 2


async def test_not_found_for_unregistered_type(daemon: Daemon, client: troupe.Client) -> None:
    async with hosting(daemon.address, Counter):
        with pytest.raises(troupe.NotFound) as err:
            await client.actor("nosuchtype", "x").anything()
        assert "counter" in str(err.value)


@pytest.mark.daemon_args("--max-payload-bytes", "1024")
async def test_invalid_argument(daemon: Daemon, client: troupe.Client) -> None:
    async with hosting(daemon.address, Counter):
        with pytest.raises(troupe.InvalidArgument):
            await client.actor("counter", "").incr()
        with pytest.raises(troupe.InvalidArgument):
            await client.actor("counter", "big").incr(by=1, pad="x" * 4096)
        assert await client.actor("counter", "big").incr(by=1) == 1


class _RetrySeen(logging.Handler):
    """Sets ``event`` at the SDK's first retry line (both cores log it on the loop)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.event = asyncio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if "same idempotency key" in line:
            self.lines.append(line)
            self.event.set()


async def test_full_mailbox_is_overloaded(daemon: Daemon, client: troupe.Client) -> None:
    """Sent once, a call to a full mailbox fails with Overloaded. Retried (the default),
    it waits for room: the daemon marks the refusal as having run nothing (gRPC's retry
    pushback), so the SDK resends it."""
    entered = asyncio.Event()
    release = asyncio.Event()
    pinged = asyncio.Condition()
    pings = 0

    @troupe.actor("narrow", max_mailbox=2)
    class Narrow(troupe.Actor):
        @troupe.method
        async def hold(self) -> None:
            entered.set()
            await release.wait()

        @troupe.method
        async def ping(self) -> str:
            nonlocal pings
            async with pinged:
                pings += 1
                pinged.notify_all()
            return "pong"

    async with hosting(daemon.address, Narrow):
        held = asyncio.create_task(client.actor("narrow", "n").hold())
        await asyncio.wait_for(entered.wait(), 10)
        told = 0
        async with troupe.Client(daemon.address, timeout=20, retry=False) as once:
            with pytest.raises(troupe.Overloaded) as err:
                for _ in range(10):
                    await once.tell("narrow", "n", "ping")
                    told += 1
        assert "mailbox" in str(err.value) and "retried" not in str(err.value)
        seen = _RetrySeen()
        sdk_log = logging.getLogger("troupe")
        level = sdk_log.level
        sdk_log.addHandler(seen)
        sdk_log.setLevel(logging.DEBUG)
        try:
            waiting = asyncio.create_task(client.actor("narrow", "n").ping())
            await asyncio.wait_for(seen.event.wait(), 10)
        finally:
            sdk_log.removeHandler(seen)
            sdk_log.setLevel(level)
        assert "RESOURCE_EXHAUSTED" in seen.lines[0] and "mailbox" in seen.lines[0]
        assert not waiting.done()
        release.set()
        await held
        assert await asyncio.wait_for(waiting, 10) == "pong"
        # The told pings may still be queued after hold answered: wait until they ran,
        # so the mailbox has room again.
        async with pinged:
            await asyncio.wait_for(pinged.wait_for(lambda: pings >= told), 10)
        assert await client.actor("narrow", "n").ping() == "pong"


async def test_app_disconnect_mid_call_is_unavailable(daemon: Daemon) -> None:
    entered = asyncio.Event()

    @troupe.actor("stuck")
    class Stuck(troupe.Actor):
        @troupe.method
        async def forever(self) -> None:
            entered.set()
            await asyncio.Event().wait()

    # Sent once, the call fails when the app goes; retried (the default), it keeps
    # waiting for an app to host the type again until its deadline.
    async with (
        troupe.Client(daemon.address, timeout=20, retry=False) as once,
        troupe.Client(daemon.address, timeout=2) as retrying,
    ):
        async with hosting(daemon.address, Stuck) as app:
            call = asyncio.create_task(once.actor("stuck", "s").forever())
            await asyncio.wait_for(entered.wait(), 10)
            app.stop()
            with pytest.raises(troupe.Unavailable):
                await asyncio.wait_for(call, 15)
        # The last attempt may be the one the deadline ends, while the daemon waits for a
        # host: then DeadlineExceeded, which still says what was retried.
        with pytest.raises((troupe.Unavailable, troupe.DeadlineExceeded), match="retried"):
            await asyncio.wait_for(retrying.actor("stuck", "s").forever(), 10)


async def test_caller_timeout_is_deadline_exceeded(daemon: Daemon) -> None:
    @troupe.actor("slow")
    class Slow(troupe.Actor):
        @troupe.method
        async def nap(self) -> None:
            await asyncio.Event().wait()

    async with hosting(daemon.address, Slow), troupe.Client(daemon.address) as c:
        with pytest.raises(troupe.DeadlineExceeded):
            await c.actor("slow", "z", timeout=0.3).nap()


async def test_unreachable_daemon_is_unavailable() -> None:
    from .conftest import free_port

    async with troupe.Client(f"127.0.0.1:{free_port()}", timeout=2) as c:
        with pytest.raises(troupe.Unavailable):
            await c.actor("counter", "c").incr()
