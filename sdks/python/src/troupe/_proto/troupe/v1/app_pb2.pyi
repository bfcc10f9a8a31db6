from troupe._proto.troupe.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppMessage(_message.Message):
    __slots__ = ("register", "activated", "turn_result", "deactivated", "batch", "part")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    ACTIVATED_FIELD_NUMBER: _ClassVar[int]
    TURN_RESULT_FIELD_NUMBER: _ClassVar[int]
    DEACTIVATED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    register: Register
    activated: ActivateResult
    turn_result: TurnResult
    deactivated: DeactivateResult
    batch: AppBatch
    part: MessagePart
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., activated: _Optional[_Union[ActivateResult, _Mapping]] = ..., turn_result: _Optional[_Union[TurnResult, _Mapping]] = ..., deactivated: _Optional[_Union[DeactivateResult, _Mapping]] = ..., batch: _Optional[_Union[AppBatch, _Mapping]] = ..., part: _Optional[_Union[MessagePart, _Mapping]] = ...) -> None: ...

class AppBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[AppMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[AppMessage, _Mapping]]] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("app_name", "types", "sdk", "accepts_batches", "max_receive_bytes", "api_version", "accepts_parts", "accepts_cancel")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_BATCHES_FIELD_NUMBER: _ClassVar[int]
    MAX_RECEIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_PARTS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_CANCEL_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    types: _containers.RepeatedCompositeFieldContainer[ActorTypeSpec]
    sdk: str
    accepts_batches: bool
    max_receive_bytes: int
    api_version: int
    accepts_parts: bool
    accepts_cancel: bool
    def __init__(self, app_name: _Optional[str] = ..., types: _Optional[_Iterable[_Union[ActorTypeSpec, _Mapping]]] = ..., sdk: _Optional[str] = ..., accepts_batches: bool = ..., max_receive_bytes: _Optional[int] = ..., api_version: _Optional[int] = ..., accepts_parts: bool = ..., accepts_cancel: bool = ...) -> None: ...

class ActorTypeSpec(_message.Message):
    __slots__ = ("name", "idle_timeout_ms", "max_mailbox", "reentrant", "state_mode", "readonly_methods", "turn_timeout_ms", "max_pending_calls", "durable_tells", "retention_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MAILBOX_FIELD_NUMBER: _ClassVar[int]
    REENTRANT_FIELD_NUMBER: _ClassVar[int]
    STATE_MODE_FIELD_NUMBER: _ClassVar[int]
    READONLY_METHODS_FIELD_NUMBER: _ClassVar[int]
    TURN_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    DURABLE_TELLS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    idle_timeout_ms: int
    max_mailbox: int
    reentrant: bool
    state_mode: _common_pb2.StateMode
    readonly_methods: _containers.RepeatedScalarFieldContainer[str]
    turn_timeout_ms: int
    max_pending_calls: int
    durable_tells: bool
    retention_ms: int
    def __init__(self, name: _Optional[str] = ..., idle_timeout_ms: _Optional[int] = ..., max_mailbox: _Optional[int] = ..., reentrant: bool = ..., state_mode: _Optional[_Union[_common_pb2.StateMode, str]] = ..., readonly_methods: _Optional[_Iterable[str]] = ..., turn_timeout_ms: _Optional[int] = ..., max_pending_calls: _Optional[int] = ..., durable_tells: bool = ..., retention_ms: _Optional[int] = ...) -> None: ...

class ActivateResult(_message.Message):
    __slots__ = ("call_id", "error", "changes", "lease_expired")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    error: _common_pb2.ActorFailure
    changes: _containers.RepeatedCompositeFieldContainer[_common_pb2.StateChange]
    lease_expired: bool
    def __init__(self, call_id: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ActorFailure, _Mapping]] = ..., changes: _Optional[_Iterable[_Union[_common_pb2.StateChange, _Mapping]]] = ..., lease_expired: bool = ...) -> None: ...

class TurnResult(_message.Message):
    __slots__ = ("call_id", "reply", "error", "changes", "lease_expired", "events")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    reply: _common_pb2.Payload
    error: _common_pb2.ActorFailure
    changes: _containers.RepeatedCompositeFieldContainer[_common_pb2.StateChange]
    lease_expired: bool
    events: _containers.RepeatedCompositeFieldContainer[_common_pb2.Payload]
    def __init__(self, call_id: _Optional[int] = ..., reply: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.ActorFailure, _Mapping]] = ..., changes: _Optional[_Iterable[_Union[_common_pb2.StateChange, _Mapping]]] = ..., lease_expired: bool = ..., events: _Optional[_Iterable[_Union[_common_pb2.Payload, _Mapping]]] = ...) -> None: ...

