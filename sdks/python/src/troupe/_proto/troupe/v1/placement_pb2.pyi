from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Member(_message.Message):
    __slots__ = ("node", "address", "types", "leaving")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    types: _containers.RepeatedScalarFieldContainer[str]
    leaving: bool
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., types: _Optional[_Iterable[str]] = ..., leaving: bool = ...) -> None: ...

class TableVersion(_message.Message):
    __slots__ = ("version", "members")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    version: int
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, version: _Optional[int] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class PlacementTable(_message.Message):
    __slots__ = ("current", "next", "waiting_for")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    current: TableVersion
    next: TableVersion
    waiting_for: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, current: _Optional[_Union[TableVersion, _Mapping]] = ..., next: _Optional[_Union[TableVersion, _Mapping]] = ..., waiting_for: _Optional[_Iterable[str]] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("node", "address", "types")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., types: _Optional[_Iterable[str]] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("lease_ms", "heartbeat_interval_ms", "table")
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    lease_ms: int
    heartbeat_interval_ms: int
    table: PlacementTable
    def __init__(self, lease_ms: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., table: _Optional[_Union[PlacementTable, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node", "drained_version", "known_current", "known_next", "types")
    NODE_FIELD_NUMBER: _ClassVar[int]
    DRAINED_VERSION_FIELD_NUMBER: _ClassVar[int]
    KNOWN_CURRENT_FIELD_NUMBER: _ClassVar[int]
    KNOWN_NEXT_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    node: str
    drained_version: int
    known_current: int
    known_next: int
    types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., drained_version: _Optional[int] = ..., known_current: _Optional[int] = ..., known_next: _Optional[int] = ..., types: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("lease_ms", "table")
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    lease_ms: int
    table: PlacementTable
    def __init__(self, lease_ms: _Optional[int] = ..., table: _Optional[_Union[PlacementTable, _Mapping]] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: str
    def __init__(self, node: _Optional[str] = ...) -> None: ...

class LeaveResponse(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: PlacementTable
    def __init__(self, table: _Optional[_Union[PlacementTable, _Mapping]] = ...) -> None: ...

class GetTableRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("leader", "leader_address", "replicas", "table", "last_heartbeat_ms_ago")
    class LastHeartbeatMsAgoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    leader: str
    leader_address: str
    replicas: _containers.RepeatedCompositeFieldContainer[Replica]
    table: PlacementTable
    last_heartbeat_ms_ago: _containers.ScalarMap[str, int]
    def __init__(self, leader: _Optional[str] = ..., leader_address: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[Replica, _Mapping]]] = ..., table: _Optional[_Union[PlacementTable, _Mapping]] = ..., last_heartbeat_ms_ago: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Replica(_message.Message):
    __slots__ = ("id", "address", "leader", "last_log_index", "voter", "learner")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    leader: bool
    last_log_index: int
    voter: bool
    learner: bool
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., leader: bool = ..., last_log_index: _Optional[int] = ..., voter: bool = ..., learner: bool = ...) -> None: ...

class RaftMessage(_message.Message):
    __slots__ = ("kind", "json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    json: bytes
    def __init__(self, kind: _Optional[str] = ..., json: _Optional[bytes] = ...) -> None: ...
