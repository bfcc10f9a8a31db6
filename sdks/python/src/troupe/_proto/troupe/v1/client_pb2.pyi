from troupe._proto.troupe.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MissedFirings(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISSED_FIRINGS_UNSPECIFIED: _ClassVar[MissedFirings]
    MISSED_FIRINGS_FIRE_ONCE: _ClassVar[MissedFirings]
    MISSED_FIRINGS_SKIP: _ClassVar[MissedFirings]
MISSED_FIRINGS_UNSPECIFIED: MissedFirings
MISSED_FIRINGS_FIRE_ONCE: MissedFirings
MISSED_FIRINGS_SKIP: MissedFirings

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff_ms", "max_backoff_ms")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff_ms: int
    max_backoff_ms: int
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff_ms: _Optional[int] = ..., max_backoff_ms: _Optional[int] = ...) -> None: ...

class SetReminderRequest(_message.Message):
    __slots__ = ("actor", "name", "due", "period", "repeat", "until", "payload", "retry", "missed", "cron", "time_zone", "jitter")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    name: str
    due: str
    period: str
    repeat: int
    until: str
    payload: _common_pb2.Payload
    retry: RetryPolicy
    missed: MissedFirings
    cron: str
    time_zone: str
    jitter: str
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ..., due: _Optional[str] = ..., period: _Optional[str] = ..., repeat: _Optional[int] = ..., until: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., missed: _Optional[_Union[MissedFirings, str]] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., jitter: _Optional[str] = ...) -> None: ...

class Reminder(_message.Message):
    __slots__ = ("actor", "name", "next_due_unix_ms", "period_ms", "remaining", "until_unix_ms", "payload", "retry", "missed", "attempts", "fired", "alarm", "cron", "time_zone", "jitter_ms", "jitter_delay_ms", "paused", "tell_method")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    ALARM_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    JITTER_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    TELL_METHOD_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    name: str
    next_due_unix_ms: int
    period_ms: int
    remaining: int
    until_unix_ms: int
    payload: _common_pb2.Payload
    retry: RetryPolicy
    missed: MissedFirings
    attempts: int
    fired: int
    alarm: bool
    cron: str
    time_zone: str
    jitter_ms: int
    jitter_delay_ms: int
    paused: bool
    tell_method: str
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ..., next_due_unix_ms: _Optional[int] = ..., period_ms: _Optional[int] = ..., remaining: _Optional[int] = ..., until_unix_ms: _Optional[int] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., missed: _Optional[_Union[MissedFirings, str]] = ..., attempts: _Optional[int] = ..., fired: _Optional[int] = ..., alarm: bool = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., jitter_ms: _Optional[int] = ..., jitter_delay_ms: _Optional[int] = ..., paused: bool = ..., tell_method: _Optional[str] = ...) -> None: ...

class ReminderRef(_message.Message):
    __slots__ = ("actor", "name")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    name: str
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class AlarmRef(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: bool = ...) -> None: ...

class ListRemindersRequest(_message.Message):
    __slots__ = ("type", "id", "page_size", "page_token")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    page_size: int
    page_token: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRemindersResponse(_message.Message):
    __slots__ = ("reminders", "next_page_token")
    REMINDERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    reminders: _containers.RepeatedCompositeFieldContainer[Reminder]
    next_page_token: str
    def __init__(self, reminders: _Optional[_Iterable[_Union[Reminder, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SetAlarmRequest(_message.Message):
    __slots__ = ("actor", "at", "payload", "retry")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    at: str
    payload: _common_pb2.Payload
    retry: RetryPolicy
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., at: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ...) -> None: ...

class SetTimerRequest(_message.Message):
    __slots__ = ("actor", "name", "due", "period", "payload", "keep_alive")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    name: str
    due: str
    period: str
    payload: _common_pb2.Payload
    keep_alive: bool
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ..., due: _Optional[str] = ..., period: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., keep_alive: bool = ...) -> None: ...

class SetTimerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TimerRef(_message.Message):
    __slots__ = ("actor", "name")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    name: str
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class InvokeRequest(_message.Message):
    __slots__ = ("actor", "method", "payload", "metadata", "chain", "idempotency_key", "new_key", "key_retention_ms")
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
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NEW_KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    method: str
    payload: _common_pb2.Payload
    metadata: _containers.ScalarMap[str, str]
    chain: _common_pb2.CallChain
    idempotency_key: str
    new_key: bool
    key_retention_ms: int
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chain: _Optional[_Union[_common_pb2.CallChain, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., new_key: bool = ..., key_retention_ms: _Optional[int] = ...) -> None: ...

class InvokeResponse(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: _common_pb2.Payload
    def __init__(self, payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ...) -> None: ...

class TellRequest(_message.Message):
    __slots__ = ("actor", "method", "payload", "metadata", "chain", "delivery", "idempotency_key", "new_key", "key_retention_ms", "delay_ms", "deliver_at")
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
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    NEW_KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    method: str
    payload: _common_pb2.Payload
    metadata: _containers.ScalarMap[str, str]
    chain: _common_pb2.CallChain
    delivery: _common_pb2.Delivery
    idempotency_key: str
    new_key: bool
    key_retention_ms: int
    delay_ms: int
    deliver_at: str
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., chain: _Optional[_Union[_common_pb2.CallChain, _Mapping]] = ..., delivery: _Optional[_Union[_common_pb2.Delivery, str]] = ..., idempotency_key: _Optional[str] = ..., new_key: bool = ..., key_retention_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ..., deliver_at: _Optional[str] = ...) -> None: ...

class TellResponse(_message.Message):
    __slots__ = ("reminder", "due_unix_ms")
    REMINDER_FIELD_NUMBER: _ClassVar[int]
    DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    reminder: str
    due_unix_ms: int
    def __init__(self, reminder: _Optional[str] = ..., due_unix_ms: _Optional[int] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("actor", "keys")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("actor", "after")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    after: str
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., after: _Optional[str] = ...) -> None: ...

class WatchTypeRequest(_message.Message):
    __slots__ = ("type", "after", "id_prefix")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    type: str
    after: str
    id_prefix: str
    def __init__(self, type: _Optional[str] = ..., after: _Optional[str] = ..., id_prefix: _Optional[str] = ...) -> None: ...

class ActorEvent(_message.Message):
    __slots__ = ("payload", "cursor", "missed_before", "published_unix_ms", "actor", "traceparent", "tracestate")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MISSED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    payload: _common_pb2.Payload
    cursor: str
    missed_before: bool
    published_unix_ms: int
    actor: _common_pb2.ActorRef
    traceparent: str
    tracestate: str
    def __init__(self, payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., cursor: _Optional[str] = ..., missed_before: bool = ..., published_unix_ms: _Optional[int] = ..., actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...

class GetStateResponse(_message.Message):
    __slots__ = ("entries", "active", "expires_unix_ms")
    class EntriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class ExpiresUnixMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.ScalarMap[str, bytes]
    active: bool
    expires_unix_ms: _containers.ScalarMap[str, int]
    def __init__(self, entries: _Optional[_Mapping[str, bytes]] = ..., active: bool = ..., expires_unix_ms: _Optional[_Mapping[str, int]] = ...) -> None: ...
