from troupe._proto.troupe.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "uptime_ms", "types", "store", "active_actors", "dirty_actors")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ACTORS_FIELD_NUMBER: _ClassVar[int]
    DIRTY_ACTORS_FIELD_NUMBER: _ClassVar[int]
    version: str
    uptime_ms: int
    types: _containers.RepeatedCompositeFieldContainer[RegisteredType]
    store: str
    active_actors: int
    dirty_actors: int
    def __init__(self, version: _Optional[str] = ..., uptime_ms: _Optional[int] = ..., types: _Optional[_Iterable[_Union[RegisteredType, _Mapping]]] = ..., store: _Optional[str] = ..., active_actors: _Optional[int] = ..., dirty_actors: _Optional[int] = ...) -> None: ...

class RegisteredType(_message.Message):
    __slots__ = ("name", "apps", "active_actors")
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ACTORS_FIELD_NUMBER: _ClassVar[int]
    name: str
    apps: _containers.RepeatedScalarFieldContainer[str]
    active_actors: int
    def __init__(self, name: _Optional[str] = ..., apps: _Optional[_Iterable[str]] = ..., active_actors: _Optional[int] = ...) -> None: ...

class ListActorsRequest(_message.Message):
    __slots__ = ("type", "page_size", "page_token")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: str
    page_size: int
    page_token: str
    def __init__(self, type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListActorsResponse(_message.Message):
    __slots__ = ("actors", "next_page_token")
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[ActorInfo]
    next_page_token: str
    def __init__(self, actors: _Optional[_Iterable[_Union[ActorInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ActorInfo(_message.Message):
    __slots__ = ("actor", "mailbox_depth", "turns", "dirty", "idle_ms")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    DIRTY_FIELD_NUMBER: _ClassVar[int]
    IDLE_MS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    mailbox_depth: int
    turns: int
    dirty: bool
    idle_ms: int
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., mailbox_depth: _Optional[int] = ..., turns: _Optional[int] = ..., dirty: bool = ..., idle_ms: _Optional[int] = ...) -> None: ...
