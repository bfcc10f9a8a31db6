from troupe._proto.troupe.v1 import common_pb2 as _common_pb2
from troupe._proto.troupe.v1 import client_pb2 as _client_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActivationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTIVATION_STATUS_UNSPECIFIED: _ClassVar[ActivationStatus]
    ACTIVATION_STATUS_INACTIVE: _ClassVar[ActivationStatus]
    ACTIVATION_STATUS_ACTIVATING: _ClassVar[ActivationStatus]
    ACTIVATION_STATUS_IDLE: _ClassVar[ActivationStatus]
    ACTIVATION_STATUS_RUNNING: _ClassVar[ActivationStatus]
    ACTIVATION_STATUS_DEACTIVATING: _ClassVar[ActivationStatus]
ACTIVATION_STATUS_UNSPECIFIED: ActivationStatus
ACTIVATION_STATUS_INACTIVE: ActivationStatus
ACTIVATION_STATUS_ACTIVATING: ActivationStatus
ACTIVATION_STATUS_IDLE: ActivationStatus
ACTIVATION_STATUS_RUNNING: ActivationStatus
ACTIVATION_STATUS_DEACTIVATING: ActivationStatus

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "uptime_ms", "types", "store", "active_actors", "dirty_actors", "node", "listen", "flush", "pending_calls", "max_pending_calls", "reminders_fired", "started_unix_ms", "placement_version", "serving", "links", "delivery", "inbound_links", "memory", "store_bytes", "security", "reminders_paused", "events", "standalone")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ACTORS_FIELD_NUMBER: _ClassVar[int]
    DIRTY_ACTORS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LISTEN_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    REMINDERS_FIRED_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    INBOUND_LINKS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SECURITY_FIELD_NUMBER: _ClassVar[int]
    REMINDERS_PAUSED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STANDALONE_FIELD_NUMBER: _ClassVar[int]
    version: str
    uptime_ms: int
    types: _containers.RepeatedCompositeFieldContainer[RegisteredType]
    store: str
    active_actors: int
    dirty_actors: int
    node: str
    listen: str
    flush: FlushBacklog
    pending_calls: int
    max_pending_calls: int
    reminders_fired: int
    started_unix_ms: int
    placement_version: int
    serving: bool
    links: _containers.RepeatedCompositeFieldContainer[PeerLinkStatus]
    delivery: DeliveryStatus
    inbound_links: InboundLinks
    memory: MemoryBounds
    store_bytes: int
    security: SecurityStatus
    reminders_paused: int
    events: EventsStatus
    standalone: bool
    def __init__(self, version: _Optional[str] = ..., uptime_ms: _Optional[int] = ..., types: _Optional[_Iterable[_Union[RegisteredType, _Mapping]]] = ..., store: _Optional[str] = ..., active_actors: _Optional[int] = ..., dirty_actors: _Optional[int] = ..., node: _Optional[str] = ..., listen: _Optional[str] = ..., flush: _Optional[_Union[FlushBacklog, _Mapping]] = ..., pending_calls: _Optional[int] = ..., max_pending_calls: _Optional[int] = ..., reminders_fired: _Optional[int] = ..., started_unix_ms: _Optional[int] = ..., placement_version: _Optional[int] = ..., serving: bool = ..., links: _Optional[_Iterable[_Union[PeerLinkStatus, _Mapping]]] = ..., delivery: _Optional[_Union[DeliveryStatus, _Mapping]] = ..., inbound_links: _Optional[_Union[InboundLinks, _Mapping]] = ..., memory: _Optional[_Union[MemoryBounds, _Mapping]] = ..., store_bytes: _Optional[int] = ..., security: _Optional[_Union[SecurityStatus, _Mapping]] = ..., reminders_paused: _Optional[int] = ..., events: _Optional[_Union[EventsStatus, _Mapping]] = ..., standalone: bool = ...) -> None: ...

class EventsStatus(_message.Message):
    __slots__ = ("watched", "max_watched", "held_bytes", "max_held_bytes")
    WATCHED_FIELD_NUMBER: _ClassVar[int]
    MAX_WATCHED_FIELD_NUMBER: _ClassVar[int]
    HELD_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_HELD_BYTES_FIELD_NUMBER: _ClassVar[int]
    watched: int
    max_watched: int
    held_bytes: int
    max_held_bytes: int
    def __init__(self, watched: _Optional[int] = ..., max_watched: _Optional[int] = ..., held_bytes: _Optional[int] = ..., max_held_bytes: _Optional[int] = ...) -> None: ...

