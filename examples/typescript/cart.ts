// A shopping `cart` actor: items with prices, a total, and an "abandoned cart"
// reminder that empties a cart nobody touched for 30 days.
//
// Host it with `new App({ actors: [Cart] }).runForever()`; cart.test.ts tests it
// with @troupe/sdk/testing, a month of abandonment in well under a second.
import { Actor, actor, method } from "@troupe/sdk";

/** A cart nobody touched for this long is emptied (by a durable reminder). */
export const ABANDONED_AFTER = "30d";

/** One line of the cart. */
export interface Line {
  qty: number;
  price: number;
}

interface CartState {
  items: Record<string, Line>;
  /** Set when the reminder emptied the cart. */
  abandoned: boolean;
}

@actor("cart")
export class Cart extends Actor<CartState> {
  /** Add `qty` of `sku` at `price` each; returns the new total. */
  @method
  async add(sku: string, qty = 1, price = 0): Promise<number> {
    if (!(Number.isInteger(qty) && qty > 0)) throw new RangeError(`quantity must be a positive integer, got ${String(qty)}`);
    const items = { ...this.state.get("items", {}) };
    items[sku] = { qty: (items[sku]?.qty ?? 0) + qty, price };
    this.state.set("items", items);
    this.state.set("abandoned", false);
    // Setting it again replaces the pending one: 30 days from the last change.
    await this.ctx.setReminder("abandoned", { due: ABANDONED_AFTER });
    return this.#total();
  }

  /** Drop `sku` from the cart; returns the new total. */
  @method
  remove(sku: string): number {
    const items = { ...this.state.get("items", {}) };
    Reflect.deleteProperty(items, sku);
    this.state.set("items", items);
    return this.#total();
  }

  /** What the cart's items cost together. */
  @method({ readonly: true })
  total(): number {
    return this.#total();
  }

  /** Only "abandoned": nobody touched the cart for ABANDONED_AFTER. */
  override onReminder(name: string): void {
    if (name === "abandoned") {
      this.state.set("items", {});
      this.state.set("abandoned", true);
    }
  }

  #total(): number {
    const lines = Object.values(this.state.get("items", {}));
    return Math.round(lines.reduce((sum, l) => sum + l.qty * l.price, 0) * 100) / 100;
  }
}
