"""Where the daemon is and how channels to it are configured."""

from __future__ import annotations

import os

import grpc

DEFAULT_ADDRESS = "127.0.0.1:7420"
SDK_VERSION = "0.1.0"
SDK_NAME = f"troupe-python/{SDK_VERSION}"

# The daemon enforces payload limits with a clear status; don't let the gRPC
# client's smaller 4 MiB receive default hide that behind its own error.
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # gRPC's default reconnect backoff grows to 2 minutes; a sidecar on
    # loopback should be picked up again within a couple of seconds.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def resolve_address(address: str | None) -> str:
    """The explicit address, else $TROUPE_ADDR, else 127.0.0.1:7420."""
    return address or os.environ.get("TROUPE_ADDR") or DEFAULT_ADDRESS


def open_channel(address: str) -> grpc.aio.Channel:
    """An insecure channel: the daemon is a sidecar reached over loopback."""
    target = address.removeprefix("http://")
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
