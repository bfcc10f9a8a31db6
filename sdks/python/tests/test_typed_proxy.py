"""client.actor(Cart, "c1") with the actor class: the type name comes from @troupe.actor,
and proxy.call(Cart.method, ...) is typed by the method (checked with mypy here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api as mypy_api

import troupe

from .conftest import Daemon, hosting
from .typing.proxy_ok import Cart

TYPING = Path(__file__).parent / "typing"


async def test_a_class_names_the_type_and_call_takes_its_methods(daemon: Daemon) -> None:
    async with hosting(daemon.address, Cart), troupe.Client(daemon.address, timeout=20) as client:
        cart = client.actor(Cart, "c1")
        assert repr(cart) == "<troupe actor typed-cart/c1>"
        assert await cart.call(Cart.add_item, "apple", qty=2) == 2
        assert await cart.call(Cart.count) == 0
        assert await cart.call("add_item", "pear") == 1
        assert await cart.add_item("plum", 3) == 3
        with pytest.raises(TypeError, match=r"is not a @troupe\.method"):
            await cart.call(Cart.on_activate)


def test_sync_client_takes_a_class_too(daemon: Daemon) -> None:
    # Proxies are made without a call: the class is read, and refused if not an actor type.
    with troupe.SyncClient(daemon.address) as client:
        with pytest.raises(TypeError, match="not an actor type"):
            client.actor(troupe.Actor, "x")
        assert repr(client.actor(Cart, "c1")) == "<troupe sync actor typed-cart/c1>"


def _mypy(path: Path) -> tuple[str, int]:
    out, err, status = mypy_api.run(
        ["--strict", "--no-incremental", "--show-error-codes", "--no-error-summary", str(path)]
    )
    return out + err, status


def test_typed_calls_pass_mypy() -> None:
    out, status = _mypy(TYPING / "proxy_ok.py")
    assert status == 0, out


def test_mistyped_calls_fail_mypy_on_each_marked_line() -> None:
    path = TYPING / "proxy_bad.py"
    out, status = _mypy(path)
    assert status == 1, out
    marked = {n for n, line in enumerate(path.read_text().splitlines(), 1) if "  # E:" in line}
    flagged = {int(m) for m in re.findall(rf"{re.escape(path.name)}:(\d+): error", out)}
    assert flagged == marked, out
