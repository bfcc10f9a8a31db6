"""Client's watches of actors' events (docs/events.md): watch and watch_type, which open a
Watch (_events.py) on the client's connection, and the grpcio channel the native core's
watches use."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from ._actor import type_name
from ._address import open_channel
from ._events import Watch
from ._proto.troupe.v1 import client_pb2, client_pb2_grpc, common_pb2
from ._tls import TlsSource
from ._tracing import Metadata

if TYPE_CHECKING:
    from ._actor import Actor
    from ._caller import Caller
    from ._events import WatchCall


class ClientWatches:
    """:class:`Client`'s watch methods, and the open watches it ends when it closes."""

    # The Client's (declared for the type checker; Client sets them): its watches reach
    # the daemon as its calls do.
    address: str
    _tls: TlsSource
    _channel: grpc.aio.Channel | None
    _call_auth: Metadata

    if TYPE_CHECKING:

        def _get_caller(self) -> Caller: ...

    def _init_watches(self) -> None:
        # The native core's watches: a grpcio channel of their own, opened by the first.
        self._watch_channel: grpc.aio.Channel | None = None
        # Open watches, ended by close(); one left unclosed is not kept alive by it.
        self._watches: weakref.WeakSet[Watch] = weakref.WeakSet()

    async def _close_watches(self) -> None:
        """End the open watches and close the channel opened for them."""
        watches = list(self._watches)
        self._watches.clear()
        for watch in watches:
            watch._end()
        if self._watch_channel is not None:
            watch_channel, self._watch_channel = self._watch_channel, None
            await watch_channel.close(None)

    def watch(
        self,
        actor_type: str | type[Actor],
        actor_id: str,
        *,
        after: str | None = None,
        reconnect: bool = False,
    ) -> Watch:
        """Stream the events the actor publishes (``self.ctx.publish(value)`` in its turns)::

            async with client.watch("bus", "7") as events:
                async for event in events:
                    print(event.value, event.cursor)

        Entering the block returns once the daemon watches the actor: every event
        published after that arrives, in the order published (a turn's events when the turn
        has succeeded; a failed turn publishes none). Iterating without entering starts
        the watch at the first event asked for. Leaving the block, ``aclose()`` or
        :meth:`close` ends it. Watching does not activate the actor, and works on any
        daemon of the cluster. (Every actor of a type at once: :meth:`watch_type`.)

        ``after`` resumes after an event: its :attr:`ActorEvent.cursor`. The stream starts
        with the events published since that the daemon still holds (the last 256 of the
        actor, kept 30 s after its last watcher left); when it cannot tell whether some
        were missed (they were dropped, the actor moved to another daemon, or that daemon
        restarted), the first event says so with ``missed_before=True``. None: only events
        published from now on.

        Events are live, not stored: a watch gets them in the order published, but those
        published while nobody watched, or beyond what the daemon holds, are not delivered
        at all. The stream has no timeout. Errors raise as for other calls:
        :class:`InvalidArgument` for a bad type, id or cursor, :class:`Overloaded` when the
        daemon watches as many actors as it may, :class:`Unavailable` when it is unreachable.

        ``reconnect=True`` makes the watch outlive a daemon's restart or a broken
        connection, once it has begun (the first open raises as above): when the stream
        fails with UNAVAILABLE or the daemon ends it, the watch opens it again by itself,
        after the last event it yielded (else after ``after``), pausing 0.1 s doubling to
        5 s between attempts (back to 0.1 s once an event comes or a stream stays open
        5 s), until it is closed; each re-open is logged once (INFO, logger
        ``troupe``). Events the daemon can no longer send come as for any resume, the first
        with ``missed_before=True``; so does the first after a re-open with no cursor to
        resume from. Other errors still raise. Without it the watch is not retried: watch
        again with ``after=`` the last cursor.
        """
        actor_type = type_name(actor_type)
        actor = common_pb2.ActorRef(type=actor_type, id=actor_id)
        return self._new_watch(
            lambda stub, metadata, cursor: stub.Watch(
                client_pb2.WatchRequest(actor=actor, after=cursor), metadata=metadata
            ),
            f"watch {actor_type}/{actor_id}",
            again="client.watch(...)",
            actor_type=actor_type,
            actor_id=actor_id,
            after=_cursor(after),
            reconnect=reconnect,
        )

    def watch_type(
        self,
        actor_type: str | type[Actor],
        *,
        after: str | None = None,
        id_prefix: str | None = None,
        reconnect: bool = False,
    ) -> Watch:
        """Stream the events every actor of a type publishes, on every daemon of the cluster
        that hosts it: a map of every bus::

            async with client.watch_type("bus") as events:
                async for event in events:
                    show(event.actor_id, event.value)

        ``id_prefix`` keeps only the actors whose id starts with it: one tenant's carts
        with ``client.watch_type("cart", id_prefix="tenant-42/")``. Each daemon leaves the
        others' events out before they travel. Resume such a watch with the same prefix.

        Each :class:`ActorEvent` names the actor that published it (``actor_id``). One
        actor's events arrive in the order it published them; different actors' events
        interleave as they come. Otherwise it is :meth:`watch`: entering the block returns
        once the daemon watches the type, iterating without entering starts the watch at
        the first event asked for, leaving the block, ``aclose()`` or :meth:`close` ends
        it, and watching activates no actor.

        ``after`` resumes after an event of a type watch: its :attr:`ActorEvent.cursor`
        (a cursor of :meth:`watch` is not one). The stream starts with the events
        published since that the daemons still hold (the type's last 4096 on each, within
        8 MiB); ``missed_before=True`` says some may be missing. None: only events
        published from now on.

        Events are live, not stored, and the stream has no timeout. ``reconnect=True``
        re-opens a broken stream by itself as for :meth:`watch`, with the same
        ``id_prefix``; without it, after an error, watch again with ``after=`` the last
        cursor. Errors raise as for other calls: :class:`InvalidArgument` for an empty
        type, a bad cursor or a prefix longer than any id, :class:`NotFound` for a type no
        app has registered, :class:`Overloaded` past the daemon's bounds on watches,
        :class:`Unavailable` when it is unreachable.
        """
        actor_type = type_name(actor_type)
        prefix = id_prefix or ""
        what = f"watch_type {actor_type}"
        if id_prefix:
            what += f" id_prefix={id_prefix[:64]!r}"
        return self._new_watch(
            lambda stub, metadata, cursor: stub.WatchType(
                client_pb2.WatchTypeRequest(type=actor_type, after=cursor, id_prefix=prefix),
                metadata=metadata,
            ),
            what,
            again="client.watch_type(...)",
            actor_type=actor_type,
            after=_cursor(after),
            reconnect=reconnect,
        )

    def _new_watch(
        self,
        rpc: Callable[[Any, Metadata | None, str], WatchCall],
        what: str,
        *,
        again: str,
        actor_type: str,
        actor_id: str = "",
        after: str,
        reconnect: bool,
    ) -> Watch:
        """A Watch that opens ``rpc(stub, metadata, cursor)`` on the watch channel (a
        request resuming after ``cursor``), ended by :meth:`close`."""

        def open_call(cursor: str) -> WatchCall:
            # Here, in the event loop the watch runs on, as the channels bind to it.
            channel = self._open_watch_channel()
            stub = client_pb2_grpc.ActorClientStub(channel)  # type: ignore[no-untyped-call]
            return rpc(stub, self._call_auth or None, cursor)

        watch = Watch(
            open_call,
            what,
            again=again,
            actor_type=actor_type,
            actor_id=actor_id,
            after=after,
            reconnect=reconnect,
        )
        self._watches.add(watch)
        return watch

    def _open_watch_channel(self) -> grpc.aio.Channel:
        """The grpcio channel watches use: the pure core's own; on the native core one opened
        for them as the pure core opens its channel (address, TLS, token)."""
        self._get_caller()  # opens the connection, reading the token and TLS files
        if self._channel is not None:
            return self._channel
        if self._watch_channel is None:
            self._watch_channel = open_channel(self.address, credentials=self._tls.credentials())
        return self._watch_channel


def _cursor(after: str | None) -> str:
    """A watch's ``after`` as the request's field ("": from now on)."""
    if after is not None and not isinstance(after, str):
        raise TypeError(
            f"after must be an event's cursor (a str, ActorEvent.cursor) or None, not"
            f" {type(after).__name__}"
        )
    return after or ""
