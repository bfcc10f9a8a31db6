"""Reminders, alarms and timers end to end: the SDK on both sides of the real daemon.

The app runs in the test's event loop, so actors report firings through asyncio
queues the test awaits (every wait bounded). Only checks that something does
*not* happen (no extra firing) wait for a fixed window.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import troupe

from .conftest import Daemon, hosting

WAIT = 15.0  # upper bound for anything the test awaits


async def take(queue: asyncio.Queue[Any], n: int = 1, timeout: float = WAIT) -> list[Any]:
    """The next n items put into the queue, failing after timeout seconds."""

    async def get_n() -> list[Any]:
        return [await queue.get() for _ in range(n)]

    return await asyncio.wait_for(get_n(), timeout)


async def extra(queue: asyncio.Queue[Any], window: float) -> list[Any]:
    """Whatever arrives in the queue within `window` seconds (for "no more firings" checks)."""
    await asyncio.sleep(window)
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def until_gone(get: Any, timeout: float = WAIT) -> None:
    """Poll a get_reminder/get_alarm coroutine factory until it returns None."""
    deadline = time.monotonic() + timeout
    while (r := await get()) is not None:
        assert time.monotonic() < deadline, f"still registered after {timeout}s: {r}"
        await asyncio.sleep(0.05)  # nothing to await: the daemon updates the record itself


async def test_reminder_from_client_activates_and_fires_on_inactive_actor(
    daemon: Daemon, client: troupe.Client
) -> None:
    fired: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
    activations: list[str] = []

    @troupe.actor("sleeper")
    class Sleeper(troupe.Actor):
        def on_activate(self) -> None:
            activations.append(self.id)

        @troupe.method
        def ping(self) -> str:
            return "pong"

        async def on_reminder(self, name: str, data: Any) -> None:
            self.state["woken_by"] = name
            fired.put_nowait((self.id, name, data))

    async with hosting(daemon.address, Sleeper):
        before = datetime.now(timezone.utc)
        r = await client.set_reminder("sleeper", "s1", "wake", due="300ms", data={"n": 1})
        assert isinstance(r, troupe.Reminder)
        assert (r.actor_type, r.actor_id, r.name, r.data) == ("sleeper", "s1", "wake", {"n": 1})
        assert (r.period, r.remaining, r.until, r.alarm, r.fired) == (None, None, None, False, 0)
        assert before < r.next_due < before + timedelta(seconds=5)
        assert r.retry.max_attempts == 3  # the daemon's default, filled in
        assert activations == []  # setting a reminder does not activate the actor
        got = await client.get_reminder("sleeper", "s1", "wake")
        assert got is not None and got.name == "wake" and got.next_due == r.next_due

        assert await take(fired) == [("s1", "wake", {"n": 1})]
        assert activations == ["s1"]
        # A one-shot reminder is gone once it fired, and its turn's state change was kept.
        await until_gone(lambda: client.get_reminder("sleeper", "s1", "wake"))
        assert await client.get_state("sleeper", "s1") == {"woken_by": "wake"}


async def test_periodic_reminder_fires_exactly_repeat_times(
    daemon: Daemon, client: troupe.Client
) -> None:
    fired: asyncio.Queue[float] = asyncio.Queue()

    @troupe.actor("ticker")
    class Ticker(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

        async def on_reminder(self, name: str, data: Any) -> None:
            assert (name, data) == ("tick", None)
            self.state["ticks"] = self.state.get("ticks", 0) + 1
            fired.put_nowait(time.monotonic())

    async with hosting(daemon.address, Ticker):
        r = await client.set_reminder("ticker", "t1", "tick", due="0s", period="200ms", repeat=3)
        assert r.period == timedelta(milliseconds=200)
        assert r.remaining == 3
        times = await take(fired, 3)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(g > 0.1 for g in gaps), gaps  # spaced by the period, not a burst
        await until_gone(lambda: client.get_reminder("ticker", "t1", "tick"))
        assert await extra(fired, 0.8) == []
        assert await client.get_state("ticker", "t1") == {"ticks": 3}


async def test_iso_repetition_period(daemon: Daemon, client: troupe.Client) -> None:
    fired: asyncio.Queue[str] = asyncio.Queue()

    @troupe.actor("iso")
    class Iso(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

        def on_reminder(self, name: str, data: Any) -> None:  # a sync handler
            fired.put_nowait(name)

    async with hosting(daemon.address, Iso):
        r = await client.set_reminder(
            "iso", "i1", "rep", due=timedelta(milliseconds=50), period="R2/PT0.1S"
        )
        assert r.period == timedelta(milliseconds=100)
        assert await take(fired, 2) == ["rep", "rep"]
        await until_gone(lambda: client.get_reminder("iso", "i1", "rep"))
        assert await extra(fired, 0.4) == []


async def test_reminder_set_inside_a_turn_via_ctx_fires(
    daemon: Daemon, client: troupe.Client
) -> None:
    fired: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    @troupe.actor("self-sched")
    class SelfScheduling(troupe.Actor):
        @troupe.method
        async def schedule(self, note: str) -> dict[str, Any]:
            r = await self.ctx.set_reminder("later", due="200ms", data={"note": note})
            again = await self.ctx.get_reminder("later")
            listed = await self.ctx.list_reminders()
            missing = await self.ctx.get_reminder("nope")
            self.state["scheduled"] = True
            return {
                "name": r.name,
                "actor": [r.actor_type, r.actor_id],
                "same": again is not None and again.next_due == r.next_due,
                "listed": [x.name for x in listed],
                "missing": missing,
            }

        async def on_reminder(self, name: str, data: Any) -> None:
            fired.put_nowait((name, data))

    async with hosting(daemon.address, SelfScheduling):
        out = await client.actor("self-sched", "a").schedule("hello")
        assert out == {
            "name": "later",
            "actor": ["self-sched", "a"],
            "same": True,
            "listed": ["later"],
            "missing": None,
        }
        assert await take(fired) == [("later", {"note": "hello"})]


async def test_delete_stops_a_periodic_reminder(daemon: Daemon, client: troupe.Client) -> None:
    fired: asyncio.Queue[str] = asyncio.Queue()

    @troupe.actor("stoppable")
    class Stoppable(troupe.Actor):
        stopped = False

        @troupe.method
        async def stop(self) -> bool:
            self.stopped = True
            return await self.ctx.delete_reminder("beat")

        async def on_reminder(self, name: str, data: Any) -> None:
            # Turns of one actor run one at a time: a firing marked so ran after stop().
            fired.put_nowait(f"{name} after stop" if self.stopped else name)

    async with hosting(daemon.address, Stoppable):
        # Deleted from outside.
        await client.set_reminder("stoppable", "x", "beat", due="0s", period="100ms")
        await take(fired, 2)
        assert await client.delete_reminder("stoppable", "x", "beat") is True
        # A firing already dispatched when the delete landed may still run; nothing after it.
        assert len(await extra(fired, 0.6)) <= 1
        assert await extra(fired, 0.6) == []
        assert await client.get_reminder("stoppable", "x", "beat") is None
        assert await client.delete_reminder("stoppable", "x", "beat") is False

        # Deleted from inside a turn: the turn runs between firings, so none follows it.
        await client.set_reminder("stoppable", "y", "beat", due="0s", period="100ms")
        await take(fired, 2)
        assert await client.actor("stoppable", "y").stop() is True
        # Firings that ran before stop() may still be in the queue; none may run after it.
        assert [f for f in await extra(fired, 0.6) if f.endswith("after stop")] == []


async def test_failing_reminder_is_retried_with_backoff_then_dropped(
    daemon: Daemon, client: troupe.Client
) -> None:
    attempts: asyncio.Queue[float] = asyncio.Queue()
    flaky_calls: asyncio.Queue[int] = asyncio.Queue()
    flaky_tries = 0

    @troupe.actor("failing")
    class Failing(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

        async def on_reminder(self, name: str, data: Any) -> None:
            nonlocal flaky_tries
            if name == "flaky":
                flaky_tries += 1
                n = self.state.get("calls", 0) + 1
                self.state["calls"] = n  # discarded when the attempt fails
                flaky_calls.put_nowait(n)
                if flaky_tries == 1:
                    raise RuntimeError("first attempt fails")
                return
            self.state["partial"] = True  # discarded: the turn fails
            attempts.put_nowait(time.monotonic())
            raise ValueError(f"cannot handle {name}")

    retry = troupe.RetryPolicy(max_attempts=3, initial_backoff=timedelta(milliseconds=50))
    async with hosting(daemon.address, Failing):
        r = await client.set_reminder("failing", "f", "doomed", due="0s", retry=retry)
        assert r.retry.max_attempts == 3
        assert r.retry.initial_backoff == timedelta(milliseconds=50)
        times = await take(attempts, 3)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps[0] >= 0.04 and gaps[1] >= 0.08, gaps  # exponential backoff from 50 ms
        assert await extra(attempts, 1.0) == []  # dropped after max_attempts
        assert await client.get_reminder("failing", "f", "doomed") is None
        assert await client.get_state("failing", "f") == {}

        # A handler that fails once is retried and then succeeds; the failed try left no trace.
        await client.set_reminder("failing", "g", "flaky", due="0s", retry=retry)
        assert await take(flaky_calls, 2) == [1, 1]
        assert await extra(flaky_calls, 0.5) == []
        await until_gone(lambda: client.get_reminder("failing", "g", "flaky"))
        assert await client.get_state("failing", "g") == {"calls": 1}


async def test_alarm_replaced_by_second_set_alarm_fires_once_with_second_data(
    daemon: Daemon, client: troupe.Client
) -> None:
    fired: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    @troupe.actor("alarmed")
    class Alarmed(troupe.Actor):
        @troupe.method
        async def arm(self, seconds: float, data: Any) -> str:
            r = await self.ctx.set_alarm(timedelta(seconds=seconds), data)
            return r.next_due.isoformat()

        @troupe.method
        async def disarm(self) -> list[Any]:
            a = await self.ctx.get_alarm()
            return [a is not None and a.alarm, await self.ctx.delete_alarm()]

        async def on_alarm(self, data: Any) -> None:
            self.state["alarm"] = data
            fired.put_nowait((self.id, data))

    async with hosting(daemon.address, Alarmed):
        first = await client.set_alarm("alarmed", "a", timedelta(milliseconds=600), "first")
        assert first.alarm and first.data == "first"
        at = datetime.now(timezone.utc) + timedelta(milliseconds=600)
        second = await client.set_alarm("alarmed", "a", at, "second")
        assert second.alarm and second.data == "second"
        got = await client.get_alarm("alarmed", "a")
        assert got is not None and got.data == "second"
        assert abs(got.next_due - at) < timedelta(milliseconds=2)

        assert await take(fired) == [("a", "second")]
        assert await extra(fired, 1.0) == []
        await until_gone(lambda: client.get_alarm("alarmed", "a"))
        assert await client.get_state("alarmed", "a") == {"alarm": "second"}

        # Set and deleted from inside a turn: it never fires.
        await client.actor("alarmed", "b").arm(0.5, "never")
        assert await client.actor("alarmed", "b").disarm() == [True, True]
        assert await client.get_alarm("alarmed", "b") is None
        assert await client.delete_alarm("alarmed", "b") is False
        assert await extra(fired, 0.8) == []


async def test_short_idle_timeout_counts_from_the_first_turn(
    daemon: Daemon, client: troupe.Client
) -> None:
    gone: asyncio.Queue[float] = asyncio.Queue()

    @troupe.actor("idler", idle_timeout=0.5)
    class Idler(troupe.Actor):
        def on_deactivate(self) -> None:
            gone.put_nowait(time.monotonic())

        @troupe.method
        def ping(self) -> str:
            return "pong"

    async with hosting(daemon.address, Idler):
        await client.actor("idler", "i").ping()
        called = time.monotonic()
        [deactivated] = await take(gone)
        assert deactivated - called >= 0.45, f"deactivated after {deactivated - called:.3f}s"


async def test_timer_fires_and_is_gone_after_deactivation(
    daemon: Daemon, client: troupe.Client
) -> None:
    fired: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    deactivated = asyncio.Event()
    activations: list[str] = []
    after_deactivation: list[str] = []

    @troupe.actor("timed", idle_timeout=0.5)
    class Timed(troupe.Actor):
        def on_activate(self) -> None:
            activations.append(self.id)

        def on_deactivate(self) -> None:
            deactivated.set()

        @troupe.method
        def ping(self) -> str:
            return "pong"

        @troupe.method
        async def start(self) -> None:
            await self.ctx.set_timer("tick", due="50ms", period="100ms", data={"k": 1})
            await self.ctx.set_timer("once", due=timedelta(milliseconds=20), data=b"\x01")
            await self.ctx.set_timer("cancelled", due="300ms")
            assert await self.ctx.delete_timer("cancelled") is True
            assert await self.ctx.delete_timer("never-set") is False

        async def on_timer(self, name: str, data: Any) -> None:
            if deactivated.is_set():
                after_deactivation.append(name)
            self.state["ticks"] = self.state.get("ticks", 0) + 1
            fired.put_nowait((name, data))

    async with hosting(daemon.address, Timed):
        with pytest.raises(troupe.FailedPrecondition):
            await client.set_timer("timed", "t", "tick", due="10ms")  # not active yet

        await client.actor("timed", "t").start()
        got = await take(fired, 3)
        assert ("once", b"\x01") in got
        assert got.count(("tick", {"k": 1})) == 2
        # Timer firings without keep_alive are not activity: the actor idles out.
        await asyncio.wait_for(deactivated.wait(), WAIT)
        got += await extra(fired, 0.8)  # firings before the deactivation, and any after it
        assert after_deactivation == [], "timers must die with the activation"
        assert activations == ["t"], "a timer must never re-activate its actor"
        assert got.count(("once", b"\x01")) == 1
        assert all(name != "cancelled" for name, _ in got)
        assert (await client.get_state("timed", "t"))["ticks"] >= 3
        with pytest.raises(troupe.FailedPrecondition):
            await client.set_timer("timed", "t", "tick", due="10ms")


async def test_keep_alive_timer_keeps_the_actor_active(
    daemon: Daemon, client: troupe.Client
) -> None:
    fired: asyncio.Queue[str] = asyncio.Queue()
    deactivated = asyncio.Event()

    @troupe.actor("kept", idle_timeout=0.3)
    class Kept(troupe.Actor):
        def on_deactivate(self) -> None:
            deactivated.set()

        @troupe.method
        def ping(self) -> str:
            return "pong"

        @troupe.method
        async def start(self) -> None:
            await self.ctx.set_timer("alive", due="50ms", period="100ms", keep_alive=True)

        def on_timer(self, name: str, data: Any) -> None:
            fired.put_nowait(name)

    async with hosting(daemon.address, Kept):
        await client.actor("kept", "k").start()
        await take(fired, 10)  # 1 s of firings, more than three idle timeouts
        assert not deactivated.is_set()
        # The timer can also be stopped from outside while the actor is active.
        assert await client.delete_timer("kept", "k", "alive") is True
        await asyncio.wait_for(deactivated.wait(), WAIT)
        assert len(await extra(fired, 0.3)) <= 1  # at most one firing already in flight


async def test_list_reminders_shows_what_was_set(daemon: Daemon, client: troupe.Client) -> None:
    @troupe.actor("lister-a")
    class ListerA(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

    @troupe.actor("lister-b")
    class ListerB(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

    async with hosting(daemon.address, ListerA, ListerB):
        until = datetime.now(timezone.utc) + timedelta(days=2)
        await client.set_reminder(
            "lister-a", "1", "r1", due="1h", period="10m", until=until, missed="skip"
        )
        await client.set_reminder("lister-a", "1", "r2", due=timedelta(hours=2), data=b"raw")
        await client.set_reminder("lister-a", "2", "r1", due="PT3H", repeat=4, period="PT1H")
        await client.set_alarm("lister-a", "2", "1h", {"a": 1})
        await client.set_reminder("lister-b", "1", "other", due="1h")

        everything = await client.list_reminders()
        keys = {(r.actor_type, r.actor_id, r.name, r.alarm) for r in everything}
        assert {k for k in keys if not k[3]} == {
            ("lister-a", "1", "r1", False),
            ("lister-a", "1", "r2", False),
            ("lister-a", "2", "r1", False),
            ("lister-b", "1", "other", False),
        }
        assert [k[:2] for k in keys if k[3]] == [("lister-a", "2")]

        of_type = await client.list_reminders("lister-a")
        assert {(r.actor_id, r.name) for r in of_type if not r.alarm} == {
            ("1", "r1"),
            ("1", "r2"),
            ("2", "r1"),
        }
        of_actor = {r.name: r for r in await client.list_reminders("lister-a", "1")}
        assert set(of_actor) == {"r1", "r2"}
        r1 = of_actor["r1"]
        assert r1.period == timedelta(minutes=10)
        assert r1.missed == "skip"
        assert r1.until is not None and abs(r1.until - until) < timedelta(milliseconds=2)
        assert of_actor["r2"].data == b"raw"
        second = [r for r in await client.list_reminders("lister-a", "2") if not r.alarm]
        assert [(r.name, r.remaining, r.period) for r in second] == [("r1", 4, timedelta(hours=1))]
        assert await client.list_reminders("lister-b", "nobody") == []

        with pytest.raises(troupe.InvalidArgument):
            await client.list_reminders(actor_id="1")

        with troupe.SyncClient(daemon.address, timeout=10) as sync:

            def blocking() -> list[str]:
                sync.set_reminder("lister-b", "2", "sync", due="1h")
                names = [r.name for r in sync.list_reminders("lister-b", "2")]
                assert sync.get_reminder("lister-b", "2", "sync") is not None
                assert sync.delete_reminder("lister-b", "2", "sync") is True
                return names

            assert await asyncio.to_thread(blocking) == ["sync"]


async def test_bad_schedules_are_invalid_argument(daemon: Daemon, client: troupe.Client) -> None:
    @troupe.actor("picky")
    class Picky(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

    async with hosting(daemon.address, Picky):
        bad: list[dict[str, Any]] = [
            {"due": "soon"},
            {"due": "1s", "period": "every minute"},
            {"due": "1s", "until": "tomorrow"},
        ]
        for kwargs in bad:
            with pytest.raises(troupe.InvalidArgument) as err:
                await client.set_reminder("picky", "p", "r", **kwargs)
            assert str(err.value)
        with pytest.raises(troupe.InvalidArgument):
            await client.set_reminder("picky", "p", "$reserved", due="1s")
        with pytest.raises(troupe.InvalidArgument):
            await client.set_alarm("picky", "p", "not a time")
        with pytest.raises(troupe.InvalidArgument):  # checked by the SDK
            await client.set_alarm("picky", "p", datetime(2030, 1, 1))
        assert await client.list_reminders("picky") == []


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
async def test_reminder_survives_daemon_restart(
    daemon: Daemon, client: troupe.Client, how: signal.Signals
) -> None:
    fired: asyncio.Queue[Any] = asyncio.Queue()

    @troupe.actor("durable-rem")
    class DurableRem(troupe.Actor):
        @troupe.method
        def ping(self) -> str:
            return "pong"

        async def on_reminder(self, name: str, data: Any) -> None:
            fired.put_nowait(data)

    async with hosting(daemon.address, DurableRem) as app:
        sessions = app.sessions
        await client.set_reminder("durable-rem", "d", "after-restart", due="1500ms", data=how.name)
        await daemon.stop(how)
        await daemon.start()
        await app.wait_registered(sessions=sessions + 1, timeout=WAIT)
        assert await take(fired) == [how.name]
