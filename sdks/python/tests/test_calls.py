"""Actors calling actors, against the real daemon: call chains, reentrancy, deadlock
detection, deadlines and read-only methods (docs/calls.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

import troupe

from .conftest import Daemon, hosting


@troupe.actor("order", reentrant=True)
class Order(troupe.Actor):
    """order.total -> customer.discount -> order.subtotal: a chain back into the order."""

    TYPE = "order"

    async def on_activate(self) -> None:
        self.state.setdefault("items", [40, 60, 20])

    @troupe.method
    async def total(self, customer: str) -> dict[str, Any]:
        self.state["totals_asked"] = self.state.get("totals_asked", 0) + 1
        discount = await self.ctx.actor("customer", customer).discount(self.TYPE, self.id)
        subtotal = sum(self.state["items"])
        return {"total": subtotal - discount, "chain": list(self.ctx.chain)}

    @troupe.method
    async def subtotal(self) -> dict[str, Any]:
        # A turn nested in the waiting `total` turn of this very actor.
        self.state["subtotals_asked"] = self.state.get("subtotals_asked", 0) + 1
        return {"subtotal": sum(self.state["items"]), "chain": list(self.ctx.chain)}

    @troupe.method
    async def nested_fails(self, customer: str) -> None:
        self.state["outer"] = "kept"
        # The customer calls back into fail_inside, which raises; the customer
        # swallows that, so this outer turn succeeds and keeps only its own change.
        await self.ctx.actor("customer", customer).call_back(self.id, "fail_inside")

    @troupe.method
    async def fail_inside(self) -> None:
        self.state["inner"] = "dropped"
        raise ValueError("inner turn fails")

    @troupe.method
    async def outer_fails(self, customer: str) -> None:
        self.state["outer"] = "dropped"
        await self.ctx.actor("customer", customer).call_back(self.id, "write_inside")
        raise ValueError("outer turn fails")

    @troupe.method
    async def write_inside(self) -> None:
        self.state["inner"] = "kept"

    @troupe.method(readonly=True)
    def view(self) -> dict[str, Any]:
        return dict(self.state)


@troupe.actor("plain_order")
class PlainOrder(Order):
    """The same order, not reentrant: the chain back into it is a deadlock."""

    TYPE = "plain_order"


@troupe.actor("customer")
class Customer(troupe.Actor):
    seen_errors: ClassVar[list[BaseException]] = []

    @troupe.method
    async def discount(self, order_type: str, order_id: str) -> int:
        try:
            reply = await self.ctx.actor(order_type, order_id).subtotal()
        except troupe.TroupeError as e:
            Customer.seen_errors.append(e)
            raise
        return 10 if reply["subtotal"] > 100 else 0

    @troupe.method
    async def call_back(self, order_id: str, method: str) -> None:
        with contextlib.suppress(troupe.ActorError):
            await self.ctx.invoke("order", order_id, method)


async def test_reentrant_chain_calls_back_into_the_waiting_actor(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Order, Customer):
        reply = await client.actor("order", "o1").total("c1")
        assert reply == {"total": 110, "chain": ["order/o1"]}
        # Both turns' changes were kept, each sent by the turn that made it.
        assert await client.get_state("order", "o1") == {
            "items": [40, 60, 20],
            "totals_asked": 1,
            "subtotals_asked": 1,
        }


async def test_cycle_into_a_type_that_is_not_reentrant_fails_at_once(
    daemon: Daemon, client: troupe.Client
) -> None:
    Customer.seen_errors.clear()
    async with hosting(daemon.address, PlainOrder, Customer):
        start = time.monotonic()
        with pytest.raises(troupe.ActorError) as err:
            await client.actor("plain_order", "o1").total("c1")
        elapsed = time.monotonic() - start
        # Refused by the daemon on sight, not ended by a timeout (the client allows 20 s).
        assert elapsed < 1.0, elapsed
        # The customer's call saw the daemon's FAILED_PRECONDITION as a typed error...
        (inner,) = Customer.seen_errors
        assert isinstance(inner, troupe.FailedPrecondition)
        cycle = "deadlock: plain_order/o1 → customer/c1 → plain_order/o1"
        assert cycle in str(inner)
        assert "Register actor type 'plain_order' as reentrant" in str(inner)
        # ...and it travelled up the chain as the failure of each turn.
        assert err.value.remote_type == "FailedPrecondition"
        assert cycle in err.value.message
        # The failed outer turn left nothing behind.
        assert await client.get_state("plain_order", "o1") == {"items": [40, 60, 20]}


async def test_a_failed_turn_undoes_only_its_own_changes(
    daemon: Daemon, client: troupe.Client
) -> None:
    async with hosting(daemon.address, Order, Customer):
        o1 = client.actor("order", "o1")
        await o1.nested_fails("c1")
        stored = await client.get_state("order", "o1")
        assert stored == {"items": [40, 60, 20], "outer": "kept"}
        # The app's copy of the state is the daemon's.
        assert await o1.view() == stored

        o2 = client.actor("order", "o2")
        with pytest.raises(troupe.ActorError, match="outer turn fails"):
            await o2.outer_fails("c1")
        stored = await client.get_state("order", "o2")
        assert stored == {"items": [40, 60, 20], "inner": "kept"}
        assert await o2.view() == stored


@troupe.actor("deep", reentrant=True)
class Deep(troupe.Actor):
    @troupe.method
    async def down(self, n: int) -> int:
        if n == 0:
            return len(self.ctx.chain)
        result: int = await self.ctx.actor("deep", self.id).down(n - 1)
        return result


async def test_chain_depth_is_limited(daemon: Daemon, client: troupe.Client) -> None:
    async with hosting(daemon.address, Deep):
        # 30 turns of one actor, each nested in the previous one.
        assert await client.actor("deep", "d").down(29) == 30
        start = time.monotonic()
        with pytest.raises(troupe.ActorError) as err:
            await client.actor("deep", "d").down(40)
        assert time.monotonic() - start < 2.0
        assert err.value.remote_type == "FailedPrecondition"
        assert "32 calls deep, the limit (32)" in err.value.message


async def test_deadlines_shrink_along_a_chain(daemon: Daemon, client: troupe.Client) -> None:
    @troupe.actor("sink")
    class Sink(troupe.Actor):
        @troupe.method
        def where(self) -> dict[str, Any]:
            return {"deadline": self.ctx.deadline, "chain": list(self.ctx.chain)}

    @troupe.actor("relay")
    class Relay(troupe.Actor):
        @troupe.method
        async def forward(self, timeout: float | None) -> dict[str, Any]:
            via_ctx = await self.ctx.actor("sink", "s", timeout=timeout).where()
            # A plain Client used inside a handler makes its calls for the turn as well.
            async with troupe.Client(daemon.address, timeout=30) as plain:
                via_client = await plain.actor("sink", "s").where()
            return {"mine": self.ctx.deadline, "ctx": via_ctx, "client": via_client}

    async with hosting(daemon.address, Relay, Sink):
        start = time.time()
        got = await client.actor("relay", "r", timeout=5).forward(None)
        assert got["mine"] == pytest.approx(start + 5, abs=0.5)
        # The nested calls set no timeout of their own: they inherit the caller's deadline.
        # (Equal but for the time the request took to reach the daemon.)
        assert got["ctx"]["deadline"] == pytest.approx(got["mine"], abs=0.05)
        assert got["ctx"]["chain"] == ["relay/r", "sink/s"]
        assert got["client"]["chain"] == ["relay/r", "sink/s"]
        # The plain client's own 30 s timeout is cut to the turn's deadline.
        assert got["client"]["deadline"] == pytest.approx(got["mine"], abs=0.05)

        # A shorter timeout of the nested call wins.
        start = time.time()
        got = await client.actor("relay", "r", timeout=5).forward(0.5)
        assert got["ctx"]["deadline"] == pytest.approx(start + 0.5, abs=0.3)

        # A client call with no timeout carries no deadline.
        async with troupe.Client(daemon.address) as unbounded:
            got = await unbounded.actor("relay", "r").forward(None)
        assert got["mine"] is None and got["ctx"]["deadline"] is None


async def test_a_wait_across_two_chains_ends_at_the_callers_deadline(
    daemon: Daemon, client: troupe.Client
) -> None:
    started = {"ping_a": asyncio.Event(), "ping_b": asyncio.Event()}
    recorded = {"ping_a": asyncio.Event(), "ping_b": asyncio.Event()}
    nested: dict[str, tuple[type[BaseException] | None, float, float | None]] = {}

    class Ping(troupe.Actor):
        me = ""
        other = ""

        @troupe.method
        async def hold(self) -> None:
            me = self.me
            started[me].set()
            # Both turns are running: each now calls the other, whose mailbox waits
            # behind the running turn. No chain holds both, so only deadlines end it.
            await asyncio.wait_for(started[self.other].wait(), 10)
            t0 = time.monotonic()
            outcome: type[BaseException] | None = None
            try:
                await self.ctx.actor(self.other, "x").poke()
            except troupe.TroupeError as e:
                outcome = type(e)
                raise
            finally:
                nested[me] = (outcome, time.monotonic() - t0, self.ctx.deadline)
                recorded[me].set()

        @troupe.method
        def poke(self) -> None:
            return None

    @troupe.actor("ping_a")
    class PingA(Ping):
        me, other = "ping_a", "ping_b"

    @troupe.actor("ping_b")
    class PingB(Ping):
        me, other = "ping_b", "ping_a"

    async with hosting(daemon.address, PingA, PingB):

        async def call(actor_type: str) -> tuple[BaseException | None, float]:
            t0 = time.monotonic()
            try:
                await client.actor(actor_type, "x", timeout=1).hold()
            except troupe.TroupeError as e:
                return e, time.monotonic() - t0
            return None, time.monotonic() - t0

        results = await asyncio.gather(call("ping_a"), call("ping_b"))
        ended_by_deadline = 0
        for error, elapsed in results:
            # Deadlines shrink along a chain, so the nested call may run out
            # just before its caller does and the handler re-raise it: then
            # the caller sees that DeadlineExceeded as the actor's error. The
            # first turn to give up lets the other's nested call in, so that
            # caller may succeed just before its own deadline instead.
            by_deadline = isinstance(error, troupe.DeadlineExceeded) or (
                isinstance(error, troupe.ActorError) and error.remote_type == "DeadlineExceeded"
            )
            assert by_deadline or error is None, error
            ended_by_deadline += by_deadline
            assert 0.8 < elapsed < 2.0, elapsed
        assert ended_by_deadline >= 1, results
        # The nested calls ended with the outer deadline, not the daemon's 60 s limit.
        for me in ("ping_a", "ping_b"):
            # Each handler records its nested call's end just after its caller gave up.
            await asyncio.wait_for(recorded[me].wait(), 5)
            _, waited, deadline = nested[me]
            assert waited < 1.5, waited
            assert deadline is not None
        # The first to give up ends its turn, which may let the other's call in just
        # before that one's deadline; at least one ended by its deadline.
        assert troupe.DeadlineExceeded in {kind for kind, _, _ in nested.values()}, nested


@troupe.actor("board")
class Board(troupe.Actor):
    readers_inside = 0
    max_readers = 0
    writer_inside = False
    overlaps = 0
    first_overlap: asyncio.Event | None = None

    async def on_activate(self) -> None:
        self.state.setdefault("count", 0)
        self.state.setdefault("items", [1, 2, 3])

    @troupe.method(readonly=True)
    async def read(self) -> int:
        cls = Board
        cls.readers_inside += 1
        cls.max_readers = max(cls.max_readers, cls.readers_inside)
        cls.overlaps += cls.writer_inside
        assert cls.first_overlap is not None
        if cls.readers_inside > 1:
            cls.first_overlap.set()
        # The first readers wait (bounded) for a second one to join them: with 50
        # calls in flight the daemon runs several at once.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(cls.first_overlap.wait(), 0.2)
        await asyncio.sleep(0.005)  # a little work, during which a writer must not start
        cls.overlaps += cls.writer_inside
        cls.readers_inside -= 1
        return int(self.state["count"])

    @troupe.method
    async def bump(self) -> int:
        cls = Board
        cls.writer_inside = True
        cls.overlaps += cls.readers_inside
        await asyncio.sleep(0.01)  # work, during which no reader may start
        cls.overlaps += cls.readers_inside
        cls.writer_inside = False
        self.state["count"] += 1
        return int(self.state["count"])

    @troupe.method(readonly=True)
    def sneaky_write(self) -> None:
        self.state["count"] = 99

    @troupe.method(readonly=True)
    def careful_write(self) -> str:
        try:
            del self.state["count"]
        except troupe.ReadOnlyStateError as e:
            return str(e)
        return "deleted"

    @troupe.method(readonly=True)
    def sneaky_append(self) -> None:
        # Changed in place, which the SDK cannot stop: the daemon refuses the turn.
        self.state["items"].append(4)

    @troupe.method(readonly=True)
    def view(self) -> dict[str, Any]:
        return dict(self.state)


async def test_read_only_calls_overlap_and_never_beside_a_writer(
    daemon: Daemon, client: troupe.Client
) -> None:
    Board.readers_inside = Board.max_readers = Board.overlaps = 0
    Board.writer_inside = False
    Board.first_overlap = asyncio.Event()
    async with hosting(daemon.address, Board):
        board = client.actor("board", "b1")
        calls = [board.bump() if i in (10, 35) else board.read() for i in range(50)]
        results = await asyncio.gather(*calls)
        assert Board.max_readers > 1
        assert Board.overlaps == 0
        assert set(results) <= {0, 1, 2}
        assert await client.get_state("board", "b1", ["count"]) == {"count": 2}


async def test_read_only_method_cannot_write_state(daemon: Daemon, client: troupe.Client) -> None:
    async with hosting(daemon.address, Board):
        board = client.actor("board", "b1")
        assert await board.bump() == 1
        before = await client.get_state("board", "b1")

        with pytest.raises(troupe.ActorError) as err:
            await board.sneaky_write()
        assert err.value.remote_type == "ReadOnlyStateError"
        assert "method 'sneaky_write' of board/b1 is read-only" in err.value.message
        assert "tried to set key 'count'" in err.value.message

        message = await board.careful_write()
        assert "tried to delete key 'count'" in message

        # The backstop: a change made in place gets past the SDK, and the daemon refuses it.
        with pytest.raises(troupe.FailedPrecondition) as refused:
            await board.sneaky_append()
        assert "method 'sneaky_append' of board/b1 is read-only but changed state" in str(
            refused.value
        )
        assert "(keys: items)" in str(refused.value)

        assert await client.get_state("board", "b1") == before
        # The app's copy was put back as well.
        assert await board.view() == before


async def test_an_unknown_method_is_the_callers_type_error(
    daemon: Daemon, client: troupe.Client
) -> None:
    # TypeError as in the TypeScript SDK, so every caller (and the CLI's
    # exit code) sees the same kind of failure for a method the type lacks.
    async with hosting(daemon.address, PlainOrder):
        with pytest.raises(troupe.ActorError) as err:
            await client.invoke("plain_order", "o1", "no_such_method")
    assert err.value.remote_type == "TypeError"
    assert "has no method 'no_such_method'" in str(err.value)
    assert err.value.kind == "no-such-method"


def logged(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A decorator as users write them: a ``(*args, **kwargs)`` wrapper."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    return wrapper


@troupe.actor("typed_sum")
class TypedSum(troupe.Actor):
    @troupe.method
    async def add(self, a: int, b: int) -> int:
        return a + b

    @troupe.method
    @logged
    async def add_logged(self, a: int, b: int) -> int:
        return a + b

    @troupe.method
    async def relay(self, a: Any) -> int:
        return int(await self.ctx.actor("typed_sum", "t2").add(a))


@pytest.mark.parametrize(
    "method", ["add", "add_logged"], ids=["plain", "behind a functools.wraps decorator"]
)
async def test_a_callers_mistake_is_told_from_what_the_method_raised(
    daemon: Daemon, client: troupe.Client, method: str
) -> None:
    # All are TypeErrors by Python's naming; only the kind says whether the method ran. A
    # decorated method's arguments are judged by the method it wraps, not the wrapper's
    # (*args, **kwargs).
    async with hosting(daemon.address, TypedSum):
        s = client.actor("typed_sum", "t1")
        call = getattr(s, method)
        assert await call(1, 2) == 3
        with pytest.raises(troupe.ActorError) as surplus:
            await call(1, 2, 3)
        with pytest.raises(troupe.ActorError) as unknown_name:
            await call(1, c=2)
        with pytest.raises(troupe.ActorError) as in_body:
            await call(1, "two")
        with pytest.raises(troupe.ActorError) as nested:
            await s.relay(1)
    assert [e.value.remote_type for e in (surplus, unknown_name, in_body, nested)] == [
        "TypeError"
    ] * 4
    assert surplus.value.kind == "bad-arguments"
    assert unknown_name.value.kind == "bad-arguments"
    assert in_body.value.kind == "raised"
    # The nested call's bad arguments are the relaying method's bug.
    assert nested.value.kind == "raised"
