//! A reminder as callers set and see it, and as the store keeps it: the
//! runtime's own encoding of period, repetitions, end, payload and retry
//! state (the store only orders records by due time).

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use troupe_storage::ReminderRecord;

use super::calendar::CronSchedule;
use crate::error::CallError;
use crate::input::{count, range, UserDuration, UserInstant};
use crate::types::{ActorId, ContentType, Payload};

/// The alarm is the reminder of this reserved name.
pub const ALARM_NAME: &str = "$alarm";

/// How a failed firing is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The daemon's own one-shot reminders (a delayed tell's storing, a
    /// retention mark, the expiry of idle actors' keys) fail only while the
    /// store, the owner or the actor's type is away: keep trying for about
    /// 16 hours before giving up.
    pub(crate) const DAEMON: RetryPolicy = RetryPolicy {
        max_attempts: 1_000,
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(60),
    };

    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Attempts one firing may take at most.
const MAX_ATTEMPTS: u64 = 1_000;

impl RetryPolicy {
    /// Checks a policy a user gave (fields named as the API names them).
    pub(crate) fn check(&self) -> Result<(), CallError> {
        count(
            "retry.max_attempts",
            u64::from(self.max_attempts),
            &(1..=MAX_ATTEMPTS),
        )?;
        UserDuration::new(
            "retry.initial_backoff",
            self.initial_backoff,
            &range::POSITIVE,
        )?;
        UserDuration::new("retry.max_backoff", self.max_backoff, &range::POSITIVE)?;
        Ok(())
    }
}

/// What to do with firings that came due while the daemon was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedFirings {
    #[default]
    FireOnce,
    Skip,
}

/// A reminder as a caller sets it.
#[derive(Debug, Clone)]
pub struct ReminderSpec {
    pub actor: ActorId,
    pub name: String,
    pub due_unix_ms: u64,
    pub period: Option<Duration>,
    /// Fires at the matches of a cron pattern instead of every `period`;
    /// the first firing is the first match at or after `due_unix_ms`.
    pub cron: Option<CronSchedule>,
    /// Fire a fixed delay of up to this after each scheduled time, chosen
    /// once per reminder (`jitter.rs`), so reminders set alike spread out.
    pub jitter: Option<Duration>,
    /// Bound on the number of firings.
    pub repeat: Option<u32>,
    pub until_unix_ms: Option<u64>,
    pub payload: Payload,
    pub retry: RetryPolicy,
    pub missed: MissedFirings,
}

/// The alarm as a caller sets it: one per actor, a reminder that fires once.
#[derive(Debug, Clone)]
pub struct AlarmSpec {
    pub actor: ActorId,
    pub at_unix_ms: u64,
    pub payload: Payload,
    pub retry: RetryPolicy,
}

impl ReminderSpec {
    /// A reminder that fires once, at `due_unix_ms`: the alarm, a delayed
    /// tell, a retention mark.
    pub fn once(
        actor: ActorId,
        name: String,
        due_unix_ms: u64,
        payload: Payload,
        retry: RetryPolicy,
    ) -> Self {
        Self {
            actor,
            name,
            due_unix_ms,
            period: None,
            cron: None,
            jitter: None,
            repeat: None,
            until_unix_ms: None,
            payload,
            retry,
            missed: MissedFirings::FireOnce,
        }
    }

    /// Checks the times and counts a user gave, so nothing computed from
    /// them later can overflow.
    pub(crate) fn check(&self) -> Result<(), CallError> {
        UserInstant::at("due", self.due_unix_ms)?;
        if let Some(period) = self.period {
            UserDuration::new("period", period, &range::POSITIVE)?;
            if self.cron.is_some() {
                return Err(CallError::InvalidArgument(format!(
                    "reminder {:?} has both a period and a cron schedule; give one: the period \
                     for a fixed interval, cron for calendar times",
                    self.name
                )));
            }
        }
        if let Some(jitter) = self.jitter {
            UserDuration::new("jitter", jitter, &range::POSITIVE)?;
        }
        if let Some(repeat) = self.repeat {
            count("repeat", u64::from(repeat), &(1..=u64::from(u32::MAX)))?;
        }
        if let Some(until) = self.until_unix_ms {
            UserInstant::at("until", until)?;
            if until < self.due_unix_ms {
                return Err(CallError::InvalidArgument(format!(
                    "reminder {:?} ends (until) before it is first due; move `until` after `due`",
                    self.name
                )));
            }
        }
        self.retry.check()
    }
}

