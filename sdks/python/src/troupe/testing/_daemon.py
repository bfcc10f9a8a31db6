"""A real ``troupe serve --test-clock`` for tests: started from the installed
package's binary on a free loopback port with a temporary data directory,
stopped (and its directory removed) when done, and its clock moved forward
through ``Admin.AdvanceClock``.

Starting and stopping are synchronous, so a session-scoped pytest fixture can
hold one daemon for every test whatever their event loops; calls that reach
the daemon are async and open their channel on the loop they run on.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

import grpc

from .._address import open_channel
from .._daemon import daemon_path
from .._duration import DurationLike, to_millis
from .._errors import TroupeError, from_rpc_error
from .._proto.troupe.v1 import admin_pb2, admin_pb2_grpc, common_pb2

# The line the daemon prints on stdout once it serves, with the bound address.
_ANNOUNCE = "troupe listening on "

Duration = DurationLike
"""How far to move the clock: seconds, a timedelta, or a duration string ("90s",
"720h", ISO 8601 "P30D"): the SDK's one grammar (troupe._duration)."""


class TestDaemonError(TroupeError):
    """The test daemon did not start, or stopped, or its clock cannot be moved."""

    __test__ = False  # not a pytest test class, whatever its name


@dataclass(frozen=True)
class Advanced:
    """What moving the clock did: the daemon's time after it, and the firings that ran."""

    now: datetime
    reminders_fired: int
    alarms_fired: int
    timers_fired: int


def duration_text(by: Duration) -> str:
    """``by`` in whole milliseconds, as the daemon reads it; InvalidArgument for what is not a
    duration, a negative one included (the test clock only moves forward)."""
    return f"{to_millis(by, 'advance by', allow_zero=True)}ms"


