from troupe._proto.troupe.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InvokeRequest(_message.Message):
    __slots__ = ("actor", "method", "payload", "metadata", "chain")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    method: str
    payload: _common_pb2.Payload
    metadata: _containers.ScalarMap[str, str]
    chain: _common_pb2.CallChain
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chain: _Optional[_Union[_common_pb2.CallChain, _Mapping]] = ...) -> None: ...

class InvokeResponse(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: _common_pb2.Payload
    def __init__(self, payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ...) -> None: ...

class TellRequest(_message.Message):
    __slots__ = ("actor", "method", "payload", "metadata", "chain")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    method: str
    payload: _common_pb2.Payload
    metadata: _containers.ScalarMap[str, str]
    chain: _common_pb2.CallChain
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chain: _Optional[_Union[_common_pb2.CallChain, _Mapping]] = ...) -> None: ...

class TellResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("actor", "keys")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class GetStateResponse(_message.Message):
    __slots__ = ("entries", "active")
    class EntriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.ScalarMap[str, bytes]
    active: bool
    def __init__(self, entries: _Optional[_Mapping[str, bytes]] = ..., active: bool = ...) -> None: ...
