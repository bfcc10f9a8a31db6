//! `troupe reminders list` and `delete`, and the reminder rows `actors get`,
//! `set`, `pause` and `resume` share.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::reminders_pause::names_of;
use super::render::{self, Shown, Table};
use super::{actor_name, all_pages, connect, emit, emit_json, fail, Daemon, Exit, Output, Target};

/// The alarm has no name of its own; tables and JSON call it this.
pub(super) const ALARM_NAME: &str = "(alarm)";

pub async fn reminders_list(
    target: &Target,
    actor_type: Option<String>,
    actor_id: Option<String>,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let all = fetch(&daemon, actor_type.as_deref(), actor_id.as_deref()).await?;
    match target.output {
        Output::Json => emit_json(&Value::Array(all.iter().map(row_json).collect())),
        Output::Table if all.is_empty() => {
            let whose = match (&actor_type, &actor_id) {
                (Some(t), Some(i)) => format!(" for {}", super::actor_name(t, i)),
                (Some(t), None) => format!(" for actors of type {t}"),
                _ => String::new(),
            };
            emit(&format!("no reminders or alarms{whose}\n"))
        }
        Output::Table => emit(&table(&all, true)),
    }
}

/// Every reminder (and alarm) of a type, of one actor, or of all actors.
pub(super) async fn fetch(
    daemon: &Daemon,
    actor_type: Option<&str>,
    actor_id: Option<&str>,
) -> anyhow::Result<Vec<pb::Reminder>> {
    let client = daemon.actor_client();
    let request = daemon.request("list reminders");
    let (ty, id) = (
        actor_type.unwrap_or_default().to_owned(),
        actor_id.unwrap_or_default().to_owned(),
    );
    all_pages(|page_token| {
        let mut client = client.clone();
        let ask = pb::ListRemindersRequest {
            r#type: ty.clone(),
            id: id.clone(),
            page_size: 1000,
            page_token,
        };
        let request = &request;
        async move {
            let page = client
                .list_reminders(ask)
                .await
                .map_err(|s| request.failed(s))?
                .into_inner();
            Ok((page.reminders, page.next_page_token))
        }
    })
    .await
}

/// One reminder (or the alarm) in JSON output.
pub fn row_json(r: &pb::Reminder) -> Value {
    let actor = r.actor.clone().unwrap_or_default();
    let mut row = json!({
        "type": actor.r#type,
        "id": actor.id,
        "name": if r.alarm { ALARM_NAME } else { r.name.as_str() },
        "alarm": r.alarm,
        "period_ms": r.period_ms,
        "remaining": r.remaining,
        "attempts": r.attempts,
        "fired": r.fired,
        "paused": r.paused,
        "payload": Shown::payload(r.payload.as_ref()).json(),
    });
    if let Some(o) = row.as_object_mut() {
        if !r.cron.is_empty() {
            o.insert("cron".into(), json!(r.cron));
            o.insert("time_zone".into(), json!(r.time_zone));
        }
        if !r.tell_method.is_empty() {
            o.insert("tell_method".into(), json!(r.tell_method));
        }
        if r.jitter_ms > 0 {
            o.insert("jitter_ms".into(), json!(r.jitter_ms));
            o.insert("jitter_delay_ms".into(), json!(r.jitter_delay_ms));
        }
        render::time_json(o, "next_due", r.next_due_unix_ms);
        render::time_json(o, "until", r.until_unix_ms);
    }
    row
}

