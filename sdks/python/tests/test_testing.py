"""troupe.testing beyond the cart example: durations, the shared daemon's clock, no daemon."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

import troupe
from troupe.testing import TestDaemon, TestDaemonError, TestEnv
from troupe.testing._daemon import duration_text


def test_durations_reach_the_daemon_as_its_grammar() -> None:
    assert duration_text(timedelta(days=30)) == "2592000000ms"
    assert duration_text(1.5) == "1500ms"
    assert duration_text("P30D") == "2592000000ms"
    with pytest.raises(troupe.InvalidArgument, match=r"advance by -1 .*cannot be negative"):
        duration_text(-1)


def test_a_binary_that_does_not_serve_is_reported() -> None:
    with pytest.raises(TestDaemonError, match="did not start"):
        TestDaemon.start(binary="/bin/false")


async def test_a_shared_daemon_refuses_to_move_its_clock(troupe_shared_env: TestEnv) -> None:
    with pytest.raises(TestDaemonError, match="shares its daemon"):
        await troupe_shared_env.advance(60)


async def test_the_clock_only_moves_forward_and_reports_its_time(troupe_env: TestEnv) -> None:
    before = await troupe_env.daemon.now()
    after = await troupe_env.advance(timedelta(hours=2))
    assert after.now - before >= timedelta(hours=2)
    assert (after.reminders_fired, after.alarms_fired, after.timers_fired) == (0, 0, 0)
    with pytest.raises(troupe.InvalidArgument):
        await troupe_env.advance("soon")


@troupe.actor("kit_filtered")
class KitFiltered(troupe.Actor):
    @troupe.method
    async def who(self) -> str:
        return self.ctx.metadata.get("user", "nobody")


async def test_the_env_hosts_with_call_filters(troupe_env: TestEnv) -> None:
    async def as_alice(call: troupe.IncomingCall, next_: troupe.Next) -> object:
        return f"{await next_()} (filtered)"

    await troupe_env.host(KitFiltered, filters=[as_alice])
    assert await troupe_env.actor(KitFiltered, "k1").who() == "nobody (filtered)"


async def test_a_call_to_a_type_no_app_registered_is_not_found_at_once(
    troupe_env: TestEnv,
) -> None:
    # The kit's daemon runs with --host-wait 0s. With the daemon's default (10s) the
    # call to the misspelled type would wait that long for an app to register it,
    # and the 5 s bound below would fail the test.
    await troupe_env.host(KitFiltered)
    with pytest.raises(troupe.NotFound):
        await asyncio.wait_for(troupe_env.actor("kit_filterd", "k1").who(), 5)


async def test_a_host_wait_in_extra_args_replaces_the_kits() -> None:
    # The daemon takes the flag once: were the kit to add its own too, it would not start.
    with TestDaemon.start(extra_args=["--host-wait=10s"]) as daemon:
        async with TestEnv(daemon) as env:
            await env.host(KitFiltered)
            assert await env.actor(KitFiltered, "k1").who() == "nobody"


def test_a_host_wait_in_the_environment_replaces_the_kits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Out of the daemon's range: the daemon refuses to start only if the kit leaves the
    # environment's value in force rather than overriding it with its own flag.
    monkeypatch.setenv("TROUPE_HOST_WAIT", "25h")
    with pytest.raises(TestDaemonError, match="host_wait"), TestDaemon.start():
        pass


@troupe.actor("kit_standup")
class KitStandup(troupe.Actor):
    @troupe.method
    async def plan(self) -> None:
        await self.ctx.set_reminder(
            "standup", cron="0 9 * * MON-FRI", time_zone=ZoneInfo("Asia/Kolkata")
        )

    async def on_reminder(self, name: str, data: object) -> None:
        self.state["held"] = int(self.state.get("held", 0)) + 1


async def test_a_calendar_reminder_fires_at_its_zones_wall_time(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitStandup)
    await troupe_env.actor(KitStandup, "team").plan()
    planned = await troupe_env.client.get_reminder("kit_standup", "team", "standup")
    assert planned is not None
    assert (planned.cron, planned.time_zone, planned.period) == (
        "0 9 * * MON-FRI",
        "Asia/Kolkata",
        None,
    )
    # 09:00 in Kolkata (UTC+05:30 all year) is 03:30 UTC, on a weekday there.
    local = planned.next_due.astimezone(ZoneInfo("Asia/Kolkata"))
    assert (local.hour, local.minute, local.weekday() < 5) == (9, 0, True)
    # A week holds five weekdays whatever day it starts on.
    advanced = await troupe_env.advance(timedelta(days=7))
    assert advanced.reminders_fired == 5
    assert await troupe_env.state(KitStandup, "team", "held") == {"held": 5}


@troupe.actor("kit_digest")
class KitDigest(troupe.Actor):
    @troupe.method
    async def plan(self) -> None:
        await self.ctx.set_reminder("digest", cron="@daily", jitter=timedelta(hours=1))

    async def on_reminder(self, name: str, data: object) -> None:
        self.state["sent"] = int(self.state.get("sent", 0)) + 1


async def test_jittered_reminders_set_alike_fire_at_their_own_delay(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitDigest)
    users = [f"u{i}" for i in range(8)]
    for user in users:
        await troupe_env.actor(KitDigest, user).plan()
    planned = [await troupe_env.client.get_reminder("kit_digest", u, "digest") for u in users]
    delays = set()
    for reminder in planned:
        assert reminder is not None
        assert reminder.jitter == timedelta(hours=1)
        assert timedelta(0) <= reminder.jitter_delay < timedelta(hours=1)
        # Midnight UTC plus the reminder's own delay.
        scheduled = reminder.next_due - reminder.jitter_delay
        assert (scheduled.hour, scheduled.minute, scheduled.second) == (0, 0, 0)
        delays.add(reminder.jitter_delay)
    assert len(delays) > 1, "eight reminders set alike share one delay"
    # Setting it again keeps the delay.
    await troupe_env.actor(KitDigest, "u0").plan()
    again = await troupe_env.client.get_reminder("kit_digest", "u0", "digest")
    assert again is not None and planned[0] is not None
    assert again.next_due == planned[0].next_due


async def test_calendar_arguments_are_checked_by_the_sdk_then_the_daemon(
    troupe_env: TestEnv,
) -> None:
    # A hosted type: the kit's daemon refuses one no app registered (NotFound) first.
    await troupe_env.host(KitDigest)
    client = troupe_env.client
    with pytest.raises(troupe.InvalidArgument, match="both a period and a cron schedule"):
        await client.set_reminder("kit_digest", "1", "r", period="1h", cron="@daily")
    with pytest.raises(troupe.InvalidArgument, match="without cron"):
        await client.set_reminder("kit_digest", "1", "r", time_zone="Europe/Berlin")
    with pytest.raises(troupe.InvalidArgument, match="not a known IANA time zone"):
        await client.set_reminder("kit_digest", "1", "r", cron="@daily", time_zone="Mars/Olympus")
    with pytest.raises(troupe.InvalidArgument, match="jitter"):
        await client.set_reminder("kit_digest", "1", "r", cron="@daily", jitter=timedelta(0))


@troupe.actor("kit_billing")
class KitBilling(troupe.Actor):
    @troupe.method
    async def plan(self) -> None:
        await self.ctx.set_reminder("bill", due=timedelta(hours=1), period=timedelta(hours=1))

    @troupe.method
    async def hold(self) -> bool:
        held = await self.ctx.pause_reminder("bill")
        return held is not None and held.paused

    async def on_reminder(self, name: str, data: object) -> None:
        self.state["bills"] = int(self.state.get("bills", 0)) + 1


async def test_a_paused_reminder_waits_for_resume_and_survives_a_set(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitBilling)
    billing = troupe_env.actor(KitBilling, "acme")
    await billing.plan()
    assert await billing.hold() is True
    # Set again, as at each activation: still paused, and nothing fires.
    await billing.plan()
    held = await troupe_env.client.get_reminder("kit_billing", "acme", "bill")
    assert held is not None and held.paused
    assert (await troupe_env.advance(timedelta(hours=5))).reminders_fired == 0
    client = troupe_env.client
    resumed = await client.resume_reminder("kit_billing", "acme", "bill")
    assert resumed is not None and not resumed.paused
    # Due four hours ago: it fires once for what it missed, then on schedule.
    await troupe_env.advance(timedelta(seconds=1))
    assert await troupe_env.state(KitBilling, "acme", "bills") == {"bills": 1}
    assert await client.pause_reminder("kit_billing", "acme", "nothing") is None


@troupe.actor("kit_cart")
class KitCart(troupe.Actor):
    @troupe.method
    async def add(self, sku: str) -> int:
        items = dict(self.state.get("items", {}))
        items[sku] = items.get(sku, 0) + 1
        self.state["items"] = items
        return sum(items.values())


async def test_set_state_gives_an_actor_a_starting_point(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitCart)
    await troupe_env.set_state(KitCart, "c1", {"items": {"apple": 2}, "note": "gift"})
    assert await troupe_env.actor(KitCart, "c1").add("apple") == 3
    # Active now: the app's copy of the state ends with its activation, and
    # the next turn starts on the new state.
    await troupe_env.set_state(KitCart, "c1", {"items": {}}, delete=["note"])
    assert await troupe_env.actor(KitCart, "c1").add("pear") == 1
    assert await troupe_env.state(KitCart, "c1") == {"items": {"pear": 1}}
    with pytest.raises(TypeError, match="JSON-serialisable"):
        await troupe_env.set_state(KitCart, "c1", {"bad": object()})
    with pytest.raises(troupe.InvalidArgument, match="state key"):
        await troupe_env.set_state(KitCart, "c1", {"": 1})
    with pytest.raises(TypeError, match="values to store or keys to delete"):
        await troupe_env.set_state(KitCart, "c1")


@troupe.actor("kit_login")
class KitLogin(troupe.Actor):
    """Holds a session token that lasts an hour."""

    @troupe.method
    async def issue(self, token: str) -> None:
        self.state.set("token", token, ttl="1h")

    @troupe.method
    async def token(self) -> str | None:
        token: str | None = self.state.get("token")
        return token


async def test_set_state_with_a_ttl_expires_the_keys_on_the_clock(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitLogin)
    login = troupe_env.actor(KitLogin, "u1")
    await troupe_env.set_state(KitLogin, "u1", {"token": "t-1", "scope": "read"}, ttl="1h")
    assert await troupe_env.state(KitLogin, "u1") == {"token": "t-1", "scope": "read"}
    now = await troupe_env.daemon.now()
    expiry = await troupe_env.client.get_state_expiry("kit_login", "u1")
    assert set(expiry) == {"token", "scope"}
    assert abs(expiry["token"] - now - timedelta(hours=1)) < timedelta(seconds=5)

    await troupe_env.advance("30m")
    assert await troupe_env.state(KitLogin, "u1") == {"token": "t-1", "scope": "read"}
    assert await login.token() == "t-1"
    await troupe_env.advance("31m")
    assert await troupe_env.state(KitLogin, "u1") == {}
    assert await login.token() is None


async def test_set_state_without_a_ttl_keeps_the_expiry_and_ttl_none_ends_it(
    troupe_env: TestEnv,
) -> None:
    await troupe_env.host(KitLogin)
    # Set by a turn, replaced without a ttl: the hour still runs.
    await troupe_env.actor(KitLogin, "kept").issue("t-1")
    await troupe_env.set_state(KitLogin, "kept", {"token": "t-2"})
    # Set by a turn, then ended by the edit: it outlives the hour.
    await troupe_env.actor(KitLogin, "ended").issue("t-1")
    await troupe_env.set_state(KitLogin, "ended", {"token": "t-2"}, ttl=None)
    assert await troupe_env.client.get_state_expiry("kit_login", "ended") == {}
    # A ttl as a timedelta, then seconds, each replacing the one before.
    await troupe_env.set_state(KitLogin, "renewed", {"token": "t-1"}, ttl=timedelta(minutes=10))
    await troupe_env.set_state(KitLogin, "renewed", {"token": "t-2"}, ttl=2 * 3600)

    await troupe_env.advance("61m")
    assert await troupe_env.state(KitLogin, "kept") == {}
    assert await troupe_env.state(KitLogin, "ended") == {"token": "t-2"}
    assert await troupe_env.actor(KitLogin, "ended").token() == "t-2"
    assert await troupe_env.state(KitLogin, "renewed") == {"token": "t-2"}
    await troupe_env.advance("60m")
    assert await troupe_env.state(KitLogin, "renewed") == {}
    assert await troupe_env.state(KitLogin, "ended") == {"token": "t-2"}


async def test_set_state_refuses_a_ttl_it_cannot_apply(troupe_shared_env: TestEnv) -> None:
    env, user = troupe_shared_env, TestEnv.unique_id("u")
    with pytest.raises(ValueError, match="at least a second"):
        await env.set_state(KitLogin, user, {"token": "t-1"}, ttl=0.5)
    with pytest.raises(troupe.InvalidArgument, match="ttl 'soon' is not a duration"):
        await env.set_state(KitLogin, user, {"token": "t-1"}, ttl="soon")
    with pytest.raises(TypeError, match="ttl expires the keys in values"):
        await env.set_state(KitLogin, user, ttl="1h")
    with pytest.raises(TypeError, match="ttl expires the keys in values"):
        await env.set_state(KitLogin, user, delete=["token"], ttl="1h")
    assert await env.state(KitLogin, user) == {}


@troupe.actor("kit_trial")
class KitTrial(troupe.Actor):
    """Starts a trial that ends itself: a delayed tell to its own future self."""

    @troupe.method
    async def start(self) -> str | None:
        self.state["active"] = True
        return await self.ctx.tell("kit_trial", self.id, "expire", delay="14d")

    @troupe.method
    async def expire(self, reason: str = "trial over") -> None:
        self.state["active"] = False
        self.state["reason"] = reason


async def test_a_delayed_tell_arrives_when_its_time_comes(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitTrial)
    reminder = await troupe_env.actor(KitTrial, "t1").start()
    assert isinstance(reminder, str) and reminder.startswith("$tell:")
    waiting = await troupe_env.client.get_reminder("kit_trial", "t1", reminder)
    assert waiting is not None and waiting.tell_method == "expire"
    await troupe_env.advance(timedelta(days=13))
    assert await troupe_env.state(KitTrial, "t1", "active") == {"active": True}
    # The advance returns once the tell that came due has run.
    await troupe_env.advance(timedelta(days=2))
    assert await troupe_env.state(KitTrial, "t1", "active") == {"active": False}
    assert await troupe_env.client.get_reminder("kit_trial", "t1", reminder) is None

    # From a client, with a key; deleting its reminder cancels it.
    client = troupe_env.client
    named = await client.tell(
        "kit_trial", "t2", "expire", {"reason": "cancelled?"}, delay="1h", idempotency_key="k2"
    )
    assert named == "$tell:k2"
    assert await client.delete_reminder("kit_trial", "t2", named) is True
    await troupe_env.advance(timedelta(hours=2))
    assert await troupe_env.state(KitTrial, "t2", "reason") == {}
    # A plain tell answers None; a delayed one cannot be best effort.
    assert await client.tell("kit_trial", "t3", "expire") is None
    with pytest.raises(troupe.InvalidArgument, match="cannot be best effort"):
        await client.tell("kit_trial", "t3", "expire", delay="1h", durable=False)
    with pytest.raises(troupe.InvalidArgument, match="delay"):
        await client.tell("kit_trial", "t3", "expire", delay=0)


async def test_a_tell_at_a_time_is_read_against_the_daemons_clock(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitTrial)
    client = troupe_env.client
    # The kit's clock runs 30 days ahead of the wall clock from here on: a delay
    # computed by the caller from its own clock would be 30 days too long.
    await troupe_env.advance(timedelta(days=30))
    at = await troupe_env.daemon.now() + timedelta(hours=2)
    named = await client.tell("kit_trial", "t4", "expire", {"reason": "at two"}, at=at)
    assert named is not None and named.startswith("$tell:")
    waiting = await client.get_reminder("kit_trial", "t4", named)
    assert waiting is not None
    assert abs(waiting.next_due - at) < timedelta(seconds=5), (waiting.next_due, at)
    await troupe_env.advance(timedelta(hours=1))
    assert await troupe_env.state(KitTrial, "t4", "reason") == {}
    await troupe_env.advance(timedelta(hours=2))
    assert await troupe_env.state(KitTrial, "t4", "reason") == {"reason": "at two"}

    # A time the daemon's clock has passed (an hour from now on the wall clock, a
    # month ago on the kit's) is delivered at once, still as a stored tell.
    wall = datetime.now(timezone.utc) + timedelta(hours=1)
    past = await client.tell("kit_trial", "t5", "expire", {"reason": "late"}, at=wall.isoformat())
    assert past is not None and past.startswith("$tell:")
    await troupe_env.advance(timedelta(seconds=1))
    assert await troupe_env.state(KitTrial, "t5", "reason") == {"reason": "late"}

    with pytest.raises(troupe.InvalidArgument, match="not a time"):
        await client.tell("kit_trial", "t6", "expire", at="10m")
    with pytest.raises(troupe.InvalidArgument, match="time zone"):
        await client.tell("kit_trial", "t6", "expire", at=datetime(2030, 1, 1))
    with pytest.raises(troupe.InvalidArgument, match="not both"):
        await client.tell("kit_trial", "t6", "expire", at=at, delay="1h")
    with pytest.raises(troupe.InvalidArgument, match="cannot be best effort"):
        await client.tell("kit_trial", "t6", "expire", at=at, durable=False)
    with pytest.raises(troupe.InvalidArgument, match="deliver_at"):
        await client.tell("kit_trial", "t6", "expire", at="2026-13-01T00:00:00Z")


# The ids whose on_deactivate ran.
_SESSIONS_ENDED: list[str] = []


@troupe.actor("kit_session", retention="1h")
class KitSession(troupe.Actor):
    """A session nobody keeps: erased an hour after its last activation ends."""

    @troupe.method
    async def touch(self) -> int:
        seen = int(self.state.get("seen", 0)) + 1
        self.state["seen"] = seen
        return seen

    async def on_deactivate(self) -> None:
        _SESSIONS_ENDED.append(self.id)


async def test_an_actor_nothing_reached_for_its_retention_is_erased(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitSession)
    session = troupe_env.actor(KitSession, "s1")
    assert await session.touch() == 1
    assert await troupe_env.deactivate(KitSession, "s1")
    assert _SESSIONS_ENDED == ["s1"]
    assert not await troupe_env.deactivate(KitSession, "s1")

    await troupe_env.advance("59m")
    assert await troupe_env.state(KitSession, "s1") == {"seen": 1}
    await troupe_env.advance("2m")
    assert await troupe_env.state(KitSession, "s1") == {}
    # Called again, it starts afresh.
    assert await session.touch() == 1


def test_a_retention_under_a_minute_is_refused_at_the_decorator() -> None:
    with pytest.raises(ValueError, match="at least a minute"):
        troupe.actor("kit_short", retention=30)


@troupe.actor("kit_ticker")
class KitTicker(troupe.Actor):
    """Sets its timer as Orleans and Dapr users do: when it activates."""

    async def on_activate(self) -> None:
        await self.ctx.set_timer("tick", due="1m", period="1m")

    async def on_timer(self, name: str, data: object) -> None:
        self.state["ticks"] = self.state.get("ticks", 0) + 1

    @troupe.method
    async def ticks(self) -> int:
        return int(self.state.get("ticks", 0))


async def test_a_timer_set_by_the_activation_hook_fires(troupe_env: TestEnv) -> None:
    await troupe_env.host(KitTicker)
    # Before, the daemon refused a timer until the activation was done, so
    # this first call failed with the hook's FailedPrecondition.
    assert await troupe_env.actor(KitTicker, "t1").ticks() == 0
    assert (await troupe_env.advance("3m")).timers_fired == 3
    assert await troupe_env.actor(KitTicker, "t1").ticks() == 3