class DeactivateResult(_message.Message):
    __slots__ = ("call_id", "changes")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    changes: _containers.RepeatedCompositeFieldContainer[_common_pb2.StateChange]
    def __init__(self, call_id: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[_common_pb2.StateChange, _Mapping]]] = ...) -> None: ...

class DaemonMessage(_message.Message):
    __slots__ = ("registered", "activate", "turn", "deactivate", "batch", "part", "cancel")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    DEACTIVATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    activate: Activate
    turn: Turn
    deactivate: Deactivate
    batch: DaemonBatch
    part: MessagePart
    cancel: CancelTurn
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., activate: _Optional[_Union[Activate, _Mapping]] = ..., turn: _Optional[_Union[Turn, _Mapping]] = ..., deactivate: _Optional[_Union[Deactivate, _Mapping]] = ..., batch: _Optional[_Union[DaemonBatch, _Mapping]] = ..., part: _Optional[_Union[MessagePart, _Mapping]] = ..., cancel: _Optional[_Union[CancelTurn, _Mapping]] = ...) -> None: ...

class CancelTurn(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    def __init__(self, call_id: _Optional[int] = ...) -> None: ...

class MessagePart(_message.Message):
    __slots__ = ("data", "last", "whole_bytes")
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    WHOLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    last: bool
    whole_bytes: int
    def __init__(self, data: _Optional[bytes] = ..., last: bool = ..., whole_bytes: _Optional[int] = ...) -> None: ...

class DaemonBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[DaemonMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[DaemonMessage, _Mapping]]] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("types", "daemon_version", "accepts_batches", "api_version", "accepts_parts")
    TYPES_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_BATCHES_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_PARTS_FIELD_NUMBER: _ClassVar[int]
    types: _containers.RepeatedCompositeFieldContainer[ActorTypeSpec]
    daemon_version: str
    accepts_batches: bool
    api_version: int
    accepts_parts: bool
    def __init__(self, types: _Optional[_Iterable[_Union[ActorTypeSpec, _Mapping]]] = ..., daemon_version: _Optional[str] = ..., accepts_batches: bool = ..., api_version: _Optional[int] = ..., accepts_parts: bool = ...) -> None: ...

class Activate(_message.Message):
    __slots__ = ("call_id", "actor", "state", "lease_deadline_unix_ms")
    class StateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    actor: _common_pb2.ActorRef
    state: _containers.ScalarMap[str, bytes]
    lease_deadline_unix_ms: int
    def __init__(self, call_id: _Optional[int] = ..., actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., state: _Optional[_Mapping[str, bytes]] = ..., lease_deadline_unix_ms: _Optional[int] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ("call_id", "actor", "kind", "name", "payload", "metadata", "chain", "traceparent", "tracestate", "deadline_unix_ms", "lease_deadline_unix_ms", "expired_keys", "unanswered")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_KEYS_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    actor: _common_pb2.ActorRef
    kind: _common_pb2.TurnKind
    name: str
    payload: _common_pb2.Payload
    metadata: _containers.ScalarMap[str, str]
    chain: _common_pb2.CallChain
    traceparent: str
    tracestate: str
    deadline_unix_ms: int
    lease_deadline_unix_ms: int
    expired_keys: _containers.RepeatedScalarFieldContainer[str]
    unanswered: bool
    def __init__(self, call_id: _Optional[int] = ..., actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., kind: _Optional[_Union[_common_pb2.TurnKind, str]] = ..., name: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chain: _Optional[_Union[_common_pb2.CallChain, _Mapping]] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ..., deadline_unix_ms: _Optional[int] = ..., lease_deadline_unix_ms: _Optional[int] = ..., expired_keys: _Optional[_Iterable[str]] = ..., unanswered: bool = ...) -> None: ...

class Deactivate(_message.Message):
    __slots__ = ("call_id", "actor", "reason")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REASON_UNSPECIFIED: _ClassVar[Deactivate.Reason]
        REASON_IDLE: _ClassVar[Deactivate.Reason]
        REASON_SHUTDOWN: _ClassVar[Deactivate.Reason]
        REASON_ADMIN: _ClassVar[Deactivate.Reason]
        REASON_MIGRATION: _ClassVar[Deactivate.Reason]
        REASON_TURN_TIMEOUT: _ClassVar[Deactivate.Reason]
    REASON_UNSPECIFIED: Deactivate.Reason
    REASON_IDLE: Deactivate.Reason
    REASON_SHUTDOWN: Deactivate.Reason
    REASON_ADMIN: Deactivate.Reason
    REASON_MIGRATION: Deactivate.Reason
    REASON_TURN_TIMEOUT: Deactivate.Reason
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    actor: _common_pb2.ActorRef
    reason: Deactivate.Reason
    def __init__(self, call_id: _Optional[int] = ..., actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., reason: _Optional[_Union[Deactivate.Reason, str]] = ...) -> None: ...
