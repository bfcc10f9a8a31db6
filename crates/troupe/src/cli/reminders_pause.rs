//! `troupe reminders pause` and `resume`: hold a reminder's firings during
//! an incident or a migration and let it go on later, keeping its schedule,
//! payload and counts (docs/scheduling.md, "Pausing").

use troupe_proto::v1 as pb;

use super::reminders::{row_json, table, ALARM_NAME};
use super::{actor_name, connect, emit, emit_json, fail, Authed, Exit, Output, Target};

/// The reminder `pause` and `resume` act on.
#[derive(Debug, Clone, clap::Args)]
pub struct Paused {
    /// The actor type.
    #[arg(value_name = "TYPE")]
    pub actor_type: String,
    /// The actor's id.
    pub id: String,
    /// The reminder's name, as `troupe reminders list` shows it.
    pub name: String,
}

/// Pauses (`pause`) or resumes the reminder, then prints it as `list` does.
pub async fn reminders_pause(target: &Target, which: Paused, pause: bool) -> anyhow::Result<()> {
    let Paused {
        actor_type,
        id,
        name,
    } = which;
    let whose = actor_name(&actor_type, &id);
    if name == ALARM_NAME || name.starts_with('$') {
        return Err(fail(
            Exit::Usage,
            format!(
                "{whose}'s alarm cannot be paused: an alarm is one time its actor chose. \
                 Delete it (`troupe reminders delete {actor_type} {id} --alarm`) and set it \
                 again later"
            ),
        ));
    }
    let daemon = connect(target).await?;
    let mut client = pb::actor_client_client::ActorClientClient::new(daemon.channel.clone());
    let verb = if pause { "pause" } else { "resume" };
    let request = daemon.request(format!("{verb} reminder {name:?} of {whose}"));
    let reminder = pb::ReminderRef {
        actor: Some(pb::ActorRef {
            r#type: actor_type.clone(),
            id: id.clone(),
        }),
        name: name.clone(),
    };
    let answer = if pause {
        client.pause_reminder(reminder).await
    } else {
        client.resume_reminder(reminder).await
    };
    let reminder = match answer {
        Ok(reminder) => reminder.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => {
            let has = names_of(&mut client, &actor_type, &id)
                .await
                .map_err(|s| request.failed(s))?;
            return Err(fail(
                Exit::NotFound,
                format!("{whose} has no reminder {name:?} ({has})"),
            ));
        }
        Err(status) => return Err(request.failed(status)),
    };
    match target.output {
        Output::Json => emit_json(&row_json(&reminder)),
        Output::Table => emit(&table(&[reminder], true)),
    }
}

/// What reminders an actor has, for a message about one it does not.
pub(super) async fn names_of(
    client: &mut pb::actor_client_client::ActorClientClient<Authed>,
    actor_type: &str,
    id: &str,
) -> Result<String, tonic::Status> {
    let there = client
        .list_reminders(pb::ListRemindersRequest {
            r#type: actor_type.to_owned(),
            id: id.to_owned(),
            page_size: 1000,
            page_token: String::new(),
        })
        .await?
        .into_inner()
        .reminders;
    let names: Vec<&str> = there
        .iter()
        .map(|r| if r.alarm { ALARM_NAME } else { &r.name })
        .collect();
    Ok(if names.is_empty() {
        "it has no reminders or alarm".to_owned()
    } else {
        format!("it has: {}", names.join(", "))
    })
}
