"""Idempotency keys and retries, against an in-process fake of the daemon's ActorClient API
that records the key of every attempt and fails the first ones as told."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest

import troupe
from troupe._context import Context
from troupe._payload import encode_result
from troupe._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from troupe._retry import call_key, made_key_retention_ms
from troupe._turn import TurnScope, current_turn

from .conftest import fake_server


class FakeActorClient(client_pb2_grpc.ActorClientServicer):
    """Answers Invoke with "ok" and Tell with nothing, after failing the first
    ``fail_first`` attempts (of either) with ``code`` (and ``pushback`` as gRPC's retry
    pushback trailer, when set)."""

    def __init__(self) -> None:
        self.fail_first = 0
        self.code = grpc.StatusCode.UNAVAILABLE
        self.pushback: str | None = None
        # When each attempt came (time.monotonic()).
        self.times: list[float] = []
        # (rpc, idempotency key, delivery) of every attempt, in arrival order.
        self.attempts: list[tuple[str, str, int]] = []
        # Whether each attempt said its key was new.
        self.new_keys: list[bool] = []
        # How long each asked the daemon to keep its answer (0: the whole retention).
        self.key_retentions_ms: list[int] = []

    async def _attempt(
        self,
        rpc: str,
        request: client_pb2.InvokeRequest | client_pb2.TellRequest,
        delivery: int,
        context: Any,
    ) -> None:
        self.attempts.append((rpc, request.idempotency_key, delivery))
        self.new_keys.append(request.new_key)
        self.key_retentions_ms.append(request.key_retention_ms)
        self.times.append(time.monotonic())
        if len(self.attempts) <= self.fail_first:
            if self.pushback is not None:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", self.pushback),))
            await context.abort(self.code, "fake daemon restarting")

    async def Invoke(
        self, request: client_pb2.InvokeRequest, context: Any
    ) -> client_pb2.InvokeResponse:
        await self._attempt("Invoke", request, 0, context)
        return client_pb2.InvokeResponse(payload=encode_result("ok"))

    async def Tell(self, request: client_pb2.TellRequest, context: Any) -> client_pb2.TellResponse:
        await self._attempt("Tell", request, request.delivery, context)
        return client_pb2.TellResponse()

    def keys(self) -> list[str]:
        return [key for _, key, _ in self.attempts]


@pytest.fixture
async def fake() -> AsyncIterator[tuple[str, FakeActorClient]]:
    servicer = FakeActorClient()
    async with fake_server(client_pb2_grpc.add_ActorClientServicer_to_server, servicer) as address:
        yield address, servicer


def test_a_made_keys_answer_is_kept_for_the_calls_retries_and_a_minute() -> None:
    assert made_key_retention_ms(None) == 70_000, "10 s of retries without a timeout"
    assert made_key_retention_ms(300.0) == 360_000
    assert made_key_retention_ms(2.5002) == 62_501
    assert made_key_retention_ms(float("inf")) == 0, "too long to count: the whole retention"


def test_call_key_is_fresh_or_the_callers_own() -> None:
    a, b = call_key(None), call_key(None)
    assert a != b
    assert str(uuid.UUID(a)) == a
    assert call_key("order-42/charge") == "order-42/charge"
    assert call_key("ü" * 128) == "ü" * 128  # 256 bytes


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("", "empty"),
        ("x" * 257, "257 bytes"),
        ("ü" * 129, "258 bytes"),
        ("a\nb", "control characters"),
        (b"raw", "must be a str"),
    ],
)
def test_bad_keys_are_refused_before_sending(key: Any, says: str) -> None:
    with pytest.raises(troupe.InvalidArgument, match=says):
        call_key(key)


async def test_every_call_carries_its_own_key(fake: tuple[str, FakeActorClient]) -> None:
    address, servicer = fake
    async with troupe.Client(address, timeout=5) as client:
        assert await client.invoke("t", "1", "m") == "ok"
        assert await client.actor("t", "1").m() == "ok"
        await client.tell("t", "1", "m")
        await client.tell("t", "1", "m", durable=True)
        await client.tell("t", "1", "m", durable=False)
        # Inside a turn: the Context's calls go through the same Caller code.
        ctx = Context(client._get_caller(), "me", "1")
        assert await ctx.invoke("t", "1", "m") == "ok"
        assert await ctx.actor("t", "1").m() == "ok"
        await ctx.tell("t", "1", "m", durable=True)
    keys = servicer.keys()
    assert len(keys) == 8
    assert all(keys), keys
    assert len(set(keys)) == len(keys), "one key per logical call"
    assert [d for rpc, _, d in servicer.attempts if rpc == "Tell"] == [
        common_pb2.DELIVERY_UNSPECIFIED,
        common_pb2.DELIVERY_DURABLE,
        common_pb2.DELIVERY_BEST_EFFORT,
        common_pb2.DELIVERY_DURABLE,
    ]


async def test_an_explicit_key_is_sent_unchanged(fake: tuple[str, FakeActorClient]) -> None:
    address, servicer = fake
    async with troupe.Client(address, timeout=5) as client:
        await client.invoke("t", "1", "m", idempotency_key="k-invoke")
        await client.tell("t", "1", "m", durable=True, idempotency_key="k-tell")
        ctx = Context(client._get_caller(), "me", "1")
        await ctx.invoke("t", "1", "m", idempotency_key="k-ctx-invoke")
        await ctx.tell("t", "1", "m", idempotency_key="k-ctx-tell")
        with pytest.raises(troupe.InvalidArgument, match="empty"):
            await client.invoke("t", "1", "m", idempotency_key="")

    def sync_calls() -> None:
        with troupe.SyncClient(address, timeout=5) as sync:
            sync.invoke("t", "1", "m", idempotency_key="k-sync-invoke")
            sync.tell("t", "1", "m", idempotency_key="k-sync-tell")

    await asyncio.to_thread(sync_calls)
    assert servicer.keys() == [
        "k-invoke",
        "k-tell",
        "k-ctx-invoke",
        "k-ctx-tell",
        "k-sync-invoke",
        "k-sync-tell",
    ]


@pytest.mark.parametrize("rpc", ["invoke", "tell", "durable tell", "proxy"])
async def test_unavailable_is_retried_with_the_same_key(
    fake: tuple[str, FakeActorClient], rpc: str
) -> None:
    address, servicer = fake
    servicer.fail_first = 3
    async with troupe.Client(address, timeout=10) as client:
        if rpc == "invoke":
            assert await client.invoke("t", "1", "m") == "ok"
        elif rpc == "proxy":
            assert await client.actor("t", "1").m() == "ok"
        else:
            await client.tell("t", "1", "m", durable=rpc == "durable tell")
    keys = servicer.keys()
    assert len(keys) == 4
    assert keys[0] and keys == [keys[0]] * 4
    # Only the first attempt says its fresh key is new: a retry's may be recorded.
    assert servicer.new_keys == [True, False, False, False]
    # No one but these retries sends the key: its answer need outlast only the call's
    # 10 s timeout, and a minute for the daemon's flush.
    assert servicer.key_retentions_ms == [70_000] * 4


async def test_an_explicit_key_is_the_one_retried(fake: tuple[str, FakeActorClient]) -> None:
    address, servicer = fake
    servicer.fail_first = 2
    async with troupe.Client(address, timeout=10) as client:
        await client.invoke("t", "1", "m", idempotency_key="mine")
    assert servicer.keys() == ["mine"] * 3
    assert servicer.new_keys == [False] * 3, "a caller's key may have been sent before"
    assert servicer.key_retentions_ms == [0] * 3, "so its answer keeps the whole retention"


async def test_a_callers_key_is_kept_as_long_as_the_caller_says(
    fake: tuple[str, FakeActorClient],
) -> None:
    address, servicer = fake
    servicer.fail_first = 2
    async with troupe.Client(address, timeout=10) as client:
        await client.invoke("t", "1", "m", idempotency_key="job-7", idempotency_retention="1h")
        ctx = Context(client._get_caller(), "me", "1")
        await ctx.invoke("t", "1", "m", idempotency_key="k", idempotency_retention=90)
        await ctx.tell("t", "1", "m", idempotency_key="k", idempotency_retention="PT2M")
        await client.tell(
            "t", "1", "m", durable=True, idempotency_key="k", idempotency_retention=0.0004
        )

    def sync_calls() -> None:
        with troupe.SyncClient(address, timeout=5) as sync:
            sync.invoke("t", "1", "m", idempotency_key="k", idempotency_retention="5m")
            sync.tell("t", "1", "m", idempotency_key="k", idempotency_retention="6m")

    await asyncio.to_thread(sync_calls)
    # Every retry asks the same: the key may come again that long after any of them.
    # Under a millisecond is one, not 0 (the wire's "the whole retention").
    assert servicer.key_retentions_ms == [3_600_000] * 3 + [
        90_000,
        120_000,
        1,
        300_000,
        360_000,
    ]
    assert servicer.new_keys == [False] * 8


@pytest.mark.parametrize(
    ("key", "retention", "says"),
    [
        (None, "1h", "pass it with idempotency_key"),
        ("k", 0, "longer than zero"),
        ("k", "-5s", "cannot be negative"),
        ("k", "soon", "not a duration"),
        ("k", True, "a bool"),
    ],
)
async def test_a_bad_idempotency_retention_is_refused_before_sending(
    fake: tuple[str, FakeActorClient], key: str | None, retention: Any, says: str
) -> None:
    address, servicer = fake
    async with troupe.Client(address, timeout=5) as client:
        with pytest.raises(troupe.InvalidArgument, match=says):
            await client.invoke("t", "1", "m", idempotency_key=key, idempotency_retention=retention)
        with pytest.raises(troupe.InvalidArgument, match=says):
            await client.tell("t", "1", "m", idempotency_key=key, idempotency_retention=retention)
    assert servicer.attempts == []


async def test_retries_end_at_the_deadline_with_the_last_error(
    fake: tuple[str, FakeActorClient],
) -> None:
    address, servicer = fake
    servicer.fail_first = 1_000_000
    started = time.monotonic()
    async with troupe.Client(address, timeout=0.6) as client:
        with pytest.raises(troupe.Unavailable) as info:
            await client.invoke("t", "1", "m")
    elapsed = time.monotonic() - started
    assert elapsed < 3, f"retries outlived the 0.6s deadline: {elapsed:.1f}s"
    keys = servicer.keys()
    assert len(keys) >= 3, keys
    assert keys == [keys[0]] * len(keys)
    message = str(info.value)
    assert f"retried {len(keys) - 1} times" in message, message
    assert "fake daemon restarting" in message
    assert "longer timeout" in message


async def test_retries_inside_a_turn_end_at_its_callers_deadline(
    fake: tuple[str, FakeActorClient],
) -> None:
    address, servicer = fake
    servicer.fail_first = 1_000_000
    scope = TurnScope(
        cast(Any, None), "me/1", "work", deadline_unix_ms=int((time.time() + 0.5) * 1000)
    )
    async with troupe.Client(address) as client:
        ctx = Context(client._get_caller(), "me", "1")
        token = current_turn.set(scope)
        try:
            with pytest.raises(troupe.Unavailable, match="retried"):
                await asyncio.wait_for(ctx.invoke("t", "1", "m"), 5)
        finally:
            current_turn.reset(token)
    assert len(servicer.keys()) >= 2


@pytest.mark.parametrize("rpc", ["invoke", "durable tell"])
async def test_a_refusal_with_a_pushback_is_retried_no_sooner_than_it_asks(
    fake: tuple[str, FakeActorClient], rpc: str
) -> None:
    address, servicer = fake
    servicer.fail_first, servicer.code = 2, grpc.StatusCode.RESOURCE_EXHAUSTED
    servicer.pushback = "300"
    async with troupe.Client(address, timeout=10) as client:
        if rpc == "invoke":
            assert await client.invoke("t", "1", "m") == "ok"
        else:
            await client.tell("t", "1", "m", durable=True)
    keys = servicer.keys()
    assert len(keys) == 3 and keys == [keys[0]] * 3
    gaps = [b - a for a, b in zip(servicer.times, servicer.times[1:], strict=False)]
    # The backoff alone would wait 50 and 100 ms.
    assert all(gap >= 0.3 for gap in gaps), gaps


async def test_a_refusal_that_outlasts_the_deadline_says_the_daemon_kept_refusing(
    fake: tuple[str, FakeActorClient],
) -> None:
    address, servicer = fake
    servicer.fail_first, servicer.code = 1_000_000, grpc.StatusCode.RESOURCE_EXHAUSTED
    servicer.pushback = "100"
    async with troupe.Client(address, timeout=0.6) as client:
        with pytest.raises(troupe.Overloaded) as info:
            await client.invoke("t", "1", "m")
    message = str(info.value)
    assert "fake daemon restarting" in message
    assert "retried" in message and "kept refusing it for lack of room" in message, message
    assert len(servicer.keys()) >= 3


@pytest.mark.parametrize("pushback", [None, "-1", "soon"])
async def test_resource_exhausted_without_a_usable_pushback_is_final(
    fake: tuple[str, FakeActorClient], pushback: str | None
) -> None:
    address, servicer = fake
    servicer.fail_first, servicer.code = 1, grpc.StatusCode.RESOURCE_EXHAUSTED
    servicer.pushback = pushback
    async with troupe.Client(address, timeout=5) as client:
        with pytest.raises(troupe.Overloaded) as info:
            await client.invoke("t", "1", "m")
    assert "retried" not in str(info.value)
    assert len(servicer.attempts) == 1


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (grpc.StatusCode.RESOURCE_EXHAUSTED, troupe.Overloaded),
        (grpc.StatusCode.NOT_FOUND, troupe.NotFound),
        (grpc.StatusCode.DEADLINE_EXCEEDED, troupe.DeadlineExceeded),
        (grpc.StatusCode.INTERNAL, troupe.TroupeError),
    ],
)
async def test_other_codes_are_never_retried(
    fake: tuple[str, FakeActorClient], code: grpc.StatusCode, error: type[Exception]
) -> None:
    address, servicer = fake
    servicer.fail_first, servicer.code = 1, code
    async with troupe.Client(address, timeout=5) as client:
        with pytest.raises(error):
            await client.invoke("t", "1", "m")
        servicer.fail_first = 2
        with pytest.raises(error):
            await client.tell("t", "1", "m", durable=True)
    assert len(servicer.attempts) == 2


async def test_retry_false_sends_each_call_once(fake: tuple[str, FakeActorClient]) -> None:
    address, servicer = fake
    servicer.fail_first = 1
    async with troupe.Client(address, timeout=5, retry=False) as client:
        with pytest.raises(troupe.Unavailable) as info:
            await client.invoke("t", "1", "m")
        assert "retried" not in str(info.value)
        assert await client.invoke("t", "1", "m") == "ok"
    keys = servicer.keys()
    assert len(keys) == 2 and keys[0] != keys[1], "each call is its own, with its own key"


def test_retry_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="retry must be True or False"):
        troupe.Client("127.0.0.1:1", retry=cast(Any, "no"))