/// Reminders as a table; `with_actor` adds the TYPE and ID columns.
pub fn table(reminders: &[pb::Reminder], with_actor: bool) -> String {
    let mut columns = Vec::new();
    if with_actor {
        columns.extend([("TYPE", false), ("ID", false)]);
    }
    columns.extend([
        ("NAME", false),
        ("NEXT DUE", false),
        ("SCHEDULE", false),
        ("REMAINING", true),
        ("ATTEMPTS", true),
        ("FIRED", true),
    ]);
    let mut t = Table::new(&columns);
    for r in reminders {
        let actor = r.actor.clone().unwrap_or_default();
        let mut cells = Vec::new();
        if with_actor {
            cells.extend([actor.r#type, actor.id]);
        }
        cells.extend([
            if r.alarm {
                ALARM_NAME.to_owned()
            } else {
                r.name.clone()
            },
            next_due_cell(r),
            schedule_cell(r),
            // 0 means unbounded.
            if r.remaining == 0 {
                "-".to_owned()
            } else {
                r.remaining.to_string()
            },
            r.attempts.to_string(),
            r.fired.to_string(),
        ]);
        t.row(cells);
    }
    t.render()
}

/// When a reminder fires next; a paused one, when it was due.
fn next_due_cell(r: &pb::Reminder) -> String {
    let due = render::time_cell(r.next_due_unix_ms);
    if r.paused {
        format!("paused (due {due})")
    } else {
        due
    }
}

/// How a reminder repeats: its period, or its cron pattern and zone; and
/// the delay its jitter chose, which every firing keeps. A delayed tell's:
/// the method it will call.
fn schedule_cell(r: &pb::Reminder) -> String {
    if !r.tell_method.is_empty() {
        return format!("tell {}", r.tell_method);
    }
    let schedule = if r.cron.is_empty() {
        render::duration_cell(r.period_ms)
    } else {
        format!("{} ({})", r.cron, r.time_zone)
    };
    if r.jitter_ms == 0 {
        return schedule;
    }
    format!("{schedule} +{}", render::duration(r.jitter_delay_ms))
}

/// What `troupe reminders set` and `delete` act on: a reminder by name, or
/// the actor's alarm.
#[derive(Debug, Clone, clap::Args)]
pub struct Scheduled {
    /// The actor type.
    #[arg(value_name = "TYPE")]
    pub actor_type: String,
    /// The actor's id.
    pub id: String,
    /// The reminder's name, as `troupe reminders list` shows it ("(alarm)"
    /// is the alarm).
    #[arg(conflicts_with = "alarm")]
    pub name: Option<String>,
    /// The actor's alarm instead of a named reminder.
    #[arg(long)]
    pub alarm: bool,
}

impl Scheduled {
    /// The reminder's name; `None` for the alarm (by flag or by the name
    /// `list` shows for it). Neither a name nor --alarm fails with `hint`,
    /// which says how to give one.
    pub fn reminder(&self, hint: &str) -> anyhow::Result<Option<&str>> {
        if self.name.is_none() && !self.alarm {
            return Err(fail(Exit::Usage, hint));
        }
        Ok(self
            .name
            .as_deref()
            .filter(|n| !self.alarm && *n != ALARM_NAME))
    }
}

pub async fn reminders_delete(target: &Target, which: Scheduled) -> anyhow::Result<()> {
    let reminder = which
        .reminder(
            "name the reminder to delete (`troupe reminders list --type TYPE --id ID` shows \
             them), or give --alarm for the actor's alarm",
        )?
        .map(str::to_owned);
    let Scheduled { actor_type, id, .. } = which;
    let daemon = connect(target).await?;
    let mut client = daemon.actor_client();
    let actor = Some(pb::ActorRef {
        r#type: actor_type.clone(),
        id: id.clone(),
    });
    let name = actor_name(&actor_type, &id);
    let what = match &reminder {
        Some(r) => format!("reminder {r:?}"),
        None => "alarm".to_owned(),
    };
    let request = daemon.request(format!("delete the {what} of {name}"));
    let answer = match &reminder {
        Some(r) => {
            client
                .delete_reminder(pb::ReminderRef {
                    actor,
                    name: r.clone(),
                })
                .await
        }
        None => client.delete_alarm(pb::AlarmRef { actor }).await,
    };
    let deleted = answer.map_err(|s| request.failed(s))?.into_inner().deleted;
    if !deleted {
        // Name what there is, so that the next try can be right.
        let has = names_of(&mut client, &actor_type, &id)
            .await
            .map_err(|s| request.failed(s))?;
        return Err(fail(
            Exit::NotFound,
            format!("{name} has no {what} ({has})"),
        ));
    }
    match target.output {
        Output::Json => emit_json(&json!({
            "type": actor_type,
            "id": id,
            "name": reminder.as_deref().unwrap_or(ALARM_NAME),
            "alarm": reminder.is_none(),
            "deleted": true,
        })),
        Output::Table => emit(&format!("deleted the {what} of {name}\n")),
    }
}
