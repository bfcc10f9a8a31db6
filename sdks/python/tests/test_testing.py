"""troupe.testing beyond the cart example: durations, the shared daemon's clock, no daemon."""

from __future__ import annotations

from datetime import timedelta

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