impl AlarmSpec {
    pub(crate) fn check(&self) -> Result<(), CallError> {
        UserInstant::at("at", self.at_unix_ms)?;
        self.retry.check()
    }
}

/// A stored reminder as callers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderInfo {
    pub actor: ActorId,
    pub name: String,
    pub alarm: bool,
    /// When it fires next; while paused, when it was due (resuming it past
    /// that time applies its missed-firings rule).
    pub next_due_unix_ms: u64,
    /// Held by an operator: it does not fire until resumed.
    pub paused: bool,
    pub period: Option<Duration>,
    /// The calendar schedule, the zone by its canonical name ("UTC" when
    /// none was given).
    pub cron: Option<CronSchedule>,
    /// The jitter it was set with, and the delay after each scheduled time
    /// that it chose (already in `next_due_unix_ms`).
    pub jitter: Option<Duration>,
    pub jitter_delay: Duration,
    /// Firings left, when bounded.
    pub remaining: Option<u32>,
    pub until_unix_ms: Option<u64>,
    pub payload: Payload,
    pub retry: RetryPolicy,
    pub missed: MissedFirings,
    /// Failed attempts of the pending firing.
    pub attempts: u32,
    pub fired: u64,
    /// A delayed tell waiting to be delivered: the method it calls
    /// (`payload` is its argument).
    pub tell_method: Option<String>,
}

/// The runtime's part of a stored record (the store keeps it opaque).
///
/// JSON with one-letter names, leaving out what is zero or unset: ~35
/// bytes instead of ~170 with full names and every field. A million
/// reminders are that many sled records, and the bytes per record set how
/// many fit the page cache and how much each write rewrites. Records
/// written with the full names (before) still read: the aliases.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Meta {
    #[serde(
        default,
        rename = "p",
        alias = "period_ms",
        skip_serializing_if = "is_zero"
    )]
    pub(crate) period_ms: u64,
    #[serde(
        default,
        rename = "r",
        alias = "remaining",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) remaining: Option<u32>,
    #[serde(
        default,
        rename = "u",
        alias = "until_unix_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) until_unix_ms: Option<u64>,
    #[serde(
        default,
        rename = "b",
        alias = "bytes",
        skip_serializing_if = "is_false"
    )]
    pub(crate) bytes: bool,
    #[serde(rename = "m", alias = "max_attempts")]
    pub(crate) max_attempts: u32,
    #[serde(rename = "i", alias = "initial_backoff_ms")]
    pub(crate) initial_backoff_ms: u64,
    #[serde(rename = "x", alias = "max_backoff_ms")]
    pub(crate) max_backoff_ms: u64,
    #[serde(
        default,
        rename = "s",
        alias = "skip_missed",
        skip_serializing_if = "is_false"
    )]
    pub(crate) skip_missed: bool,
    #[serde(
        default,
        rename = "a",
        alias = "attempts",
        skip_serializing_if = "is_zero"
    )]
    pub(crate) attempts: u32,
    #[serde(
        default,
        rename = "f",
        alias = "fired",
        skip_serializing_if = "is_zero"
    )]
    pub(crate) fired: u64,
    /// A calendar schedule's pattern (then `period_ms` is 0).
    #[serde(default, rename = "c", skip_serializing_if = "Option::is_none")]
    pub(crate) cron: Option<String>,
    /// Its time zone; left out for UTC.
    #[serde(default, rename = "z", skip_serializing_if = "Option::is_none")]
    pub(crate) time_zone: Option<String>,
    /// The jitter it was set with, for callers to read back.
    #[serde(default, rename = "j", skip_serializing_if = "is_zero")]
    pub(crate) jitter_ms: u64,
    /// The delay jitter chose: each firing is due this long after its
    /// scheduled time. A period's firings keep it by stepping from the
    /// first; a calendar's add it to each match.
    #[serde(default, rename = "d", skip_serializing_if = "is_zero")]
    pub(crate) delay_ms: u64,
    /// Set while paused: when it was due (the record itself is due at
    /// `PAUSED_DUE` then), and is due again once resumed.
    #[serde(default, rename = "h", skip_serializing_if = "Option::is_none")]
    pub(crate) paused_due_ms: Option<u64>,
    /// Set on a delayed tell's reminder: the call its firing stores in the
    /// actor's inbox instead of running a reminder turn.
    #[serde(default, rename = "t", skip_serializing_if = "Option::is_none")]
    pub(crate) tell: Option<TellMeta>,
}

