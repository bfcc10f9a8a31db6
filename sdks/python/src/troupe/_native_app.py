"""App.run on the native core: troupe._native.Session keeps the app attached (re-connects
with backoff, credentials read again per attempt); this side hosts each registered
stream's work in a _NativeSession and says what happened as the pure-Python core does.

Messages are dispatched as they arrive; registrations and outages go through one task in
order, since what they do (the App's registered state, a stream's work cancelled) awaits.
"""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import TYPE_CHECKING, cast

from ._attach_errors import check_api_version, log_no_connection, log_stream_closed
from ._native_session import _NativeSession, describe_outage, refusal
from ._proto.troupe.v1 import app_pb2
from ._retry import native_budget
from ._tracing import Metadata

if TYPE_CHECKING:
    from . import _native
    from ._app import App

_Credentials = tuple[list[tuple[str, str]], bytes | None, bytes | None, bytes | None]


async def _until(stop: asyncio.Event) -> None:
    await stop.wait()


class NativeApp:
    """One App.run on the native core."""

    def __init__(self, app: App, native: ModuleType, initial_delay: float) -> None:
        self.app = app
        # The latest attempt's token, for the calls its stream's turns make.
        self._auth: Metadata = ()
        self.native: _native.Session = native.Session(
            app.address,
            app._register_message().SerializeToString(),
            self._credentials,
            initial_delay,
            app.max_reconnect_delay,
            app.max_receive_bytes,
            # The core holds the budget of the turns' calls on each connection.
            retry_budget=native_budget(app.retry_budget),
        )
        self.session: _NativeSession | None = None
        # Every generation's work not yet closed.
        self._live: set[_NativeSession] = set()
        self._control: asyncio.Queue[tuple[object, ...]] = asyncio.Queue()
        self._ended: asyncio.Future[None] | None = None

    def _credentials(self) -> _Credentials:
        """Called by the core before each attempt, on its thread: the token and the TLS
        files as they are now (so a rotated Secret is picked up). Raising ends run()."""
        auth = self.app._auth.metadata()
        pem = self.app._tls.pem()
        self._auth = auth
        ca, client = pem if pem is not None else (None, None)
        cert, key = client if client is not None else (None, None)
        return list(auth), ca, cert, key

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        self._ended = ended
        control = asyncio.create_task(self._control_loop())
        stop_wait = asyncio.create_task(_until(stop))
        fd = self.native.fileno()
        loop.add_reader(fd, self._on_events)
        try:
            self.native.start()
            await asyncio.wait({ended, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also reached when run() itself is cancelled: never leave the stream behind.
            loop.remove_reader(fd)
            self.native.stop()
            stop_wait.cancel()
            control.cancel()
            await asyncio.wait({control})
            self.session = None
            for session in list(self._live):
                await session.close()
            self._live.clear()
            if self.app.registered:
                await self.app._set_registered(False)
        if ended.done():
            ended.result()

    def _on_events(self) -> None:
        for event in self.native.take():
            kind = event[0]
            if kind == "registered":
                registered = app_pb2.Registered.FromString(cast(bytes, event[2]))
                self._registered(cast(int, event[1]), registered)
            elif kind == "lost":
                lost, self.session = self.session, None
                self._control.put_nowait(("lost", lost, *event[1:]))
            elif kind == "ended":
                self._end(event[1], event[2])
            elif self.session is not None and self.session.generation == event[1]:
                self.session.dispatch(kind, cast(bytes, event[2]))

    def _registered(self, generation: int, registered: app_pb2.Registered) -> None:
        try:
            check_api_version(self.app.address, registered)
        except Exception as e:
            self._fail(e)
            return
        if self._ended is None or self._ended.done():
            return  # failed or stopped: nothing is hosted any more
        try:
            session = _NativeSession(self.app, self.native, generation, self._auth)
        except Exception as e:
            self._fail(e)
            return
        self.session = session
        self._live.add(session)
        self._control.put_nowait(("registered", registered.daemon_version))

    def _end(self, why: object, detail: object) -> None:
        if why == "refused":
            assert isinstance(detail, tuple)
            self._fail(refusal(*detail))
        elif why == "credentials":
            self._fail(detail if isinstance(detail, BaseException) else RuntimeError(detail))
        elif why == "connect":
            self._fail(ValueError(str(detail)))
        elif self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    def _fail(self, error: BaseException) -> None:
        self.native.stop()
        if self._ended is not None and not self._ended.done():
            self._ended.set_exception(error)

    async def _control_loop(self) -> None:
        while True:
            event = await self._control.get()
            if event[0] == "registered":
                await self.app._set_registered(True, str(event[1]))
                continue
            _, session, outage, code, message, first = event
            if isinstance(session, _NativeSession):
                self._live.discard(session)
                await session.close()
            if self.app.registered:
                await self.app._set_registered(False)
            self._log_outage(outage, cast(int, code), str(message), bool(first))

    def _log_outage(self, outage: object, code: int, message: str, first: bool) -> None:
        if outage == "closed":
            log_stream_closed(self.app.address)
        else:
            log_no_connection(self.app.address, describe_outage(outage, code, message), first=first)
