//! What the session hands JS: [`NativeEvent`]s, queued as [`Pending`] on
//! the runtime thread (messages of one generation appended to one
//! `DaemonBatch`) until JS takes them.

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use troupe_sdk_core::proto::DaemonMessage;
use troupe_sdk_core::reconnect::Outage;
use troupe_sdk_core::CallError;

use crate::NativeStatus;

/// `DaemonBatch.messages` is field 1: each message is appended as that field,
/// so the queued bytes are always a whole `DaemonBatch`.
const BATCH_FIELD: u32 = 1;

/// One thing that happened. `kind` says which fields are set:
/// - `"registered"`: `generation`, `data` (the serialized `Registered`);
/// - `"messages"`: `generation`, `data` (a serialized `DaemonBatch`);
/// - `"lost"`: `outage` (`"closed"`, `"ended"`, `"refused"`, `"failed"`),
///   `status` (code 0 for `"closed"`, 2 with the description for
///   `"failed"`), `first` (the first outage since the app was last
///   registered);
/// - `"ended"` (last): `why` (`"stopped"`, `"refused"`, `"credentials"`,
///   `"connect"`) and `status` for all but `"stopped"`.
#[napi(object)]
#[allow(missing_debug_implementations)]
pub struct NativeEvent {
    pub kind: String,
    pub generation: Option<i64>,
    pub data: Option<Buffer>,
    pub outage: Option<String>,
    pub first: Option<bool>,
    pub why: Option<String>,
    pub status: Option<NativeStatus>,
}

#[derive(Debug)]
pub(super) enum Pending {
    Registered(u64, Vec<u8>),
    Messages(u64, Vec<u8>),
    Lost(&'static str, CallError, bool),
    Ended(&'static str, Option<CallError>),
}

impl Pending {
    pub(super) fn into_event(self) -> NativeEvent {
        let mut event = NativeEvent {
            kind: String::new(),
            generation: None,
            data: None,
            outage: None,
            first: None,
            why: None,
            status: None,
        };
        let generation = |g: u64| Some(i64::try_from(g).unwrap_or(i64::MAX));
        match self {
            Self::Registered(g, bytes) => {
                event.kind = "registered".into();
                event.generation = generation(g);
                event.data = Some(bytes.into());
            }
            Self::Messages(g, bytes) => {
                event.kind = "messages".into();
                event.generation = generation(g);
                event.data = Some(bytes.into());
            }
            Self::Lost(outage, status, first) => {
                event.kind = "lost".into();
                event.outage = Some(outage.into());
                event.status = Some(status.into());
                event.first = Some(first);
            }
            Self::Ended(why, status) => {
                event.kind = "ended".into();
                event.why = Some(why.into());
                event.status = status.map(NativeStatus::from);
            }
        }
        event
    }
}

pub(super) fn lost(outage: Outage, first: bool) -> Pending {
    match outage {
        Outage::Closed => Pending::Lost("closed", CallError::new(tonic::Code::Ok, ""), first),
        Outage::Ended(e) => Pending::Lost("ended", e, first),
        Outage::Refused(e) => Pending::Lost("refused", e, first),
        Outage::Failed(m) => {
            Pending::Lost("failed", CallError::new(tonic::Code::Unknown, m), first)
        }
    }
}

/// The messages join the last entry when it holds this generation's.
pub(super) fn append(queue: &mut Vec<Pending>, generation: u64, msgs: Vec<DaemonMessage>) {
    let bytes = match queue.last_mut() {
        Some(Pending::Messages(g, bytes)) if *g == generation => bytes,
        _ => {
            queue.push(Pending::Messages(generation, Vec::new()));
            match queue.last_mut() {
                Some(Pending::Messages(_, bytes)) => bytes,
                _ => return,
            }
        }
    };
    for msg in msgs {
        prost::encoding::message::encode(BATCH_FIELD, &msg, bytes);
    }
}
