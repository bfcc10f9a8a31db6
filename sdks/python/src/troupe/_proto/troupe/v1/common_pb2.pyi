from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContentType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTENT_TYPE_UNSPECIFIED: _ClassVar[ContentType]
    CONTENT_TYPE_JSON: _ClassVar[ContentType]
    CONTENT_TYPE_BYTES: _ClassVar[ContentType]

class FailureKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_KIND_UNSPECIFIED: _ClassVar[FailureKind]
    FAILURE_KIND_RAISED: _ClassVar[FailureKind]
    FAILURE_KIND_NO_SUCH_METHOD: _ClassVar[FailureKind]
    FAILURE_KIND_BAD_ARGUMENTS: _ClassVar[FailureKind]

class StateMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_MODE_UNSPECIFIED: _ClassVar[StateMode]
    STATE_MODE_WRITE_BEHIND: _ClassVar[StateMode]
    STATE_MODE_DURABLE: _ClassVar[StateMode]

class TurnKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_KIND_UNSPECIFIED: _ClassVar[TurnKind]
    TURN_KIND_CALL: _ClassVar[TurnKind]
    TURN_KIND_REMINDER: _ClassVar[TurnKind]
    TURN_KIND_TIMER: _ClassVar[TurnKind]
    TURN_KIND_ALARM: _ClassVar[TurnKind]

class Delivery(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_UNSPECIFIED: _ClassVar[Delivery]
    DELIVERY_BEST_EFFORT: _ClassVar[Delivery]
    DELIVERY_DURABLE: _ClassVar[Delivery]
CONTENT_TYPE_UNSPECIFIED: ContentType
CONTENT_TYPE_JSON: ContentType
CONTENT_TYPE_BYTES: ContentType
FAILURE_KIND_UNSPECIFIED: FailureKind
FAILURE_KIND_RAISED: FailureKind
FAILURE_KIND_NO_SUCH_METHOD: FailureKind
FAILURE_KIND_BAD_ARGUMENTS: FailureKind
STATE_MODE_UNSPECIFIED: StateMode
STATE_MODE_WRITE_BEHIND: StateMode
STATE_MODE_DURABLE: StateMode
TURN_KIND_UNSPECIFIED: TurnKind
TURN_KIND_CALL: TurnKind
TURN_KIND_REMINDER: TurnKind
TURN_KIND_TIMER: TurnKind
TURN_KIND_ALARM: TurnKind
DELIVERY_UNSPECIFIED: Delivery
DELIVERY_BEST_EFFORT: Delivery
DELIVERY_DURABLE: Delivery

class ActorRef(_message.Message):
    __slots__ = ("type", "id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class Payload(_message.Message):
    __slots__ = ("data", "content_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    content_type: ContentType
    def __init__(self, data: _Optional[bytes] = ..., content_type: _Optional[_Union[ContentType, str]] = ...) -> None: ...

class StateChange(_message.Message):
    __slots__ = ("key", "set", "delete", "ttl_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    key: str
    set: bytes
    delete: bool
    ttl_ms: int
    def __init__(self, key: _Optional[str] = ..., set: _Optional[bytes] = ..., delete: bool = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class ActorFailure(_message.Message):
    __slots__ = ("type", "message", "details", "kind")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    details: str
    kind: FailureKind
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., details: _Optional[str] = ..., kind: _Optional[_Union[FailureKind, str]] = ...) -> None: ...

class CallChain(_message.Message):
    __slots__ = ("id", "actors", "token")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    id: str
    actors: _containers.RepeatedCompositeFieldContainer[ActorRef]
    token: bytes
    def __init__(self, id: _Optional[str] = ..., actors: _Optional[_Iterable[_Union[ActorRef, _Mapping]]] = ..., token: _Optional[bytes] = ...) -> None: ...
