"""Where the daemon is and how channels to it are configured."""

from __future__ import annotations

import os

import grpc

DEFAULT_ADDRESS = "127.0.0.1:7420"
# The SDK's release: the package version in pyproject.toml, the daemon's (the
# workspace Cargo.toml) and the TypeScript SDK's, which ship together (a test
# keeps them equal). A constant rather than importlib.metadata, which knows only
# installed distributions, not a source tree on the path.
SDK_VERSION = "0.1.0"
SDK_NAME = f"troupe-python/{SDK_VERSION}"
# The app API version this SDK speaks (Register.api_version in app.proto): the
# daemon refuses another, and the SDK refuses a daemon that answers another. Goes
# up only with an incompatible change of the app or client protocol, together
# with the daemon's (troupe_proto::v1::API_VERSION) and the TypeScript SDK's.
API_VERSION = 1

# The smallest receive limit an app may declare (the daemon refuses less: its
# other messages must always fit).
MIN_RECEIVE_BYTES = 64 * 1024

# The daemon enforces payload limits with a clear status, and sends an app up to
# twice its --max-payload-bytes (configurable) in one message; any fixed receive
# limit here (gRPC's default is 4 MiB) would fail what the daemon accepted, and
# on an app's stream would end the stream. So -1: no limit, unless the app sets
# one (App(max_receive_bytes=...)) and declares it to the daemon.
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # gRPC's default reconnect backoff grows to 2 minutes; a sidecar on
    # loopback should be picked up again within a couple of seconds.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def resolve_address(address: str | None) -> str:
    """The explicit address, else $TROUPE_ADDR, else 127.0.0.1:7420."""
    return address or os.environ.get("TROUPE_ADDR") or DEFAULT_ADDRESS


def check_receive_limit(max_receive_bytes: int | None) -> None:
    """Raise ValueError unless ``max_receive_bytes`` is None or a limit the daemon takes."""
    if max_receive_bytes is None:
        return
    if isinstance(max_receive_bytes, bool) or not isinstance(max_receive_bytes, int):
        raise ValueError(
            f"max_receive_bytes must be a whole number of bytes or None, not {max_receive_bytes!r}"
        )
    if max_receive_bytes < MIN_RECEIVE_BYTES:
        raise ValueError(
            f"max_receive_bytes={max_receive_bytes} is below the smallest the daemon accepts "
            f"({MIN_RECEIVE_BYTES}); pass at least {MIN_RECEIVE_BYTES}, or None for no limit"
        )


def open_channel(
    address: str,
    max_receive_bytes: int | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> grpc.aio.Channel:
    """A TLS channel with ``credentials``, else a plaintext one (a sidecar on loopback,
    or on the daemon's Unix socket: ``unix:/path/to/troupe.sock``).

    ``max_receive_bytes`` bounds one received message (None: no bound).
    """
    target = address.removeprefix("http://")
    options: list[tuple[str, int | str]] = [*CHANNEL_OPTIONS]
    if max_receive_bytes is not None:
        options = [
            ("grpc.max_receive_message_length", max_receive_bytes),
            *(o for o in CHANNEL_OPTIONS if o[0] != "grpc.max_receive_message_length"),
        ]
    if target.startswith("unix:"):
        # gRPC names a socket's path as the :authority, which the daemon's HTTP/2
        # server refuses as no authority at all (RST_STREAM, PROTOCOL_ERROR).
        options = [*options, ("grpc.default_authority", "localhost")]
    if credentials is not None:
        return grpc.aio.secure_channel(target, credentials, options=options)
    return grpc.aio.insecure_channel(target, options=options)