/// A delayed tell's call as its reminder keeps it until due (the payload is
/// the reminder's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TellMeta {
    #[serde(rename = "m")]
    pub(crate) method: String,
    #[serde(default, rename = "d", skip_serializing_if = "Vec::is_empty")]
    pub(crate) metadata: Vec<(String, String)>,
    /// The idempotency key its inbox append carries, so a firing repeated
    /// after a crash is stored (and its effects happen) once.
    #[serde(rename = "k")]
    pub(crate) key: String,
    /// How long the key's record is kept, when its caller said.
    #[serde(default, rename = "r", skip_serializing_if = "Option::is_none")]
    pub(crate) key_retention_ms: Option<u64>,
}

impl Meta {
    /// The calendar schedule this record keeps, if any.
    pub(crate) fn cron_schedule(&self) -> Option<CronSchedule> {
        self.cron.as_ref().map(|pattern| CronSchedule {
            pattern: pattern.clone(),
            time_zone: self.time_zone.clone().unwrap_or_else(|| "UTC".into()),
        })
    }

    /// Keeps `schedule` (normalized) as this record's calendar schedule.
    pub(crate) fn set_cron(&mut self, schedule: Option<&CronSchedule>) {
        self.cron = schedule.map(|s| s.pattern.clone());
        self.time_zone = schedule
            .filter(|s| s.time_zone != "UTC")
            .map(|s| s.time_zone.clone());
    }
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_false(v: &bool) -> bool {
    !*v
}

pub(crate) fn encode(meta: &Meta, payload: &Payload) -> Bytes {
    let header = serde_json::to_vec(meta).unwrap_or_default();
    let mut out = Vec::with_capacity(4 + header.len() + payload.data.len());
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&payload.data);
    Bytes::from(out)
}

pub(crate) fn decode(data: &Bytes) -> Option<(Meta, Payload)> {
    let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
    let meta: Meta = serde_json::from_slice(data.get(4..4 + len)?).ok()?;
    let payload = Payload {
        data: data.slice(4 + len..),
        content_type: if meta.bytes {
            ContentType::Bytes
        } else {
            ContentType::Json
        },
    };
    Some((meta, payload))
}

pub(crate) fn info(record: &ReminderRecord) -> Option<ReminderInfo> {
    let (meta, payload) = decode(&record.data)?;
    Some(ReminderInfo {
        actor: ActorId::new(record.key.actor_type.as_str(), record.key.actor_id.as_str()),
        name: record.key.name.clone(),
        alarm: record.key.name == ALARM_NAME,
        next_due_unix_ms: meta.paused_due_ms.unwrap_or(record.due_unix_ms),
        paused: meta.paused_due_ms.is_some(),
        period: (meta.period_ms > 0).then(|| Duration::from_millis(meta.period_ms)),
        cron: meta.cron_schedule(),
        jitter: (meta.jitter_ms > 0).then(|| Duration::from_millis(meta.jitter_ms)),
        jitter_delay: Duration::from_millis(meta.delay_ms),
        remaining: meta.remaining,
        until_unix_ms: meta.until_unix_ms,
        payload,
        retry: RetryPolicy {
            max_attempts: meta.max_attempts,
            initial_backoff: Duration::from_millis(meta.initial_backoff_ms),
            max_backoff: Duration::from_millis(meta.max_backoff_ms),
        },
        missed: if meta.skip_missed {
            MissedFirings::Skip
        } else {
            MissedFirings::FireOnce
        },
        attempts: meta.attempts,
        fired: meta.fired,
        tell_method: meta.tell.map(|t| t.method),
    })
}

/// A record's meta for tests: three attempts from 1 s to 60 s, everything
/// else zero or unset, then `change`.
#[cfg(test)]
pub(super) fn meta_with(change: impl FnOnce(&mut Meta)) -> Meta {
    let mut meta = Meta {
        period_ms: 0,
        remaining: None,
        until_unix_ms: None,
        bytes: false,
        max_attempts: 3,
        initial_backoff_ms: 1000,
        max_backoff_ms: 60000,
        skip_missed: false,
        attempts: 0,
        fired: 0,
        cron: None,
        time_zone: None,
        jitter_ms: 0,
        delay_ms: 0,
        paused_due_ms: None,
        tell: None,
    };
    change(&mut meta);
    meta
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
