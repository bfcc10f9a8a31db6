"""The argument mapping shared by all SDKs (written down in docs/payloads.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._proto.troupe.v1 import common_pb2

JSON = common_pb2.CONTENT_TYPE_JSON
BYTES = common_pb2.CONTENT_TYPE_BYTES

_EMPTY_CALL = b'{"args":[],"kwargs":{}}'


class PayloadError(ValueError):
    """A payload that does not follow docs/payloads.md."""


# Compact and ASCII-safe so every SDK decodes the bytes the same way. One encoder for every
# value: json.dumps with any option builds a new one per call, a cost paid on every argument,
# result and state value.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def encode_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> common_pb2.Payload:
    """Encode a call's arguments: a lone ``bytes`` argument travels raw, everything else as JSON."""
    if len(args) == 1 and not kwargs and isinstance(args[0], bytes | bytearray | memoryview):
        return common_pb2.Payload(data=bytes(args[0]), content_type=BYTES)
    if not args and not kwargs:
        return common_pb2.Payload(data=_EMPTY_CALL, content_type=JSON)
    try:
        data = _dumps({"args": list(args), "kwargs": dict(kwargs)})
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"call arguments must be JSON-serialisable (or one bytes value): {e}"
        ) from e
    return common_pb2.Payload(data=data, content_type=JSON)


def decode_call(payload: common_pb2.Payload) -> tuple[list[Any], dict[str, Any]]:
    """Decode a call's arguments into positional and keyword arguments."""
    if payload.content_type == BYTES:
        return [payload.data], {}
    if not payload.data:
        return [], {}
    try:
        obj = json.loads(payload.data)
    except ValueError as e:
        raise PayloadError(f"call payload is not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise PayloadError(
            'a JSON call payload must be an object {"args": [...], "kwargs": {...}},'
            f" not {_json_kind(obj)}"
        )
    extra = sorted(set(obj) - {"args", "kwargs"})
    if extra:
        raise PayloadError(
            'a JSON call payload holds only "args" and "kwargs"; this one also has '
            + ", ".join(json.dumps(k) for k in extra)
        )
    args = obj.get("args", [])
    kwargs = obj.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise PayloadError('"args" must be a JSON array and "kwargs" a JSON object')
    return args, kwargs


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def encode_result(value: Any, what: str = "return value") -> common_pb2.Payload:
    """Encode a return value (or, as ``what`` names it, a published event, encoded alike):
    ``bytes`` travel raw, anything else as JSON (None is null)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return common_pb2.Payload(data=bytes(value), content_type=BYTES)
    try:
        data = _dumps(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must be JSON-serialisable or bytes: {e}") from e
    return common_pb2.Payload(data=data, content_type=JSON)


def decode_result(payload: common_pb2.Payload) -> Any:
    """Decode a reply payload."""
    if payload.content_type == BYTES:
        return payload.data
    if not payload.data:
        return None
    return json.loads(payload.data)


def decode_event(payload: common_pb2.Payload) -> Any:
    """Decode a watched event's payload: like a result, a JSON value or, for BYTES, the raw
    bytes."""
    try:
        return decode_result(payload)
    except ValueError as e:
        raise PayloadError(
            f"event payload is not valid JSON ({e}): the actor that published it did not"
            " encode it as the troupe SDKs do (JSON, or raw bytes marked as such)"
        ) from e


def decode_data(payload: common_pb2.Payload) -> Any:
    """Decode the data of a reminder, alarm or timer firing: like a result, a JSON value
    (empty data is None) or, for BYTES, the raw bytes."""
    try:
        return decode_result(payload)
    except ValueError as e:
        raise PayloadError(f"scheduled turn data is not valid JSON: {e}") from e


def encode_state(key: str, value: Any) -> bytes:
    """Encode one state value as UTF-8 JSON."""
    try:
        return _dumps(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"state[{key!r}] must be JSON-serialisable: {e}") from e


def decode_state(data: bytes) -> Any:
    """Decode one state value stored as UTF-8 JSON."""
    return json.loads(data)
