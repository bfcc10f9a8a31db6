from troupe._proto.troupe.v1 import client_pb2 as _client_pb2
from troupe._proto.troupe.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LinkFrame(_message.Message):
    __slots__ = ("hello", "messages", "chunks", "refused")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    hello: LinkHello
    messages: _containers.RepeatedCompositeFieldContainer[LinkMessage]
    chunks: _containers.RepeatedCompositeFieldContainer[LinkChunk]
    refused: LinkStatus
    def __init__(self, hello: _Optional[_Union[LinkHello, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[LinkMessage, _Mapping]]] = ..., chunks: _Optional[_Iterable[_Union[LinkChunk, _Mapping]]] = ..., refused: _Optional[_Union[LinkStatus, _Mapping]] = ...) -> None: ...

class LinkHello(_message.Message):
    __slots__ = ("node", "channel", "authorization")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    node: str
    channel: str
    authorization: str
    def __init__(self, node: _Optional[str] = ..., channel: _Optional[str] = ..., authorization: _Optional[str] = ...) -> None: ...

class LinkChunk(_message.Message):
    __slots__ = ("id", "data", "last")
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    id: int
    data: bytes
    last: bool
    def __init__(self, id: _Optional[int] = ..., data: _Optional[bytes] = ..., last: bool = ...) -> None: ...

class LinkMessage(_message.Message):
    __slots__ = ("id", "request", "reply", "ping", "pong", "cancel")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    id: int
    request: LinkRequest
    reply: LinkReply
    ping: LinkPing
    pong: LinkPing
    cancel: LinkCancel
    def __init__(self, id: _Optional[int] = ..., request: _Optional[_Union[LinkRequest, _Mapping]] = ..., reply: _Optional[_Union[LinkReply, _Mapping]] = ..., ping: _Optional[_Union[LinkPing, _Mapping]] = ..., pong: _Optional[_Union[LinkPing, _Mapping]] = ..., cancel: _Optional[_Union[LinkCancel, _Mapping]] = ...) -> None: ...

