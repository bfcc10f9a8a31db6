"""Unit tests without a daemon: a large message in pieces on the grpcio core. The app
registers with accepts_parts, runs a small turn that comes between the pieces of a
large one at once, and the large one when its last piece is in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import pytest

import troupe
from troupe._proto.troupe.v1 import app_pb2, common_pb2
from troupe._session import _Pieces, _Session

from ._session_loops import loops_on

PIECE = 128 * 1024


@troupe.actor("pieces")
class Measure(troupe.Actor):
    @troupe.method
    async def size(self, value: str) -> int:
        return len(value)


def _ref(actor_id: str) -> common_pb2.ActorRef:
    return common_pb2.ActorRef(type="pieces", id=actor_id)


def _turn(call_id: int, actor_id: str, value: str) -> app_pb2.DaemonMessage:
    payload = common_pb2.Payload(data=json.dumps({"args": [value]}).encode())
    turn = app_pb2.Turn(
        call_id=call_id,
        actor=_ref(actor_id),
        kind=common_pb2.TURN_KIND_CALL,
        name="size",
        payload=payload,
    )
    return app_pb2.DaemonMessage(turn=turn)


def _pieces(msg: app_pb2.DaemonMessage) -> list[app_pb2.DaemonMessage]:
    """`msg` cut as the daemon cuts it: the whole's size on the first piece."""
    data = msg.SerializeToString()
    chunks = [data[i : i + PIECE] for i in range(0, len(data), PIECE)]
    return [
        app_pb2.DaemonMessage(
            part=app_pb2.MessagePart(
                data=chunk,
                last=i == len(chunks) - 1,
                whole_bytes=len(data) if i == 0 else 0,
            )
        )
        for i, chunk in enumerate(chunks)
    ]


class _FakeStream:
    """The Attach stream as _read_loop and _write_loop see it."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[app_pb2.DaemonMessage] = asyncio.Queue()
        self.results: dict[int, app_pb2.TurnResult] = {}
        self._wrote = asyncio.Event()

    async def read(self) -> object:
        return await self.incoming.get()

    async def write(self, msg: app_pb2.AppMessage) -> None:
        for one in msg.batch.messages if msg.WhichOneof("kind") == "batch" else [msg]:
            if one.WhichOneof("kind") == "turn_result":
                self.results[one.turn_result.call_id] = one.turn_result
        self._wrote.set()

    async def result(self, call_id: int) -> app_pb2.TurnResult:
        async def wait() -> app_pb2.TurnResult:
            while call_id not in self.results:
                self._wrote.clear()
                await self._wrote.wait()
            return self.results[call_id]

        return await asyncio.wait_for(wait(), 5)


@pytest.fixture
async def stream() -> AsyncIterator[_FakeStream]:
    app = troupe.App(actors=[Measure], address="127.0.0.1:1")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    session = _Session(app, channel)
    fake = _FakeStream()
    try:
        async with loops_on(session, fake):
            yield fake
    finally:
        await channel.close(None)


def test_the_grpcio_core_registers_for_pieces() -> None:
    app = troupe.App(actors=[Measure], address="127.0.0.1:1")
    assert app._register_message().accepts_parts


async def test_a_small_turn_between_the_pieces_of_a_large_one_runs_at_once(
    stream: _FakeStream,
) -> None:
    for actor_id in ("large", "small"):
        activate = app_pb2.Activate(call_id=0, actor=_ref(actor_id))
        stream.incoming.put_nowait(app_pb2.DaemonMessage(activate=activate))
    large = _pieces(_turn(1, "large", "x" * (3 * PIECE)))
    assert len(large) > 2
    stream.incoming.put_nowait(large[0])
    stream.incoming.put_nowait(_turn(2, "small", "abc"))
    small = await stream.result(2)
    assert json.loads(small.reply.data) == 3
    assert 1 not in stream.results
    for piece in large[1:]:
        stream.incoming.put_nowait(piece)
    answer = await stream.result(1)
    assert json.loads(answer.reply.data) == 3 * PIECE


def test_pieces_over_the_apps_limit_end_the_stream() -> None:
    pieces = _Pieces(limit=64 * 1024)
    first = _pieces(_turn(1, "large", "x" * (3 * PIECE)))[0]
    with pytest.raises(ConnectionError, match="max_receive_bytes=65536"):
        pieces.push(first.part)
    # Pieces that do not say the whole's size are refused once they add up to more.
    unbounded = _Pieces(limit=None)
    chunks = _pieces(_turn(1, "large", "x" * (3 * PIECE)))
    assert [unbounded.push(c.part) is None for c in chunks] == [True] * (len(chunks) - 1) + [False]
    bounded = _Pieces(limit=2 * PIECE)
    with pytest.raises(ConnectionError):
        for c in chunks:
            c.part.whole_bytes = 0
            bounded.push(c.part)