class TestDaemon:
    """One ``troupe serve --test-clock`` process (see the module docstring).

    ``binary`` defaults to :func:`troupe.daemon_path` (``$TROUPE_BIN`` or the
    binary installed with the package). ``extra_args`` are added to ``serve``.
    Use :meth:`start` and :meth:`stop`, or ``with TestDaemon.start() as d:``.

    The daemon runs with ``--host-wait 0s``: a call to a type no app registered
    fails at once with :class:`troupe.NotFound` naming the registered types,
    rather than after the daemon's start-up wait for apps (10 s by default;
    ``TestEnv.host`` returns once the daemon accepted the app's types, so there
    is nothing to wait for). A type whose app has gone is refused with UNAVAILABLE
    at once too, which the client resends until the call's deadline, so an app
    that reconnects meanwhile still answers. A ``--host-wait`` in ``extra_args``, or
    ``TROUPE_HOST_WAIT`` in the environment, replaces the kit's.
    """

    __test__ = False

    def __init__(self, proc: subprocess.Popen[str], address: str, data_dir: Path, log: Path):
        self._proc = proc
        self.address = address
        """``127.0.0.1:PORT``, for ``Client(address)`` and ``App(address=...)``."""
        self.data_dir = data_dir
        self.log_path = log
        """The daemon's log (its stderr), kept until :meth:`stop`."""

    @classmethod
    def start(
        cls,
        *,
        binary: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 30.0,
    ) -> TestDaemon:
        """Start a daemon and wait until it serves (at most ``timeout`` seconds)."""
        exe = str(binary) if binary is not None else daemon_path()
        data_dir = Path(tempfile.mkdtemp(prefix="troupe-test-"))
        log = data_dir / "daemon.log"
        args = [exe, "serve", "--test-clock", "--listen", "127.0.0.1:0"]
        args += ["--data-dir", str(data_dir / "data"), *_host_wait(extra_args), *extra_args]
        with log.open("w") as log_file:
            proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=log_file, text=True, bufsize=1
            )
        lines: queue.Queue[str | None] = queue.Queue()
        # Reads stdout to the end, so the daemon never blocks on a full pipe.
        threading.Thread(target=_pump, args=(proc, lines), daemon=True).start()
        try:
            address = _announced(lines, timeout)
        except BaseException:
            _terminate(proc)
            text = log.read_text(errors="replace")
            shutil.rmtree(data_dir, ignore_errors=True)
            raise TestDaemonError(f"the test daemon {exe} did not start:\n{text}") from None
        return cls(proc, address, data_dir, log)

    def __enter__(self) -> TestDaemon:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def log(self) -> str:
        """The daemon's log so far (for a failing test's report)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL after 10 s) and remove its data."""
        _terminate(self._proc)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    async def advance(self, by: Duration) -> Advanced:
        """Move the daemon's clock forward by ``by``, firing every reminder, alarm and timer
        due on the way in due order; returns once their turns have run."""
        return await self._advance(duration_text(by))

    async def now(self) -> datetime:
        """The daemon's scheduling time (moves with real time, and jumps on :meth:`advance`)."""
        return (await self._advance("0s")).now

    async def edit_state(
        self,
        actor_type: str,
        actor_id: str,
        values: Mapping[str, bytes],
        delete: Sequence[str],
        ttl_ms: int | None = None,
    ) -> None:
        """Store ``values`` (encoded) as keys of the actor's state and remove the keys in
        ``delete`` (``Admin.EditActorState``); an active actor is deactivated first.

        ``ttl_ms`` is each stored key's ``StateChange.ttl_ms``: None, the key keeps the expiry
        it has (none for a new key); 0, it no longer expires; otherwise it expires that many
        milliseconds after the edit (the daemon refuses under a second)."""
        changes = [common_pb2.StateChange(key=k, set=v, ttl_ms=ttl_ms) for k, v in values.items()]
        changes += [common_pb2.StateChange(key=k, delete=True) for k in delete]
        async with open_channel(self.address) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                await stub.EditActorState(
                    admin_pb2.EditActorStateRequest(
                        actor=common_pb2.ActorRef(type=actor_type, id=actor_id), changes=changes
                    )
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, f"setting the state of {actor_type}/{actor_id}") from None

    async def deactivate(self, actor_type: str, actor_id: str) -> bool:
        """End the actor's activation now (``Admin.DeactivateActor``): its running turn
        finishes, ``on_deactivate`` runs, its state is stored. False if it was not active."""
        async with open_channel(self.address) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                reply: admin_pb2.DeactivateActorResponse = await stub.DeactivateActor(
                    admin_pb2.DeactivateActorRequest(
                        actor=common_pb2.ActorRef(type=actor_type, id=actor_id)
                    )
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, f"deactivating {actor_type}/{actor_id}") from None
        return reply.deactivated

    async def _advance(self, by: str) -> Advanced:
        async with open_channel(self.address) as channel:
            stub = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
            try:
                reply: admin_pb2.AdvanceClockResponse = await stub.AdvanceClock(
                    admin_pb2.AdvanceClockRequest(by=by)
                )
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e, f"advancing the test clock by {by}") from None
        return Advanced(
            now=datetime.fromtimestamp(reply.now_unix_ms / 1000, tz=timezone.utc),
            reminders_fired=reply.reminders_fired,
            alarms_fired=reply.alarms_fired,
            timers_fired=reply.timers_fired,
        )


def _host_wait(extra_args: Sequence[str]) -> list[str]:
    """``--host-wait 0s``, unless ``extra_args`` give the flag (the daemon takes it once) or
    ``TROUPE_HOST_WAIT`` does (the daemon inherits the environment; a flag would win)."""
    given = any(a == "--host-wait" or a.startswith("--host-wait=") for a in extra_args)
    return [] if given or "TROUPE_HOST_WAIT" in os.environ else ["--host-wait", "0s"]


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def _announced(lines: queue.Queue[str | None], timeout: float) -> str:
    while True:
        line = lines.get(timeout=timeout)
        if line is None:
            raise TestDaemonError("the daemon exited before it served")
        if line.startswith(_ANNOUNCE):
            return line[len(_ANNOUNCE) :].strip()


def _terminate(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