class SecurityStatus(_message.Message):
    __slots__ = ("api_tokens", "app_tokens", "read_tokens", "tls", "refused", "tokens")
    API_TOKENS_FIELD_NUMBER: _ClassVar[int]
    APP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    api_tokens: int
    app_tokens: int
    read_tokens: int
    tls: TlsStatus
    refused: _containers.RepeatedCompositeFieldContainer[AuthRefusals]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenUse]
    def __init__(self, api_tokens: _Optional[int] = ..., app_tokens: _Optional[int] = ..., read_tokens: _Optional[int] = ..., tls: _Optional[_Union[TlsStatus, _Mapping]] = ..., refused: _Optional[_Iterable[_Union[AuthRefusals, _Mapping]]] = ..., tokens: _Optional[_Iterable[_Union[TokenUse, _Mapping]]] = ...) -> None: ...

class TokenUse(_message.Message):
    __slots__ = ("credential", "source", "source_name", "position", "accepted", "last_accepted_unix_ms", "last_from", "short")
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCEPTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FROM_FIELD_NUMBER: _ClassVar[int]
    SHORT_FIELD_NUMBER: _ClassVar[int]
    credential: str
    source: str
    source_name: str
    position: int
    accepted: int
    last_accepted_unix_ms: int
    last_from: str
    short: bool
    def __init__(self, credential: _Optional[str] = ..., source: _Optional[str] = ..., source_name: _Optional[str] = ..., position: _Optional[int] = ..., accepted: _Optional[int] = ..., last_accepted_unix_ms: _Optional[int] = ..., last_from: _Optional[str] = ..., short: bool = ...) -> None: ...

class TlsStatus(_message.Message):
    __slots__ = ("client_certificates", "certificate_expires_unix_ms", "ca_expires_unix_ms")
    CLIENT_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CA_EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    client_certificates: str
    certificate_expires_unix_ms: int
    ca_expires_unix_ms: int
    def __init__(self, client_certificates: _Optional[str] = ..., certificate_expires_unix_ms: _Optional[int] = ..., ca_expires_unix_ms: _Optional[int] = ...) -> None: ...

