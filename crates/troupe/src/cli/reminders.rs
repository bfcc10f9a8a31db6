//! `troupe reminders list`, and the reminder rows `actors get` shares.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::render::{self, Shown, Table};
use super::{all_pages, connect, emit, emit_json, Output, Target};

/// The alarm has no name of its own; tables and JSON call it this.
const ALARM_NAME: &str = "(alarm)";

pub async fn reminders_list(
    target: &Target,
    actor_type: Option<String>,
    actor_id: Option<String>,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let client = pb::actor_client_client::ActorClientClient::new(daemon.channel.clone());
    let request = daemon.request("list reminders");
    let (ty, id) = (
        actor_type.clone().unwrap_or_default(),
        actor_id.clone().unwrap_or_default(),
    );
    let all = all_pages(|page_token| {
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
    .await?;
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
        "payload": Shown::payload(r.payload.as_ref()).json(),
    });
    if let Some(o) = row.as_object_mut() {
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
        ("PERIOD", true),
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
            render::time_cell(r.next_due_unix_ms),
            render::duration_cell(r.period_ms),
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
