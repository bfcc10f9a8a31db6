"""Type-checked by tests/test_typed_proxy.py: each line marked ``# E`` must be an error."""

from __future__ import annotations

import troupe
from tests.typing.proxy_ok import Cart


@troupe.actor("other")
class Other(troupe.Actor):
    @troupe.method
    async def ping(self) -> str:
        return "pong"


async def calls(client: troupe.Client) -> None:
    cart = client.actor(Cart, "c1")
    text: str = await cart.call(Cart.add_item, "apple")  # E: returns int
    await cart.call(Cart.add_item, 5)  # E: sku is a str
    await cart.call(Cart.add_item, "apple", colour="red")  # E: no such parameter
    await cart.call(Other.ping)  # E: a method of another actor class
    await cart.tell(Cart.add_item, 5)  # E: sku is a str
    await cart.tell(Other.ping)  # E: a method of another actor class
    print(text)
