//! `troupe reminders set`: schedule a reminder or an actor's alarm from the
//! shell, so an operator can start a nightly job, re-arm one an outage made
//! fail for good, or try a cron pattern against the real daemon without
//! writing app code. The daemon checks every schedule field; this only
//! checks what it could not tell apart (flags that contradict each other,
//! `--data` that is not JSON).

use troupe_proto::v1 as pb;

use super::json_arg::JsonArg;
use super::reminders::{row_json, table, Scheduled};
use super::{actor_name, connect, emit, emit_json, fail, Exit, Output, Target};

/// What `troupe reminders set` schedules.
#[derive(Debug, Clone, clap::Args)]
pub struct ReminderSet {
    #[command(flatten)]
    pub which: Scheduled,
    /// Fire again every DURATION ("10m", ISO 8601 "PT10M", or "R5/PT10S" for
    /// five firings in all). Left out, with no --cron: fire once.
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["cron", "alarm"])]
    pub every: Option<String>,
    /// Fire at the matches of a cron pattern instead of every period:
    /// "0 9 * * MON-FRI", six fields with seconds first, or @hourly, @daily,
    /// @weekly, @monthly, @yearly (docs/scheduling.md).
    #[arg(long, value_name = "PATTERN", conflicts_with = "alarm")]
    pub cron: Option<String>,
    /// The IANA time zone --cron is read in ("Europe/Berlin"); left out, UTC.
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub time_zone: Option<String>,
    /// Fire a fixed delay of up to DURATION after each scheduled time
    /// (chosen per reminder from its type, id and name), so that many
    /// reminders set alike do not fire at once.
    #[arg(long, value_name = "DURATION", conflicts_with = "alarm")]
    pub jitter: Option<String>,
    /// The first firing: a duration from now ("90s") or an RFC 3339 time.
    /// Left out: now, or with --cron the first match from now.
    #[arg(long, value_name = "WHEN")]
    pub due: Option<String>,
    /// No firing after this RFC 3339 time or duration from now.
    #[arg(long, value_name = "WHEN", conflicts_with = "alarm")]
    pub until: Option<String>,
    /// Fire at most N times in all.
    #[arg(long, value_name = "N", conflicts_with = "alarm",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub times: Option<u32>,
    /// What each firing passes to the actor's handler, as JSON (its `data`);
    /// left out, null. @FILE reads it from FILE, @- from standard input.
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,
    /// Skip firings that came due while the daemon was down, instead of
    /// firing once for them on recovery.
    #[arg(long, conflicts_with = "alarm")]
    pub skip_missed: bool,
    /// Attempts per firing before it is dropped (the daemon's default: 3).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: Option<u32>,
}

impl ReminderSet {
    /// `--data` as the payload the handler decodes: the JSON value itself.
    fn payload(&self) -> anyhow::Result<Option<pb::Payload>> {
        let Some(given) = &self.data else {
            return Ok(None);
        };
        let value = JsonArg::read("--data", given)?.parse(
            "--data",
            "give the value the handler gets, e.g. --data '{\"report\": \"daily\"}' or --data \
             '\"nightly\"' (or @FILE to read it from a file)",
        )?;
        Ok(Some(pb::Payload {
            data: value.to_string().into_bytes().into(),
            content_type: pb::ContentType::Json as i32,
        }))
    }

    fn retry(&self) -> Option<pb::RetryPolicy> {
        // Zeros ask for the daemon's defaults.
        self.max_attempts.map(|max_attempts| pb::RetryPolicy {
            max_attempts,
            ..Default::default()
        })
    }
}

pub async fn reminders_set(target: &Target, set: ReminderSet) -> anyhow::Result<()> {
    let Scheduled { actor_type, id, .. } = &set.which;
    let reminder = set.which.reminder(
        "name the reminder to set (e.g. `troupe reminders set counter c1 tick --every \
         10m`), or give --alarm to set the actor's alarm",
    )?;
    // The name `list` shows for the alarm gets past clap's conflicts.
    let reminder_only = set.every.is_some()
        || set.cron.is_some()
        || set.jitter.is_some()
        || set.until.is_some()
        || set.times.is_some()
        || set.skip_missed;
    if reminder.is_none() && reminder_only {
        return Err(fail(
            Exit::Usage,
            "the alarm fires once at --due: --every, --cron, --jitter, --until, --times and \
             --skip-missed are for named reminders",
        ));
    }
    let actor = Some(pb::ActorRef {
        r#type: actor_type.clone(),
        id: id.clone(),
    });
    let payload = set.payload()?;
    let name = actor_name(actor_type, id);
    let daemon = connect(target).await?;
    let mut client = daemon.actor_client();
    let answer = match reminder {
        Some(reminder) => {
            let request = daemon.request(format!("set the reminder {reminder:?} of {name}"));
            client
                .set_reminder(pb::SetReminderRequest {
                    actor,
                    name: reminder.to_owned(),
                    due: set.due.clone().unwrap_or_default(),
                    period: set.every.clone().unwrap_or_default(),
                    repeat: set.times.unwrap_or(0),
                    until: set.until.clone().unwrap_or_default(),
                    payload,
                    retry: set.retry(),
                    missed: if set.skip_missed {
                        pb::MissedFirings::Skip
                    } else {
                        pb::MissedFirings::FireOnce
                    } as i32,
                    cron: set.cron.clone().unwrap_or_default(),
                    time_zone: set.time_zone.clone().unwrap_or_default(),
                    jitter: set.jitter.clone().unwrap_or_default(),
                })
                .await
                .map_err(|s| request.failed(s))?
        }
        None => {
            let request = daemon.request(format!("set the alarm of {name}"));
            client
                .set_alarm(pb::SetAlarmRequest {
                    actor,
                    at: set.due.clone().unwrap_or_default(),
                    payload,
                    retry: set.retry(),
                })
                .await
                .map_err(|s| request.failed(s))?
        }
    }
    .into_inner();
    match target.output {
        Output::Json => emit_json(&row_json(&answer)),
        Output::Table => emit(&table(std::slice::from_ref(&answer), true)),
    }
}
