"""Unit tests without a daemon: batching on the Attach stream. The app registers with
accepts_batches, runs each message of a DaemonBatch as if it came alone, and, once the
daemon has sent a batch, sends the answers that are ready together in one AppBatch (a
single answer alone)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

import troupe
from troupe._proto.troupe.v1 import app_pb2, common_pb2
from troupe._session import _ALONE_BYTES, _BATCH_BYTES, _BATCH_MESSAGES, _Session

ran: list[str] = []


@troupe.actor("batched")
class Batched(troupe.Actor):
    async def on_activate(self) -> None:
        ran.append(f"activate {self.id}")

    @troupe.method
    async def incr(self) -> int:
        ran.append(f"incr {self.id}")
        self.state["n"] = self.state.get("n", 0) + 1
        return int(self.state["n"])

    async def on_deactivate(self) -> None:
        ran.append(f"deactivate {self.id}")


def _ref(actor_id: str) -> common_pb2.ActorRef:
    return common_pb2.ActorRef(type="batched", id=actor_id)


def _activate(call_id: int, actor_id: str) -> app_pb2.DaemonMessage:
    return app_pb2.DaemonMessage(activate=app_pb2.Activate(call_id=call_id, actor=_ref(actor_id)))


def _turn(call_id: int, actor_id: str) -> app_pb2.DaemonMessage:
    turn = app_pb2.Turn(
        call_id=call_id, actor=_ref(actor_id), kind=common_pb2.TURN_KIND_CALL, name="incr"
    )
    return app_pb2.DaemonMessage(turn=turn)


def _deactivate(call_id: int, actor_id: str) -> app_pb2.DaemonMessage:
    msg = app_pb2.Deactivate(call_id=call_id, actor=_ref(actor_id))
    return app_pb2.DaemonMessage(deactivate=msg)


def _batch(*msgs: app_pb2.DaemonMessage) -> app_pb2.DaemonMessage:
    return app_pb2.DaemonMessage(batch=app_pb2.DaemonBatch(messages=msgs))


def _deactivated(call_id: int, size: int = 0) -> app_pb2.AppMessage:
    """An answer whose serialized size is about `size` bytes (a change of that many bytes)."""
    result = app_pb2.DeactivateResult(call_id=call_id)
    if size:
        result.changes.add(key="blob", set=b"x" * size)
    return app_pb2.AppMessage(deactivated=result)


def _call_ids(msgs: list[app_pb2.AppMessage]) -> list[int]:
    ids = []
    for msg in msgs:
        kind = msg.WhichOneof("kind")
        assert kind in ("activated", "turn_result", "deactivated"), kind
        ids.append(getattr(msg, kind).call_id)
    return ids


class _FakeStream:
    """The Attach stream as _read_loop and _write_loop see it: the test feeds what the
    daemon sends and reads what the app wrote, one entry per write."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[app_pb2.DaemonMessage] = asyncio.Queue()
        self.written: list[app_pb2.AppMessage] = []
        self._wrote = asyncio.Event()

    async def read(self) -> object:
        return await self.incoming.get()

    async def write(self, msg: app_pb2.AppMessage) -> None:
        self.written.append(msg)
        self._wrote.set()

    def answers(self) -> list[app_pb2.AppMessage]:
        """Every answer written so far, batches unpacked."""
        out: list[app_pb2.AppMessage] = []
        for msg in self.written:
            out.extend(msg.batch.messages if msg.WhichOneof("kind") == "batch" else [msg])
        return out

    async def wait_answers(self, n: int) -> None:
        async def wait() -> None:
            while len(self.answers()) < n:
                self._wrote.clear()
                await self._wrote.wait()

        await asyncio.wait_for(wait(), 5)


@pytest.fixture
async def session() -> AsyncIterator[_Session]:
    ran.clear()
    app = troupe.App(actors=[Batched], address="127.0.0.1:1")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        yield _Session(app, channel)
    finally:
        await channel.close(None)


@pytest.fixture
async def stream(session: _Session) -> AsyncIterator[_FakeStream]:
    # As a daemon that reads batches says in Registered.
    session.batch_answers = True
    fake = _FakeStream()
    loops = [
        asyncio.create_task(session._read_loop(fake)),  # type: ignore[arg-type]
        asyncio.create_task(session._write_loop(fake)),  # type: ignore[arg-type]
    ]
    try:
        yield fake
    finally:
        for task in loops:
            task.cancel()
        for task in list(session.tasks):
            task.cancel()
        await asyncio.gather(*loops, *session.tasks, return_exceptions=True)


def test_register_accepts_batches() -> None:
    app = troupe.App(actors=[Batched], address="127.0.0.1:1")
    assert app._register_message().accepts_batches is True


