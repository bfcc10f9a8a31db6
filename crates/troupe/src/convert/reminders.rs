//! Reminders and their settings between the runtime's types and the
//! `ActorClient` messages, both ways: retry policies, missed-firing rules,
//! cron schedules and a reminder as listed.

use std::time::Duration;

use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::input::millis;
use troupe_runtime::{CronSchedule, MissedFirings, ReminderInfo, RetryPolicy, ALARM_NAME};

use super::{actor_ref, payload, payload_to_pb};

pub fn retry(policy: Option<pb::RetryPolicy>) -> RetryPolicy {
    let defaults = RetryPolicy::default();
    let Some(p) = policy else {
        return defaults;
    };
    RetryPolicy {
        max_attempts: if p.max_attempts == 0 {
            defaults.max_attempts
        } else {
            p.max_attempts
        },
        initial_backoff: if p.initial_backoff_ms == 0 {
            defaults.initial_backoff
        } else {
            Duration::from_millis(p.initial_backoff_ms)
        },
        max_backoff: if p.max_backoff_ms == 0 {
            defaults.max_backoff
        } else {
            Duration::from_millis(p.max_backoff_ms)
        },
    }
}

pub(super) fn retry_to_pb(r: RetryPolicy) -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: r.max_attempts,
        initial_backoff_ms: millis(r.initial_backoff),
        max_backoff_ms: millis(r.max_backoff),
    }
}

pub fn missed(value: i32) -> MissedFirings {
    match pb::MissedFirings::try_from(value) {
        Ok(pb::MissedFirings::Skip) => MissedFirings::Skip,
        _ => MissedFirings::FireOnce,
    }
}

pub(super) fn missed_to_pb(m: MissedFirings) -> i32 {
    let wire = match m {
        MissedFirings::FireOnce => pb::MissedFirings::FireOnce,
        MissedFirings::Skip => pb::MissedFirings::Skip,
    };
    wire as i32
}

pub fn reminder_to_pb(r: ReminderInfo) -> pb::Reminder {
    let (cron, time_zone) = cron_to_pb(r.cron);
    pb::Reminder {
        actor: Some(actor_ref(&r.actor)),
        name: if r.alarm { String::new() } else { r.name },
        next_due_unix_ms: r.next_due_unix_ms,
        period_ms: r.period.map_or(0, millis),
        cron,
        time_zone,
        jitter_ms: r.jitter.map_or(0, millis),
        jitter_delay_ms: millis(r.jitter_delay),
        remaining: r.remaining.unwrap_or(0),
        until_unix_ms: r.until_unix_ms.unwrap_or(0),
        payload: Some(payload_to_pb(r.payload)),
        retry: Some(retry_to_pb(r.retry)),
        missed: missed_to_pb(r.missed),
        attempts: r.attempts,
        fired: r.fired,
        alarm: r.alarm,
        paused: r.paused,
        tell_method: r.tell_method.unwrap_or_default(),
    }
}

/// A calendar schedule as the wire's `cron` and `time_zone` (empty: none).
pub(super) fn cron_to_pb(schedule: Option<CronSchedule>) -> (String, String) {
    schedule.map_or_else(Default::default, |c| (c.pattern, c.time_zone))
}

/// A reminder's calendar schedule as the API gives it: a zone means
/// nothing without a pattern, and is refused rather than ignored.
pub(super) fn cron_schedule(
    pattern: String,
    time_zone: String,
) -> Result<Option<CronSchedule>, Status> {
    if !pattern.trim().is_empty() {
        return Ok(Some(CronSchedule { pattern, time_zone }));
    }
    if time_zone.trim().is_empty() {
        return Ok(None);
    }
    Err(Status::invalid_argument(format!(
        "time_zone {} is set without a cron pattern; a time zone only says how `cron` is \
         read: give `cron` too, or leave time_zone empty",
        troupe_runtime::validate::abridged(&time_zone, 64)
    )))
}

pub(super) fn reminder_from_pb(r: pb::Reminder) -> ReminderInfo {
    let actor = r
        .actor
        .map(|a| troupe_runtime::ActorId::new(a.r#type, a.id))
        .unwrap_or_else(|| troupe_runtime::ActorId::new("", ""));
    ReminderInfo {
        actor,
        name: if r.alarm { ALARM_NAME.into() } else { r.name },
        alarm: r.alarm,
        next_due_unix_ms: r.next_due_unix_ms,
        paused: r.paused,
        period: (r.period_ms > 0).then(|| Duration::from_millis(r.period_ms)),
        cron: (!r.cron.is_empty()).then_some(CronSchedule {
            pattern: r.cron,
            time_zone: r.time_zone,
        }),
        jitter: (r.jitter_ms > 0).then(|| Duration::from_millis(r.jitter_ms)),
        jitter_delay: Duration::from_millis(r.jitter_delay_ms),
        remaining: (r.remaining > 0).then_some(r.remaining),
        until_unix_ms: (r.until_unix_ms > 0).then_some(r.until_unix_ms),
        payload: payload(r.payload),
        retry: retry(r.retry),
        missed: missed(r.missed),
        attempts: r.attempts,
        fired: r.fired,
        tell_method: (!r.tell_method.is_empty()).then_some(r.tell_method),
    }
}
