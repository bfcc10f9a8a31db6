"""Types of troupe._native, the native core (crates/sdk-python)."""

from collections.abc import Callable, Sequence

Metadata = Sequence[tuple[str, str]]
# (gRPC status code number, message, ASCII trailers)
CallError = tuple[int, str, list[tuple[str, str]]]

class Client:
    def __init__(
        self,
        address: str,
        ca: bytes | None = None,
        cert: bytes | None = None,
        key: bytes | None = None,
        max_receive_bytes: int | None = None,
    ) -> None: ...
    def fileno(self) -> int: ...
    def invoke(
        self, id: int, request: bytes, timeout: float | None, metadata: Metadata
    ) -> None: ...
    def tell(self, id: int, request: bytes, timeout: float | None, metadata: Metadata) -> None: ...
    def flush(self) -> None: ...
    def cancel(self, id: int) -> None: ...
    def take(self) -> list[tuple[int, bytes | CallError]]: ...
    def close(self) -> None: ...

class Session:
    """The app kept attached by the core: re-connects with backoff until stopped or
    refused for good (crates/sdk-python/src/session.rs)."""

    def __init__(
        self,
        address: str,
        register: bytes,
        credentials: Callable[
            [], tuple[list[tuple[str, str]], bytes | None, bytes | None, bytes | None]
        ],
        initial_delay: float,
        max_delay: float,
        max_receive_bytes: int | None = None,
    ) -> None: ...
    def fileno(self) -> int: ...
    def start(self) -> None: ...
    def client(self) -> Client: ...
    def send(self, generation: int, messages: list[bytes]) -> bool: ...
    # ("registered", generation, bytes) | (kind, generation, bytes)
    # | ("lost", outage, code, message, first) | ("ended", why, detail)
    def take(self) -> list[tuple[object, ...]]: ...
    def stop(self) -> None: ...
