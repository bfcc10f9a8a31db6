"""A shopping `cart` actor: items with prices, a total, and an "abandoned cart"
reminder that empties a cart nobody touched for 30 days.

Host it with ``troupe.App(actors=[Cart]).run_forever()``; test_cart.py tests it
with troupe.testing, a month of abandonment in well under a second.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import troupe

# A cart nobody touched for this long is emptied (by a durable reminder).
ABANDONED_AFTER = timedelta(days=30)


@troupe.actor("cart")
class Cart(troupe.Actor):
    """State: `items` ({sku: {"qty", "price"}}), `abandoned` (set when the reminder emptied it)."""

    @troupe.method
    async def add(self, sku: str, qty: int = 1, price: float = 0.0) -> float:
        """Add ``qty`` of ``sku`` at ``price`` each; returns the new total."""
        if qty <= 0:
            raise ValueError(f"quantity must be positive, got {qty}")
        items: dict[str, Any] = dict(self.state.get("items", {}))
        line = items.get(sku, {"qty": 0, "price": price})
        items[sku] = {"qty": line["qty"] + qty, "price": price}
        self.state["items"] = items
        self.state["abandoned"] = False
        # Setting it again replaces the pending one: 30 days from the last change.
        await self.ctx.set_reminder("abandoned", due=ABANDONED_AFTER)
        return self._total()

    @troupe.method
    async def remove(self, sku: str) -> float:
        """Drop ``sku`` from the cart; returns the new total."""
        items: dict[str, Any] = dict(self.state.get("items", {}))
        items.pop(sku, None)
        self.state["items"] = items
        return self._total()

    @troupe.method(readonly=True)
    def total(self) -> float:
        """What the cart's items cost together."""
        return self._total()

    async def on_reminder(self, name: str, data: Any) -> None:
        """Only "abandoned": nobody touched the cart for ABANDONED_AFTER."""
        if name == "abandoned":
            self.state["items"] = {}
            self.state["abandoned"] = True

    def _total(self) -> float:
        items: dict[str, Any] = self.state.get("items", {})
        return round(sum(float(line["qty"] * line["price"]) for line in items.values()), 2)


if __name__ == "__main__":
    troupe.App(actors=[Cart]).run_forever()
