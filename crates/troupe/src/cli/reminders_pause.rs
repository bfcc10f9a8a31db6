//! `troupe reminders pause` and `resume`: hold a reminder's firings during
//! an incident or a migration and let it go on later, keeping its schedule,
//! payload and counts (docs/scheduling.md, "Pausing"); one reminder, or with
//! `--all` every reminder of a type, an actor or a name at once (listed
//! first, then changed eight at a time).

use futures::stream::{self, StreamExt};
use serde_json::json;
use tonic::{Code, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::{EXPIRE_NAME, RETAIN_NAME};

use super::reminders::{fetch, row_json, table, ALARM_NAME};
use super::render::Table;
use super::{
    actor_name, connect, emit, emit_json, exit_of, fail, Authed, Daemon, Exit, Output, Target,
};

/// Reminders changed at once by `--all`: enough to hide each round trip,
/// few enough to leave the daemon to its other work.
const AT_ONCE: usize = 8;

type ActorClient = pb::actor_client_client::ActorClientClient<Authed>;

/// The reminder `pause` and `resume` act on, or with `--all` the reminders.
#[derive(Debug, Clone, clap::Args)]
pub struct Paused {
    /// The actor type.
    #[arg(value_name = "TYPE", required_unless_present = "all")]
    pub actor_type: Option<String>,
    /// The actor's id.
    #[arg(required_unless_present = "all")]
    pub id: Option<String>,
    /// The reminder's name, as `troupe reminders list` shows it.
    #[arg(required_unless_present = "all")]
    pub name: Option<String>,
    /// Every reminder listed when the command starts (alarms and the
    /// daemon's own `$retain` and `$expire` are left alone unless --name
    /// names them), narrowed by --type, --id and --name.
    #[arg(long, conflicts_with_all = ["actor_type", "id", "name"])]
    pub all: bool,
    /// With --all: only the reminders of actors of this type.
    #[arg(long = "type", value_name = "TYPE", requires = "all")]
    pub of_type: Option<String>,
    /// With --all --type: only the reminders of this actor.
    #[arg(long = "id", value_name = "ID", requires = "of_type")]
    pub of_id: Option<String>,
    /// With --all: only the reminders of this name.
    #[arg(long = "name", value_name = "NAME", requires = "all")]
    pub named: Option<String>,
}

/// Pauses (`pause`) or resumes what `which` names, then prints it as
/// `list` does (one), or what was changed (`--all`).
pub async fn reminders_pause(target: &Target, which: Paused, pause: bool) -> anyhow::Result<()> {
    let verb = if pause { "pause" } else { "resume" };
    let (actor_type, id, name) = match which {
        Paused {
            actor_type: Some(actor_type),
            id: Some(id),
            name: Some(name),
            all: false,
            ..
        } => (actor_type, id, name),
        all => return change_all(target, all, pause).await,
    };
    let whose = actor_name(&actor_type, &id);
    // Other '$' names (a delayed tell's, `$retain`) pause as reminders do.
    if name == ALARM_NAME {
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
    let mut client = ActorClient::new(daemon.channel.clone());
    let request = daemon.request(format!("{verb} reminder {name:?} of {whose}"));
    let reminder = match set_paused(&mut client, &actor_type, &id, &name, pause).await {
        Ok(reminder) => reminder,
        Err(status) if status.code() == Code::NotFound => {
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

async fn set_paused(
    client: &mut ActorClient,
    actor_type: &str,
    id: &str,
    name: &str,
    pause: bool,
) -> Result<pb::Reminder, Status> {
    let reminder = pb::ReminderRef {
        actor: Some(pb::ActorRef {
            r#type: actor_type.to_owned(),
            id: id.to_owned(),
        }),
        name: name.to_owned(),
    };
    let answer = if pause {
        client.pause_reminder(reminder).await
    } else {
        client.resume_reminder(reminder).await
    };
    answer.map(tonic::Response::into_inner)
}

/// What became of one reminder `--all` listed.
enum Outcome {
    Done,
    /// Deleted (or fired its last) since it was listed.
    Gone,
    Failed(Status),
}

/// Pauses or resumes every reminder `which` narrows to, as listed now.
async fn change_all(target: &Target, which: Paused, pause: bool) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut listed = fetch(&daemon, which.of_type.as_deref(), which.of_id.as_deref()).await?;
    listed.retain(|r| {
        !r.alarm
            && match &which.named {
                Some(name) => *name == r.name,
                None => !is_housekeeping(&r.name),
            }
    });
    let count = listed.len();
    // Those already as asked need no call.
    let (already, to_change): (Vec<_>, Vec<_>) =
        listed.into_iter().partition(|r| r.paused == pause);
    let client = ActorClient::new(daemon.channel.clone());
    let outcomes: Vec<(pb::Reminder, Outcome)> = stream::iter(to_change)
        .map(|reminder| {
            let mut client = client.clone();
            async move {
                let actor = reminder.actor.clone().unwrap_or_default();
                let outcome =
                    match set_paused(&mut client, &actor.r#type, &actor.id, &reminder.name, pause)
                        .await
                    {
                        Ok(_) => Outcome::Done,
                        Err(s) if s.code() == Code::NotFound => Outcome::Gone,
                        Err(s) => Outcome::Failed(s),
                    };
                (reminder, outcome)
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    report(
        &daemon,
        target.output,
        &which,
        pause,
        count,
        already.len(),
        outcomes,
    )
}

/// The daemon's own reminders, which `--all` changes only when `--name`
/// names them: a paused `$retain` is an operator's legal hold, and
/// "resume every billing job" must not lift it (a resume past its due time
/// erases the actor at once).
fn is_housekeeping(name: &str) -> bool {
    name == RETAIN_NAME || name == EXPIRE_NAME
}

/// e.g. " of type billing, named invoice"; empty for every reminder.
fn narrowing(which: &Paused) -> String {
    let mut s = match (&which.of_type, &which.of_id) {
        (Some(ty), Some(id)) => format!(" of {}", actor_name(ty, id)),
        (Some(ty), None) => format!(" of type {ty}"),
        _ => String::new(),
    };
    if let Some(name) = &which.named {
        s.push_str(&format!(" named {name:?}"));
    }
    s
}

fn report(
    daemon: &Daemon,
    output: Output,
    which: &Paused,
    pause: bool,
    listed: usize,
    already: usize,
    outcomes: Vec<(pb::Reminder, Outcome)>,
) -> anyhow::Result<()> {
    let (verb, done_word) = if pause {
        ("pause", "paused")
    } else {
        ("resume", "resumed")
    };
    let (mut done, mut gone) = (0usize, 0usize);
    // Which reminder, why not, and the exit code that maps to.
    let mut failed: Vec<(pb::ActorRef, String, String, Exit)> = Vec::new();
    for (reminder, outcome) in outcomes {
        match outcome {
            Outcome::Done => done += 1,
            Outcome::Gone => gone += 1,
            Outcome::Failed(status) => {
                let actor = reminder.actor.unwrap_or_default();
                let what = format!(
                    "{verb} reminder {:?} of {}",
                    reminder.name,
                    actor_name(&actor.r#type, &actor.id)
                );
                let error = daemon.request(what).failed(status);
                let why = error
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                failed.push((actor, reminder.name, why, exit_of(&error)));
            }
        }
    }
    failed.sort_by(|a, b| (&a.0.r#type, &a.0.id, &a.1).cmp(&(&b.0.r#type, &b.0.id, &b.1)));
    match output {
        Output::Json => emit_json(&json!({
            "listed": listed,
            done_word: done,
            "already": already,
            "gone": gone,
            "failed": failed.iter().map(|(a, name, why, _)| json!({
                "type": a.r#type, "id": a.id, "name": name, "error": why,
            })).collect::<Vec<_>>(),
        }))?,
        Output::Table => {
            let mut text = format!(
                "{done_word} {done} of {listed} reminder{}{}",
                if listed == 1 { "" } else { "s" },
                narrowing(which)
            );
            if already > 0 {
                text.push_str(&format!(" ({already} already {done_word})"));
            }
            if gone > 0 {
                text.push_str(&format!(" ({gone} gone since listed)"));
            }
            text.push('\n');
            if !failed.is_empty() {
                let mut t = Table::new(&[
                    ("TYPE", false),
                    ("ID", false),
                    ("NAME", false),
                    ("NOT CHANGED BECAUSE", false),
                ]);
                for (actor, name, why, _) in &failed {
                    t.row(vec![
                        actor.r#type.clone(),
                        actor.id.clone(),
                        name.clone(),
                        why.clone(),
                    ]);
                }
                text.push_str(&t.render());
            }
            emit(&text)?;
        }
    }
    match failed.first() {
        None => Ok(()),
        Some((_, _, _, exit)) => Err(fail(
            *exit,
            format!(
                "{} of {listed} reminders were not {done_word} (the output says why); fix \
                 that, then run the command again: it takes up what is left",
                failed.len()
            ),
        )),
    }
}

/// What reminders an actor has, for a message about one it does not.
pub(super) async fn names_of(
    client: &mut ActorClient,
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