class AuthRefusals(_message.Message):
    __slots__ = ("service", "reason", "count")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    service: str
    reason: str
    count: int
    def __init__(self, service: _Optional[str] = ..., reason: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class MemoryBounds(_message.Message):
    __slots__ = ("call_records_bytes", "call_records_limit_bytes", "call_records_shed", "max_activations", "capacity_deactivations", "resident_bytes", "memory_limit_bytes", "shed_percent", "shed_at_bytes", "resume_percent", "shedding", "shed_requests", "shed_episodes", "shed_deactivations")
    CALL_RECORDS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CALL_RECORDS_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CALL_RECORDS_SHED_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_DEACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHED_PERCENT_FIELD_NUMBER: _ClassVar[int]
    SHED_AT_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESUME_PERCENT_FIELD_NUMBER: _ClassVar[int]
    SHEDDING_FIELD_NUMBER: _ClassVar[int]
    SHED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SHED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    SHED_DEACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    call_records_bytes: int
    call_records_limit_bytes: int
    call_records_shed: int
    max_activations: int
    capacity_deactivations: int
    resident_bytes: int
    memory_limit_bytes: int
    shed_percent: int
    shed_at_bytes: int
    resume_percent: int
    shedding: bool
    shed_requests: int
    shed_episodes: int
    shed_deactivations: int
    def __init__(self, call_records_bytes: _Optional[int] = ..., call_records_limit_bytes: _Optional[int] = ..., call_records_shed: _Optional[int] = ..., max_activations: _Optional[int] = ..., capacity_deactivations: _Optional[int] = ..., resident_bytes: _Optional[int] = ..., memory_limit_bytes: _Optional[int] = ..., shed_percent: _Optional[int] = ..., shed_at_bytes: _Optional[int] = ..., resume_percent: _Optional[int] = ..., shedding: bool = ..., shed_requests: _Optional[int] = ..., shed_episodes: _Optional[int] = ..., shed_deactivations: _Optional[int] = ...) -> None: ...

class InboundLinks(_message.Message):
    __slots__ = ("streams", "let_go")
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    LET_GO_FIELD_NUMBER: _ClassVar[int]
    streams: int
    let_go: int
    def __init__(self, streams: _Optional[int] = ..., let_go: _Optional[int] = ...) -> None: ...

class DeliveryStatus(_message.Message):
    __slots__ = ("inbox_depth", "retrying", "stored", "delivered", "retries", "dead_lettered", "redriven", "dropped", "dead_letters", "dead_letters_at_least", "dead_letters_error")
    INBOX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    RETRYING_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_ERROR_FIELD_NUMBER: _ClassVar[int]
    inbox_depth: int
    retrying: int
    stored: int
    delivered: int
    retries: int
    dead_lettered: int
    redriven: int
    dropped: int
    dead_letters: int
    dead_letters_at_least: bool
    dead_letters_error: str
    def __init__(self, inbox_depth: _Optional[int] = ..., retrying: _Optional[int] = ..., stored: _Optional[int] = ..., delivered: _Optional[int] = ..., retries: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., redriven: _Optional[int] = ..., dropped: _Optional[int] = ..., dead_letters: _Optional[int] = ..., dead_letters_at_least: bool = ..., dead_letters_error: _Optional[str] = ...) -> None: ...

class PeerLinkStatus(_message.Message):
    __slots__ = ("peer", "channel", "connections", "connected", "bytes_sent", "bytes_received", "messages_sent", "messages_received", "queued_bytes", "in_flight", "reconnects", "rtt_us", "connected_grpc")
    PEER_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_SENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    QUEUED_BYTES_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    RECONNECTS_FIELD_NUMBER: _ClassVar[int]
    RTT_US_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_GRPC_FIELD_NUMBER: _ClassVar[int]
    peer: str
    channel: str
    connections: int
    connected: int
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    queued_bytes: int
    in_flight: int
    reconnects: int
    rtt_us: int
    connected_grpc: int
    def __init__(self, peer: _Optional[str] = ..., channel: _Optional[str] = ..., connections: _Optional[int] = ..., connected: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., bytes_received: _Optional[int] = ..., messages_sent: _Optional[int] = ..., messages_received: _Optional[int] = ..., queued_bytes: _Optional[int] = ..., in_flight: _Optional[int] = ..., reconnects: _Optional[int] = ..., rtt_us: _Optional[int] = ..., connected_grpc: _Optional[int] = ...) -> None: ...

class FlushBacklog(_message.Message):
    __slots__ = ("dirty_actors", "dirty_bytes", "held_replies", "batches", "keys_written", "last_flush_unix_ms", "failing", "last_error")
    DIRTY_ACTORS_FIELD_NUMBER: _ClassVar[int]
    DIRTY_BYTES_FIELD_NUMBER: _ClassVar[int]
    HELD_REPLIES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    KEYS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    LAST_FLUSH_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FAILING_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    dirty_actors: int
    dirty_bytes: int
    held_replies: int
    batches: int
    keys_written: int
    last_flush_unix_ms: int
    failing: bool
    last_error: str
    def __init__(self, dirty_actors: _Optional[int] = ..., dirty_bytes: _Optional[int] = ..., held_replies: _Optional[int] = ..., batches: _Optional[int] = ..., keys_written: _Optional[int] = ..., last_flush_unix_ms: _Optional[int] = ..., failing: bool = ..., last_error: _Optional[str] = ...) -> None: ...

class RegisteredType(_message.Message):
    __slots__ = ("name", "apps", "active_actors", "state_mode", "idle_timeout_ms", "max_mailbox", "reentrant", "retention_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_ACTORS_FIELD_NUMBER: _ClassVar[int]
    STATE_MODE_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MAILBOX_FIELD_NUMBER: _ClassVar[int]
    REENTRANT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    apps: _containers.RepeatedScalarFieldContainer[str]
    active_actors: int
    state_mode: _common_pb2.StateMode
    idle_timeout_ms: int
    max_mailbox: int
    reentrant: bool
    retention_ms: int
    def __init__(self, name: _Optional[str] = ..., apps: _Optional[_Iterable[str]] = ..., active_actors: _Optional[int] = ..., state_mode: _Optional[_Union[_common_pb2.StateMode, str]] = ..., idle_timeout_ms: _Optional[int] = ..., max_mailbox: _Optional[int] = ..., reentrant: bool = ..., retention_ms: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("actor", "mailbox_depth", "turns", "dirty", "idle_ms", "status")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    DIRTY_FIELD_NUMBER: _ClassVar[int]
    IDLE_MS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    mailbox_depth: int
    turns: int
    dirty: bool
    idle_ms: int
    status: ActivationStatus
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., mailbox_depth: _Optional[int] = ..., turns: _Optional[int] = ..., dirty: bool = ..., idle_ms: _Optional[int] = ..., status: _Optional[_Union[ActivationStatus, str]] = ...) -> None: ...

class DescribeActorRequest(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ...) -> None: ...

class DescribeActorResponse(_message.Message):
    __slots__ = ("actor", "node", "status", "app", "activated_unix_ms", "last_active_unix_ms", "mailbox_depth", "turns", "state", "dirty", "state_mode", "reminders", "alarm", "timers", "stored", "inbox_depth", "dead_letters", "inbox_retries")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    APP_FIELD_NUMBER: _ClassVar[int]
    ACTIVATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    MAILBOX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DIRTY_FIELD_NUMBER: _ClassVar[int]
    STATE_MODE_FIELD_NUMBER: _ClassVar[int]
    REMINDERS_FIELD_NUMBER: _ClassVar[int]
    ALARM_FIELD_NUMBER: _ClassVar[int]
    TIMERS_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    INBOX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    INBOX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    node: str
    status: ActivationStatus
    app: str
    activated_unix_ms: int
    last_active_unix_ms: int
    mailbox_depth: int
    turns: int
    state: _containers.RepeatedCompositeFieldContainer[StateEntry]
    dirty: bool
    state_mode: _common_pb2.StateMode
    reminders: _containers.RepeatedCompositeFieldContainer[_client_pb2.Reminder]
    alarm: _client_pb2.Reminder
    timers: _containers.RepeatedCompositeFieldContainer[TimerInfo]
    stored: bool
    inbox_depth: int
    dead_letters: int
    inbox_retries: _containers.RepeatedCompositeFieldContainer[InboxRetry]
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., node: _Optional[str] = ..., status: _Optional[_Union[ActivationStatus, str]] = ..., app: _Optional[str] = ..., activated_unix_ms: _Optional[int] = ..., last_active_unix_ms: _Optional[int] = ..., mailbox_depth: _Optional[int] = ..., turns: _Optional[int] = ..., state: _Optional[_Iterable[_Union[StateEntry, _Mapping]]] = ..., dirty: bool = ..., state_mode: _Optional[_Union[_common_pb2.StateMode, str]] = ..., reminders: _Optional[_Iterable[_Union[_client_pb2.Reminder, _Mapping]]] = ..., alarm: _Optional[_Union[_client_pb2.Reminder, _Mapping]] = ..., timers: _Optional[_Iterable[_Union[TimerInfo, _Mapping]]] = ..., stored: bool = ..., inbox_depth: _Optional[int] = ..., dead_letters: _Optional[int] = ..., inbox_retries: _Optional[_Iterable[_Union[InboxRetry, _Mapping]]] = ...) -> None: ...

class InboxRetry(_message.Message):
    __slots__ = ("seq", "attempts", "max_attempts", "next_attempt_unix_ms", "waiting", "last_error")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    attempts: int
    max_attempts: int
    next_attempt_unix_ms: int
    waiting: bool
    last_error: str
    def __init__(self, seq: _Optional[int] = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., next_attempt_unix_ms: _Optional[int] = ..., waiting: bool = ..., last_error: _Optional[str] = ...) -> None: ...

class StateEntry(_message.Message):
    __slots__ = ("key", "value", "dirty")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DIRTY_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    dirty: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., dirty: bool = ...) -> None: ...

