"""The cart, tested with troupe.testing: a real daemon of the test's own, the
actor hosted in this process, and a clock moved 30 days in well under a second.

Run with ``pytest examples/python/test_cart.py`` (the plugin comes with the troupe
package; the daemon is $TROUPE_BIN or the one installed with it).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from cart import ABANDONED_AFTER, Cart

import troupe
from troupe.testing import TestEnv

# pytest-asyncio runs the tests (needed in its strict mode, harmless in auto mode).
pytestmark = pytest.mark.asyncio


async def test_items_add_up(troupe_shared_env: TestEnv) -> None:
    # The session's daemon is shared: a unique id keeps this cart to this test.
    env, cart_id = troupe_shared_env, TestEnv.unique_id("cart-")
    await env.host(Cart)
    cart = env.actor(Cart, cart_id)
    assert await cart.add("apple", qty=3, price=0.5) == 1.5
    assert await cart.add("pear", qty=1, price=2.25) == 3.75
    assert await cart.remove("apple") == 2.25
    with pytest.raises(troupe.ActorError, match="quantity must be positive"):
        await cart.add("apple", qty=0)
    state = await env.state(Cart, cart_id, "items")
    assert state == {"items": {"pear": {"qty": 1, "price": 2.25}}}


async def test_an_abandoned_cart_is_emptied_after_30_days(troupe_env: TestEnv) -> None:
    started = time.monotonic()
    await troupe_env.host(Cart)
    cart = troupe_env.actor(Cart, "c1")
    await cart.add("apple", qty=2, price=1.0)

    # A day short of abandoned: nothing happens.
    early = await troupe_env.advance(ABANDONED_AFTER - timedelta(days=1))
    assert early.reminders_fired == 0
    assert await cart.total() == 2.0

    # The 30th day: the reminder fires, and its turn has run when advance returns.
    due = await troupe_env.advance(timedelta(days=1))
    assert due.reminders_fired == 1
    assert await troupe_env.state(Cart, "c1") == {"items": {}, "abandoned": True}
    assert time.monotonic() - started < 1.0, "a month of cart life took more than a second"


async def test_touching_the_cart_postpones_abandonment(troupe_env: TestEnv) -> None:
    await troupe_env.host(Cart)
    cart = troupe_env.actor(Cart, "c2")
    await cart.add("apple", qty=1, price=1.0)
    await troupe_env.advance(timedelta(days=20))
    await cart.add("pear", qty=1, price=2.0)  # re-arms the reminder: 30 days from now
    await troupe_env.advance(timedelta(days=20))
    assert await cart.total() == 3.0
    await troupe_env.advance(timedelta(days=10))
    assert await cart.total() == 0.0
