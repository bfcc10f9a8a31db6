"""Type-checked by tests/test_typed_proxy.py with mypy --strict: typed proxies made from
the actor class. Every assignment states the type mypy must infer."""

from __future__ import annotations

from typing import Any

import troupe


@troupe.actor("typed-cart")
class Cart(troupe.Actor):
    @troupe.method
    async def add_item(self, sku: str, qty: int = 1) -> int:
        return qty

    @troupe.method(readonly=True)
    def count(self) -> int:
        return 0


async def calls(client: troupe.Client, ctx: troupe.Context) -> None:
    cart: troupe.ActorProxy[Cart] = client.actor(Cart, "c1")
    added: int = await cart.call(Cart.add_item, "apple", qty=2)
    counted: int = await cart.call(Cart.count)  # a plain def: awaited all the same
    by_name: Any = await client.actor("typed-cart", "c1").call("add_item", "apple")
    attr: Any = await cart.add_item("apple")  # attribute calls work, untyped
    nested: int = await ctx.actor(Cart, "c2").call(Cart.add_item, "pear")
    await cart.tell(Cart.add_item, "apple", qty=2)
    await cart.tell("add_item", "apple")
    await ctx.actor(Cart, "c2").tell(Cart.count)
    print(added, counted, by_name, attr, nested)


def sync_calls(client: troupe.SyncClient) -> None:
    added: int = client.actor(Cart, "c1").call(Cart.add_item, "apple", qty=2)
    client.actor(Cart, "c1").tell(Cart.add_item, "apple", qty=2)
    print(added)