async def test_a_daemon_batch_runs_each_message_as_if_it_came_alone(
    session: _Session, stream: _FakeStream
) -> None:
    stream.incoming.put_nowait(_batch(_activate(1, "a"), _activate(2, "b"), _activate(3, "c")))
    await stream.wait_answers(3)
    assert sorted(_call_ids(stream.answers())) == [1, 2, 3]
    assert all(not a.activated.HasField("error") for a in stream.answers())
    assert set(session.instances) == {("batched", "a"), ("batched", "b"), ("batched", "c")}

    del stream.written[:]
    ran.clear()
    # Turns for different actors, one for an actor that is not active here, then a
    # deactivation: each is answered, and they start in the batch's order.
    stream.incoming.put_nowait(
        _batch(
            _turn(10, "b"), _turn(11, "a"), _turn(12, "zz"), _turn(13, "c"), _deactivate(14, "a")
        )
    )
    await stream.wait_answers(5)
    answers = {getattr(a, str(a.WhichOneof("kind"))).call_id: a for a in stream.answers()}
    assert sorted(answers) == [10, 11, 12, 13, 14]
    for call_id in (10, 11, 13):
        result = answers[call_id].turn_result
        assert result.WhichOneof("outcome") == "reply", result
        assert result.reply.data == b"1"
        assert {c.key: c.set for c in result.changes} == {"n": b"1"}
    assert answers[12].turn_result.error.type == "LookupError"
    assert answers[14].WhichOneof("kind") == "deactivated"
    assert ran == ["incr b", "incr a", "incr c", "deactivate a"]
    assert ("batched", "a") not in session.instances


async def test_unexpected_messages_in_a_batch_are_skipped(
    session: _Session, stream: _FakeStream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="troupe")
    registered = app_pb2.DaemonMessage(registered=app_pb2.Registered())
    stream.incoming.put_nowait(_batch(registered, _batch(_activate(1, "x")), _activate(2, "a")))
    await stream.wait_answers(1)
    assert _call_ids(stream.answers()) == [2]
    warnings = [r.getMessage() for r in caplog.records]
    assert any("'registered' in a batch" in w for w in warnings), warnings
    assert any("'batch' in a batch" in w for w in warnings), warnings


async def test_answers_ready_together_go_out_in_one_batch(
    session: _Session, stream: _FakeStream
) -> None:
    stream.incoming.put_nowait(_batch(*(_activate(i, f"a{i}") for i in range(1, 6))))
    await stream.wait_answers(5)
    (written,) = stream.written
    assert written.WhichOneof("kind") == "batch"
    assert _call_ids(list(written.batch.messages)) == [1, 2, 3, 4, 5]


async def test_answers_go_one_by_one_to_a_daemon_that_does_not_read_batches(
    session: _Session, stream: _FakeStream
) -> None:
    # An older daemon (Registered without accepts_batches) would take an AppBatch for an
    # empty AppMessage.
    session.batch_answers = False
    stream.incoming.put_nowait(_batch(*(_activate(i, f"a{i}") for i in range(1, 4))))
    await stream.wait_answers(3)
    assert [w.WhichOneof("kind") for w in stream.written] == ["activated"] * 3


async def test_a_burst_is_answered_in_few_full_batches(
    session: _Session, stream: _FakeStream
) -> None:
    n = 5_000
    for start in range(0, n, 256):
        ids = range(start, min(start + 256, n))
        stream.incoming.put_nowait(_batch(*(_activate(i, f"a{i}") for i in ids)))
    await stream.wait_answers(n)
    assert sorted(_call_ids(stream.answers())) == list(range(n))
    assert len(stream.written) <= 2 * (n // _BATCH_MESSAGES + 1), len(stream.written)
    assert all(len(w.batch.messages) <= _BATCH_MESSAGES for w in stream.written)


async def test_a_single_answer_goes_alone(session: _Session, stream: _FakeStream) -> None:
    stream.incoming.put_nowait(_activate(1, "a"))
    await stream.wait_answers(1)
    stream.incoming.put_nowait(_batch(_turn(2, "a")))
    await stream.wait_answers(2)
    assert [w.WhichOneof("kind") for w in stream.written] == ["activated", "turn_result"]


async def _drain(session: _Session, answers: list[app_pb2.AppMessage]) -> list[Any]:
    """What _next_write makes of `answers` queued at once: one entry per write, a list of
    call ids for a batch, the call id for an answer sent alone."""
    session.batch_answers = True
    for msg in answers:
        session.out.put_nowait(msg)
    writes: list[Any] = []
    while not session.out.empty() or session._held is not None:
        msg = await session._next_write()
        if msg.WhichOneof("kind") == "batch":
            assert len(msg.batch.messages) > 1
            assert msg.ByteSize() <= _BATCH_BYTES + 16
            writes.append(_call_ids(list(msg.batch.messages)))
        else:
            writes.append(_call_ids([msg])[0])
    return writes


async def test_a_batch_holds_at_most_256_answers(session: _Session) -> None:
    n = _BATCH_MESSAGES + 44
    writes = await _drain(session, [_deactivated(i) for i in range(n)])
    assert writes == [list(range(_BATCH_MESSAGES)), list(range(_BATCH_MESSAGES, n))]


async def test_a_batch_stays_under_1_mib(session: _Session) -> None:
    size = 60 * 1024  # 17 fit in 1 MiB, 18 do not
    writes = await _drain(session, [_deactivated(i, size) for i in range(40)])
    assert writes == [list(range(0, 17)), list(range(17, 34)), list(range(34, 40))]


async def test_a_large_answer_goes_alone_in_order(session: _Session) -> None:
    big = _ALONE_BYTES + 1
    answers = [_deactivated(1), _deactivated(2), _deactivated(3, big), _deactivated(4)]
    answers += [_deactivated(5), _deactivated(6, big), _deactivated(7, big)]
    writes = await _drain(session, answers)
    assert writes == [[1, 2], 3, [4, 5], 6, 7]