class TimerInfo(_message.Message):
    __slots__ = ("name", "next_due_unix_ms", "period_ms", "keep_alive")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    next_due_unix_ms: int
    period_ms: int
    keep_alive: bool
    def __init__(self, name: _Optional[str] = ..., next_due_unix_ms: _Optional[int] = ..., period_ms: _Optional[int] = ..., keep_alive: bool = ...) -> None: ...

class ListStoredActorsRequest(_message.Message):
    __slots__ = ("type", "page_size", "page_token")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: str
    page_size: int
    page_token: str
    def __init__(self, type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListStoredActorsResponse(_message.Message):
    __slots__ = ("ids", "next_page_token")
    IDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    next_page_token: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeactivateActorRequest(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ...) -> None: ...

class DeactivateActorResponse(_message.Message):
    __slots__ = ("deactivated",)
    DEACTIVATED_FIELD_NUMBER: _ClassVar[int]
    deactivated: bool
    def __init__(self, deactivated: bool = ...) -> None: ...

class PurgeActorRequest(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ...) -> None: ...

class PurgeActorResponse(_message.Message):
    __slots__ = ("was_active", "state_keys", "inbox_entries", "dead_letters", "call_records", "reminders")
    WAS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    STATE_KEYS_FIELD_NUMBER: _ClassVar[int]
    INBOX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    CALL_RECORDS_FIELD_NUMBER: _ClassVar[int]
    REMINDERS_FIELD_NUMBER: _ClassVar[int]
    was_active: bool
    state_keys: int
    inbox_entries: int
    dead_letters: int
    call_records: int
    reminders: int
    def __init__(self, was_active: bool = ..., state_keys: _Optional[int] = ..., inbox_entries: _Optional[int] = ..., dead_letters: _Optional[int] = ..., call_records: _Optional[int] = ..., reminders: _Optional[int] = ...) -> None: ...

class EditActorStateRequest(_message.Message):
    __slots__ = ("actor", "changes", "expect")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    EXPECT_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    changes: _containers.RepeatedCompositeFieldContainer[_common_pb2.StateChange]
    expect: _containers.RepeatedCompositeFieldContainer[_common_pb2.StateChange]
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., changes: _Optional[_Iterable[_Union[_common_pb2.StateChange, _Mapping]]] = ..., expect: _Optional[_Iterable[_Union[_common_pb2.StateChange, _Mapping]]] = ...) -> None: ...