class LinkPing(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LinkCancel(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LinkRequest(_message.Message):
    __slots__ = ("hops", "timeout_ms", "traceparent", "tracestate", "invoke", "tell", "get_state", "set_reminder", "get_reminder", "delete_reminder", "set_alarm", "get_alarm", "delete_alarm", "set_timer", "delete_timer", "pause_reminder", "resume_reminder", "poll_events", "poll_type_events")
    HOPS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    INVOKE_FIELD_NUMBER: _ClassVar[int]
    TELL_FIELD_NUMBER: _ClassVar[int]
    GET_STATE_FIELD_NUMBER: _ClassVar[int]
    SET_REMINDER_FIELD_NUMBER: _ClassVar[int]
    GET_REMINDER_FIELD_NUMBER: _ClassVar[int]
    DELETE_REMINDER_FIELD_NUMBER: _ClassVar[int]
    SET_ALARM_FIELD_NUMBER: _ClassVar[int]
    GET_ALARM_FIELD_NUMBER: _ClassVar[int]
    DELETE_ALARM_FIELD_NUMBER: _ClassVar[int]
    SET_TIMER_FIELD_NUMBER: _ClassVar[int]
    DELETE_TIMER_FIELD_NUMBER: _ClassVar[int]
    PAUSE_REMINDER_FIELD_NUMBER: _ClassVar[int]
    RESUME_REMINDER_FIELD_NUMBER: _ClassVar[int]
    POLL_EVENTS_FIELD_NUMBER: _ClassVar[int]
    POLL_TYPE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    hops: int
    timeout_ms: int
    traceparent: str
    tracestate: str
    invoke: _client_pb2.InvokeRequest
    tell: _client_pb2.TellRequest
    get_state: _client_pb2.GetStateRequest
    set_reminder: _client_pb2.SetReminderRequest
    get_reminder: _client_pb2.ReminderRef
    delete_reminder: _client_pb2.ReminderRef
    set_alarm: _client_pb2.SetAlarmRequest
    get_alarm: _client_pb2.AlarmRef
    delete_alarm: _client_pb2.AlarmRef
    set_timer: _client_pb2.SetTimerRequest
    delete_timer: _client_pb2.TimerRef
    pause_reminder: _client_pb2.ReminderRef
    resume_reminder: _client_pb2.ReminderRef
    poll_events: PollEvents
    poll_type_events: PollTypeEvents
    def __init__(self, hops: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ..., invoke: _Optional[_Union[_client_pb2.InvokeRequest, _Mapping]] = ..., tell: _Optional[_Union[_client_pb2.TellRequest, _Mapping]] = ..., get_state: _Optional[_Union[_client_pb2.GetStateRequest, _Mapping]] = ..., set_reminder: _Optional[_Union[_client_pb2.SetReminderRequest, _Mapping]] = ..., get_reminder: _Optional[_Union[_client_pb2.ReminderRef, _Mapping]] = ..., delete_reminder: _Optional[_Union[_client_pb2.ReminderRef, _Mapping]] = ..., set_alarm: _Optional[_Union[_client_pb2.SetAlarmRequest, _Mapping]] = ..., get_alarm: _Optional[_Union[_client_pb2.AlarmRef, _Mapping]] = ..., delete_alarm: _Optional[_Union[_client_pb2.AlarmRef, _Mapping]] = ..., set_timer: _Optional[_Union[_client_pb2.SetTimerRequest, _Mapping]] = ..., delete_timer: _Optional[_Union[_client_pb2.TimerRef, _Mapping]] = ..., pause_reminder: _Optional[_Union[_client_pb2.ReminderRef, _Mapping]] = ..., resume_reminder: _Optional[_Union[_client_pb2.ReminderRef, _Mapping]] = ..., poll_events: _Optional[_Union[PollEvents, _Mapping]] = ..., poll_type_events: _Optional[_Union[PollTypeEvents, _Mapping]] = ...) -> None: ...

class LinkReply(_message.Message):
    __slots__ = ("invoke", "tell", "state", "reminder", "deleted", "timer", "events", "error")
    INVOKE_FIELD_NUMBER: _ClassVar[int]
    TELL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REMINDER_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    TIMER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    invoke: _client_pb2.InvokeResponse
    tell: _client_pb2.TellResponse
    state: _client_pb2.GetStateResponse
    reminder: _client_pb2.Reminder
    deleted: _client_pb2.DeleteResponse
    timer: _client_pb2.SetTimerResponse
    events: PolledEvents
    error: LinkStatus
    def __init__(self, invoke: _Optional[_Union[_client_pb2.InvokeResponse, _Mapping]] = ..., tell: _Optional[_Union[_client_pb2.TellResponse, _Mapping]] = ..., state: _Optional[_Union[_client_pb2.GetStateResponse, _Mapping]] = ..., reminder: _Optional[_Union[_client_pb2.Reminder, _Mapping]] = ..., deleted: _Optional[_Union[_client_pb2.DeleteResponse, _Mapping]] = ..., timer: _Optional[_Union[_client_pb2.SetTimerResponse, _Mapping]] = ..., events: _Optional[_Union[PolledEvents, _Mapping]] = ..., error: _Optional[_Union[LinkStatus, _Mapping]] = ...) -> None: ...

class LinkStatus(_message.Message):
    __slots__ = ("code", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PollEvents(_message.Message):
    __slots__ = ("actor", "after", "wait_ms")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    after: str
    wait_ms: int
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., after: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class PollTypeEvents(_message.Message):
    __slots__ = ("type", "after", "wait_ms", "id_prefix", "new_host")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    NEW_HOST_FIELD_NUMBER: _ClassVar[int]
    type: str
    after: _containers.RepeatedScalarFieldContainer[str]
    wait_ms: int
    id_prefix: str
    new_host: bool
    def __init__(self, type: _Optional[str] = ..., after: _Optional[_Iterable[str]] = ..., wait_ms: _Optional[int] = ..., id_prefix: _Optional[str] = ..., new_host: bool = ...) -> None: ...

class PolledEvents(_message.Message):
    __slots__ = ("events", "cursor", "missed", "new_host_checked")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    NEW_HOST_CHECKED_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_client_pb2.ActorEvent]
    cursor: str
    missed: bool
    new_host_checked: bool
    def __init__(self, events: _Optional[_Iterable[_Union[_client_pb2.ActorEvent, _Mapping]]] = ..., cursor: _Optional[str] = ..., missed: bool = ..., new_host_checked: bool = ...) -> None: ...
