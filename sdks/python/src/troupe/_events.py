"""Watching actors' events (ActorClient.Watch for one actor, ActorClient.WatchType for every
actor of a type): Watch, the stream a Client opens for either, and ActorEvent, what it yields.

Both cores watch on a grpcio channel: the native core has no streaming client, and a watch
carries a few events, not the call rate invoke and tell are tuned for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc

from ._address import SDK_NAME
from ._errors import from_rpc_error
from ._payload import decode_event
from ._proto.troupe.v1 import client_pb2

# grpc.aio's end-of-stream marker (missing from the type stubs).
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]

if TYPE_CHECKING:
    WatchCall = grpc.aio.UnaryStreamCall[
        client_pb2.WatchRequest | client_pb2.WatchTypeRequest, client_pb2.ActorEvent
    ]

# Why a daemon would not know a watch RPC (WatchType came after Watch), and what to do.
_OLDER_DAEMON = (
    f"; the daemon is older than this SDK ({SDK_NAME}) and lacks this call: run the daemon"
    " of the SDK's release"
)

# Opens the RPC on the client's channel, with its metadata.
OpenWatch = Callable[[], "WatchCall"]


@dataclass(frozen=True)
class ActorEvent:
    """One event an actor published (``self.ctx.publish(value)``), as a watcher gets it.

    Attributes:
        value: what the actor published, decoded as a method's result is (a JSON value,
            or bytes).
        cursor: the event's place in the stream it came in: pass it as ``after=cursor`` to
            the same kind of watch (``client.watch(type, id, ...)`` or
            ``client.watch_type(type, ...)``) to resume after it; a cursor of one kind
            does not resume the other.
        missed_before: events published before this one (since the watch began, or since
            its ``after`` cursor) may not have reached this watcher: it fell more than the
            daemon holds behind, the actor moved to another daemon, or that daemon
            restarted.
        published_at_unix_ms: when the turn that published it ended, in milliseconds since
            the Unix epoch on the clock of the daemon that ran it.
        actor_type: the type of the actor that published it.
        actor_id: the id of the actor that published it: what tells the actors of a
            :meth:`Client.watch_type` stream apart.
    """

    value: Any
    cursor: str
    missed_before: bool
    published_at_unix_ms: int
    actor_type: str
    actor_id: str


class Watch:
    """The events of one actor (:meth:`Client.watch`) or of every actor of a type
    (:meth:`Client.watch_type`), as the client streams them: an async context manager and
    an async iterator of :class:`ActorEvent`.

    ``async with client.watch("bus", "7") as events:`` returns once the daemon watches the
    actor (``client.watch_type("bus")``: the type), so every event published after that
    reaches the loop ``async for event in events``. Iterating without entering starts the
    watch at the first ``__anext__``; then events published before the daemon watched are
    missed (unless ``after`` names a cursor the daemon still holds).

    Leaving the block, or :meth:`aclose`, ends the stream; so does :meth:`Client.close`.
    The iteration then stops. A failure (the daemon is unreachable, it refused the actor's
    type or id or the cursor, or the connection broke) raises the SDK's error for it
    (:class:`Unavailable`, :class:`InvalidArgument`, ...), as other client calls do; it is
    not retried: watch again with ``after=`` the last event's cursor to resume.
    """

    def __init__(
        self,
        open_call: OpenWatch,
        what: str,
        *,
        again: str,
        actor_type: str,
        actor_id: str = "",
    ) -> None:
        """``what`` names the watch in errors, ``again`` is the call that starts another
        (for the error a closed watch raises); ``actor_type`` and ``actor_id`` are the
        watched actor's (a type watch: the type, no id), for events that do not name their
        actor."""
        self._open = open_call
        self._what = what
        self._again = again
        self._actor_type = actor_type
        self._actor_id = actor_id
        self._call: WatchCall | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._call is not None else "not started"
        return f"<troupe.Watch {self._what}, {state}>"

    @property
    def closed(self) -> bool:
        """Whether the stream has ended (left, closed, or failed)."""
        return self._closed

    async def _start(self) -> WatchCall:
        """Open the RPC and wait for the daemon's response headers, which it sends once it
        watches; raises the SDK's error when it refused the watch."""
        if self._call is not None:
            return self._call
        if self._closed:
            raise RuntimeError(
                f"{self._what}: this watch is closed; call {self._again} again, with"
                " after= the last event's cursor to resume where it ended"
            )
        call = self._open()
        self._call = call
        try:
            await call.initial_metadata()
            if call.done():
                # Refused (a bad cursor, type or id) or unreachable: the status came
                # instead of the headers.
                await call.wait_for_connection()
        except grpc.aio.AioRpcError as e:
            self._end()
            note = _OLDER_DAEMON if e.code() == grpc.StatusCode.UNIMPLEMENTED else ""
            raise from_rpc_error(e, self._what, note=note) from None
        except asyncio.CancelledError:
            ended_elsewhere = self._closed
            self._end()
            if ended_elsewhere and not _cancelling():
                # Client.close() while it started: an ended watch, which yields nothing.
                return call
            raise
        except BaseException:
            self._end()
            raise
        return call

    async def __aenter__(self) -> Watch:
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> ActorEvent:
        if self._closed:
            raise StopAsyncIteration
        call = await self._start()
        try:
            msg = await call.read()
        except grpc.aio.AioRpcError as e:
            self._end()
            raise from_rpc_error(e, self._what) from None
        except asyncio.CancelledError:
            # grpc.aio cancels the RPC with the read, so the watch is over either way. Ended
            # by aclose() or Client.close() from elsewhere, that is the iteration's end; the
            # task's own cancellation goes on.
            ended_here = self._closed
            self._end()
            if ended_here and not _cancelling():
                raise StopAsyncIteration from None
            raise
        if msg is _EOF:
            # The daemon ended the stream without an error (it is shutting down).
            self._end()
            raise StopAsyncIteration
        assert isinstance(msg, client_pb2.ActorEvent)
        # A daemon older than ActorEvent.actor leaves it unset: a one-actor watch's events
        # are still its actor's.
        return ActorEvent(
            value=decode_event(msg.payload),
            cursor=msg.cursor,
            missed_before=msg.missed_before,
            published_at_unix_ms=msg.published_unix_ms,
            actor_type=msg.actor.type or self._actor_type,
            actor_id=msg.actor.id or self._actor_id,
        )

    async def aclose(self) -> None:
        """End the stream (cancelling the RPC); iterating then stops. Closing twice is fine."""
        self._end()

    def _end(self) -> None:
        self._closed = True
        call = self._call
        if call is not None and not call.done():
            call.cancel()


def _cancelling() -> bool:
    """Whether the running task is being cancelled (always False before Python 3.11, which
    cannot tell)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False