class EditActorStateResponse(_message.Message):
    __slots__ = ("was_active", "before")
    WAS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    was_active: bool
    before: _containers.RepeatedCompositeFieldContainer[_common_pb2.StateChange]
    def __init__(self, was_active: bool = ..., before: _Optional[_Iterable[_Union[_common_pb2.StateChange, _Mapping]]] = ...) -> None: ...

class AdvanceClockRequest(_message.Message):
    __slots__ = ("by",)
    BY_FIELD_NUMBER: _ClassVar[int]
    by: str
    def __init__(self, by: _Optional[str] = ...) -> None: ...

class AdvanceClockResponse(_message.Message):
    __slots__ = ("now_unix_ms", "reminders_fired", "alarms_fired", "timers_fired")
    NOW_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REMINDERS_FIRED_FIELD_NUMBER: _ClassVar[int]
    ALARMS_FIRED_FIELD_NUMBER: _ClassVar[int]
    TIMERS_FIRED_FIELD_NUMBER: _ClassVar[int]
    now_unix_ms: int
    reminders_fired: int
    alarms_fired: int
    timers_fired: int
    def __init__(self, now_unix_ms: _Optional[int] = ..., reminders_fired: _Optional[int] = ..., alarms_fired: _Optional[int] = ..., timers_fired: _Optional[int] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("type", "page_size", "page_token")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: str
    page_size: int
    page_token: str
    def __init__(self, type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeadLetterRef(_message.Message):
    __slots__ = ("actor", "seq")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    seq: int
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., seq: _Optional[int] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("actor", "seq", "method", "payload", "metadata", "error", "attempts", "failed_unix_ms")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorRef
    seq: int
    method: str
    payload: _common_pb2.Payload
    metadata: _containers.ScalarMap[str, str]
    error: str
    attempts: int
    failed_unix_ms: int
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorRef, _Mapping]] = ..., seq: _Optional[int] = ..., method: _Optional[str] = ..., payload: _Optional[_Union[_common_pb2.Payload, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., error: _Optional[str] = ..., attempts: _Optional[int] = ..., failed_unix_ms: _Optional[int] = ...) -> None: ...

class RedriveDeadLetterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropDeadLetterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ("data", "summary")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    summary: BackupSummary
    def __init__(self, data: _Optional[bytes] = ..., summary: _Optional[_Union[BackupSummary, _Mapping]] = ...) -> None: ...

class BackupSummary(_message.Message):
    __slots__ = ("store", "trees", "entries", "logged", "bytes", "writes_paused_ms")
    STORE_FIELD_NUMBER: _ClassVar[int]
    TREES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LOGGED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITES_PAUSED_MS_FIELD_NUMBER: _ClassVar[int]
    store: str
    trees: int
    entries: int
    logged: int
    bytes: int
    writes_paused_ms: int
    def __init__(self, store: _Optional[str] = ..., trees: _Optional[int] = ..., entries: _Optional[int] = ..., logged: _Optional[int] = ..., bytes: _Optional[int] = ..., writes_paused_ms: _Optional[int] = ...) -> None: ...
