"""Types of troupe._native, the native core (crates/sdk-python)."""

from collections.abc import Callable, Sequence

Metadata = Sequence[tuple[str, str]]
# (gRPC status code number, message, ASCII trailers)
CallError = tuple[int, str, list[tuple[str, str]]]
# A failed client call: its CallError's three, then the retries made, their seconds, why
# they stopped for lack of time or of retry budget ("deadline", "window", "budget" or None)
# and the last refusal retried, as "CODE: message" (None if none).
Failure = tuple[int, str, list[tuple[str, str]], int, float, str | None, str | None]
# A retry begun: (call id, retry number from 1, pause in seconds, the refusal as "CODE: message")
Retrying = tuple[int, int, float, str]

class InvalidKey(ValueError):
    """An idempotency key the daemon would refuse; nothing was sent."""

class Client:
    def __init__(
        self,
        address: str,
        ca: bytes | None = None,
        cert: bytes | None = None,
        key: bytes | None = None,
        max_receive_bytes: int | None = None,
        # (max_tokens, token_ratio) of the client's retry budget (gRFC A6 retry
        # throttling), or None for none.
        retry_budget: tuple[int, float] | None = (100, 0.1),
    ) -> None: ...
    def fileno(self) -> int: ...
    def invoke(
        self,
        id: int,
        request: bytes,
        key: str | None,
        timeout: float | None,
        metadata: Metadata,
        retry: bool,
    ) -> None: ...
    def tell(
        self,
        id: int,
        request: bytes,
        key: str | None,
        timeout: float | None,
        metadata: Metadata,
        retry: bool,
    ) -> None: ...
    def unary(
        self, id: int, method: str, request: bytes, timeout: float | None, metadata: Metadata
    ) -> None: ...
    def flush(self) -> None: ...
    def cancel(self, id: int) -> None: ...
    def take(self) -> tuple[list[tuple[int, bytes | Failure]], list[Retrying]]: ...
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
        # (max_tokens, token_ratio) of the retry budget of the turns' calls on each
        # connection, or None for none.
        retry_budget: tuple[int, float] | None = (100, 0.1),
    ) -> None: ...
    def fileno(self) -> int: ...
    def start(self) -> None: ...
    def client(self) -> Client: ...
    def send(self, generation: int, messages: list[bytes]) -> bool: ...
    # ("registered", generation, bytes) | (kind, generation, bytes)
    # | ("lost", outage, code, message, first) | ("ended", why, detail)
    def take(self) -> list[tuple[object, ...]]: ...
    def stop(self) -> None: ...
