"""Watching actors' events (ActorClient.Watch for one actor, ActorClient.WatchType for every
actor of a type): Watch, the stream a Client opens for either, and ActorEvent, what it yields.

Both cores watch on a grpcio channel: the native core has no streaming client, and a watch
carries a few events, not the call rate invoke and tell are tuned for.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry.context import Context as OtelContext

from ._address import SDK_NAME
from ._errors import from_rpc_error
from ._payload import decode_event
from ._proto.troupe.v1 import client_pb2
from ._tracing import remote_context

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

# Opens the RPC on the client's channel, with its metadata, resuming after the cursor it is
# given ("": from now on).
OpenWatch = Callable[[str], "WatchCall"]

# The pause before a reconnecting watch's first attempt to re-open its stream, doubled
# after each up to the last, across outages. It starts over only once the daemon shows it
# watches again: an event comes, or a stream stays open for the last pause. A daemon that
# answers each re-open and then drops the stream is not re-opened ten times a second.
_FIRST_PAUSE = 0.1
_LAST_PAUSE = 5.0

# Records carry the logger's name ("troupe"), so messages do not repeat it.
log = logging.getLogger("troupe")


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
        traceparent: the W3C ``traceparent`` of the turn that published it, as that turn
            was handed it (the daemon's turn span with trace export on, else the caller's
            own); "" when that turn was not traced. :meth:`trace_context` continues it.
        tracestate: the W3C ``tracestate`` that goes with ``traceparent`` ("" if none).
    """

    value: Any
    cursor: str
    missed_before: bool
    published_at_unix_ms: int
    actor_type: str
    actor_id: str
    # Defaulted so that events a test builds by hand need not name them.
    traceparent: str = ""
    tracestate: str = ""

    def trace_context(self) -> OtelContext:
        """The OpenTelemetry context of the turn that published this event, so that the
        work it causes joins that call's trace: start a span in it to make it a child of
        the publishing turn (``tracer.start_as_current_span("project",
        context=event.trace_context())``), or link to it (``trace.Link(
        trace.get_current_span(event.trace_context()).get_span_context())``).

        An empty context when the turn was not traced: a span started in it is a new
        trace's root (not a child of whatever span is current), and its span context is
        not valid.
        """
        return remote_context(self.traceparent, self.tracestate)


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
    (:class:`Unavailable`, :class:`InvalidArgument`, ...), as other client calls do.

    Made with ``reconnect=True``, a watch that has begun outlives a broken connection or a
    daemon's restart: when the stream fails with UNAVAILABLE or the daemon ends it, the
    watch opens it again after the last event it yielded, pausing between attempts (from
    0.1 s, doubling to 5 s; back to 0.1 s once an event comes or a stream stays open 5 s),
    for as long as it takes, until it is closed. Any other error
    still raises. Without it the watch is not retried: watch again with ``after=`` the last
    event's cursor to resume.
    """

    def __init__(
        self,
        open_call: OpenWatch,
        what: str,
        *,
        again: str,
        actor_type: str,
        actor_id: str = "",
        after: str = "",
        reconnect: bool = False,
    ) -> None:
        """``open_call(after)`` opens the RPC resuming after that cursor ("": from now on);
        ``what`` names the watch in errors and logs, ``again`` is the call that starts
        another (for the error a closed watch raises); ``actor_type`` and ``actor_id`` are
        the watched actor's (a type watch: the type, no id), for events that do not name
        their actor; ``after`` is where the watch starts, ``reconnect`` whether it re-opens
        a broken stream."""
        self._open = open_call
        self._what = what
        self._again = again
        self._actor_type = actor_type
        self._actor_id = actor_id
        # Where a re-open resumes: the cursor of the last event yielded, else the one given.
        self._after = after
        self._reconnect = reconnect
        self._call: WatchCall | None = None
        self._closed = False
        # Re-opened from now on (no cursor to resume after): the next event says that
        # events may be missing, which the daemon cannot know.
        self._missed = False
        # The next pause before a re-open, and the wait in it (which closing ends).
        self._pause = _FIRST_PAUSE
        # When the current stream opened (time.monotonic()).
        self._opened_at = 0.0
        self._waking: asyncio.Future[None] | None = None
        self._reopening = False

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        elif self._reopening:
            state = "re-opening"
        else:
            state = "open" if self._call is not None else "not started"
        return f"<troupe.Watch {self._what}, {state}>"

    @property
    def closed(self) -> bool:
        """Whether the stream has ended (left, closed, or failed)."""
        return self._closed

    async def _start(self) -> WatchCall:
        """Open the RPC the first time; raises the SDK's error when the daemon refused the
        watch or is unreachable (a reconnecting watch too: it has not begun)."""
        if self._call is not None:
            return self._call
        if self._closed:
            raise RuntimeError(
                f"{self._what}: this watch is closed; call {self._again} again, with"
                " after= the last event's cursor to resume where it ended"
            )
        try:
            return await self._connect()
        except grpc.aio.AioRpcError as e:
            self._end()
            raise self._error(e) from None
        except asyncio.CancelledError:
            ended_elsewhere = self._closed
            self._end()
            if ended_elsewhere and not _cancelling() and self._call is not None:
                # Client.close() while it started: an ended watch, which yields nothing.
                return self._call
            raise
        except BaseException:
            self._end()
            raise

    async def _connect(self) -> WatchCall:
        """Open the RPC after ``self._after`` and wait for the daemon's response headers,
        which it sends once it watches; raises the AioRpcError of a refusal."""
        call = self._open(self._after)
        self._call = call
        await call.initial_metadata()
        self._opened_at = time.monotonic()
        if call.done():
            # Refused (a bad cursor, type or id) or unreachable: the status came instead
            # of the headers.
            await call.wait_for_connection()
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
        # A pass per stream: it ends with an event, an error, the watch's close, or (a
        # reconnecting watch whose stream broke) a re-opened stream to read next.
        while True:
            try:
                msg = await call.read()
            except grpc.aio.AioRpcError as e:
                if not (self._reconnect and e.code() == grpc.StatusCode.UNAVAILABLE):
                    self._end()
                    raise from_rpc_error(e, self._what) from None
                cause = _describe(e)
            except asyncio.CancelledError:
                self._interrupted()
                raise
            else:
                if msg is not _EOF:
                    assert isinstance(msg, client_pb2.ActorEvent)
                    return self._event(msg)
                # The daemon ended the stream without an error (it is shutting down).
                if not self._reconnect:
                    self._end()
                    raise StopAsyncIteration
                cause = "the daemon ended the stream"
            call = await self._reopen(cause)

    def _event(self, msg: client_pb2.ActorEvent) -> ActorEvent:
        self._pause = _FIRST_PAUSE
        if msg.cursor:
            self._after = msg.cursor
        missed, self._missed = self._missed, False
        # A daemon older than ActorEvent.actor leaves it unset: a one-actor watch's events
        # are still its actor's.
        return ActorEvent(
            value=decode_event(msg.payload),
            cursor=msg.cursor,
            missed_before=msg.missed_before or missed,
            published_at_unix_ms=msg.published_unix_ms,
            actor_type=msg.actor.type or self._actor_type,
            actor_id=msg.actor.id or self._actor_id,
            traceparent=msg.traceparent,
            tracestate=msg.tracestate,
        )

    async def _reopen(self, cause: str) -> WatchCall:
        """Open the broken stream again after the last event yielded, pausing before each
        attempt, until the daemon watches again; raises the SDK's error of a refusal other
        than UNAVAILABLE, StopAsyncIteration when the watch is closed meanwhile."""
        if time.monotonic() - self._opened_at >= _LAST_PAUSE:
            self._pause = _FIRST_PAUSE
        if not self._after:
            # From now on: what was published while the stream was down is skipped, and
            # the daemon, given no cursor, cannot say so.
            self._missed = True
        where = (
            f"after cursor {self._after}"
            if self._after
            else "from now on (events published meanwhile are missed)"
        )
        log.debug("%s: the stream broke (%s); re-opening it %s", self._what, cause, where)
        self._reopening = True
        try:
            attempts = 0
            # An attempt a pass, each after a longer pause; ended by a re-open, an error
            # other than UNAVAILABLE, or the watch's close.
            while True:
                await self._wait_before_attempt()
                if self._closed:
                    raise StopAsyncIteration
                attempts += 1
                try:
                    call = await self._connect()
                except grpc.aio.AioRpcError as e:
                    if self._closed:
                        raise StopAsyncIteration from None
                    if e.code() != grpc.StatusCode.UNAVAILABLE:
                        self._end()
                        raise self._error(e) from None
                    log.debug(
                        "%s: not re-opened yet (%s); next attempt in up to %.0f ms",
                        self._what,
                        _describe(e),
                        self._pause * 1000,
                    )
                    continue
                log.info(
                    "%s: the stream broke (%s); re-opened it %s, attempt %d",
                    self._what,
                    cause,
                    where,
                    attempts,
                )
                return call
        except asyncio.CancelledError:
            self._interrupted()
            raise
        except StopAsyncIteration:
            raise
        except BaseException:
            self._end()
            raise
        finally:
            self._reopening = False

    async def _wait_before_attempt(self) -> None:
        """Pause before a re-open, for the current pause times a random factor in [0.5, 1]
        (so that the watchers of a restarted daemon do not all come back at once), and
        double the next one; closing the watch ends the pause at once."""
        seconds = self._pause * random.uniform(0.5, 1.0)
        self._pause = min(self._pause * 2, _LAST_PAUSE)
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        waking = loop.create_future()
        timer = loop.call_later(seconds, _wake, waking)
        self._waking = waking
        try:
            await waking
        finally:
            timer.cancel()
            self._waking = None

    def _error(self, e: grpc.aio.AioRpcError) -> Exception:
        """The SDK's error for a refused open (or re-open) of the watch."""
        note = _OLDER_DAEMON if e.code() == grpc.StatusCode.UNIMPLEMENTED else ""
        return from_rpc_error(e, self._what, note=note)

    def _interrupted(self) -> None:
        """After a wait on the stream was cancelled: grpc.aio cancels the RPC with the
        read, so the watch is over either way. Ended by aclose() or Client.close() from
        elsewhere, that is the iteration's end (raises StopAsyncIteration); the task's own
        cancellation goes on (the caller re-raises it)."""
        ended_here = self._closed
        self._end()
        if ended_here and not _cancelling():
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """End the stream (cancelling the RPC, or the pause before a re-open); iterating
        then stops. Closing twice is fine."""
        self._end()

    def _end(self) -> None:
        self._closed = True
        call = self._call
        if call is not None and not call.done():
            call.cancel()
        _wake(self._waking)


def _wake(waking: asyncio.Future[None] | None) -> None:
    if waking is not None and not waking.done():
        waking.set_result(None)


def _describe(e: grpc.aio.AioRpcError) -> str:
    details = e.details()
    return f"{e.code().name}: {details}" if details else e.code().name


def _cancelling() -> bool:
    """Whether the running task is being cancelled (always False before Python 3.11, which
    cannot tell)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False
