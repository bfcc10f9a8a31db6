from __future__ import annotations

import json

import pytest

from troupe._caller import split_params
from troupe._payload import (
    BYTES,
    JSON,
    PayloadError,
    decode_call,
    decode_result,
    encode_call,
    encode_result,
)
from troupe._proto.troupe.v1 import common_pb2


def test_call_is_args_kwargs_object() -> None:
    p = encode_call([1, "a"], {"by": 5})
    assert p.content_type == JSON
    assert json.loads(p.data) == {"args": [1, "a"], "kwargs": {"by": 5}}
    assert decode_call(p) == ([1, "a"], {"by": 5})


def test_lone_bytes_argument_travels_raw() -> None:
    p = encode_call([b"\x00\xff"], {})
    assert (p.content_type, p.data) == (BYTES, b"\x00\xff")
    assert decode_call(p) == ([b"\x00\xff"], {})


def test_empty_and_unspecified_payloads_mean_no_arguments() -> None:
    assert decode_call(common_pb2.Payload()) == ([], {})
    unspecified = common_pb2.Payload(data=b'{"kwargs": {"x": 1}}')
    assert decode_call(unspecified) == ([], {"x": 1})


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"[1, 2]", r"must be an object .*, not an array$"),
        (b'"x"', r"not a string$"),
        (b'{"args": 1}', r'"args" must be a JSON array'),
        # An object, so the message names the member that does not belong.
        (
            b'{"args": [10], "extra": 1}',
            r'holds only "args" and "kwargs"; this one also has "extra"$',
        ),
        (b"not json", r"not valid JSON"),
    ],
)
def test_malformed_call_payload_is_rejected(data: bytes, says: str) -> None:
    with pytest.raises(PayloadError, match=says):
        decode_call(common_pb2.Payload(data=data, content_type=JSON))


def test_unserialisable_arguments_say_so() -> None:
    with pytest.raises(TypeError, match="JSON-serialisable"):
        encode_call([object()], {})


def test_results_roundtrip() -> None:
    assert decode_result(encode_result(None)) is None
    assert encode_result(None).data == b"null"
    assert decode_result(encode_result({"a": [1, 2.5]})) == {"a": [1, 2.5]}
    raw = encode_result(b"abc")
    assert raw.content_type == BYTES
    assert decode_result(raw) == b"abc"


def test_split_params() -> None:
    assert split_params(None) == ((), {})
    assert split_params({"by": 5}) == ((), {"by": 5})
    assert split_params([1, 2]) == ([1, 2], {})
    assert split_params(b"x") == ((b"x",), {})
    with pytest.raises(TypeError, match="params must be"):
        split_params("oops")  # type: ignore[arg-type]
