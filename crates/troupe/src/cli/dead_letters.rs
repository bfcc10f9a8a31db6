//! `troupe dead-letters list | get | redrive | drop`: durable tells that
//! failed every attempt (docs/delivery.md). The letters are in the state
//! store, so any daemon of a cluster lists all of them.

use clap::Subcommand;
use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::render::{self, Shown, Table};
use super::{actor_name, all_pages, connect, emit, emit_json, Output, Target};

type Admin = pb::admin_client::AdminClient<super::Authed>;

#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    /// List dead letters (of one type with --type): actor, seq, method, attempts, error.
    List {
        #[arg(long = "type", value_name = "TYPE")]
        actor_type: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Show one dead letter with its payload and metadata.
    Get {
        #[command(flatten)]
        letter: LetterArgs,
        #[command(flatten)]
        target: Target,
    },
    /// Send a dead letter again as a new durable tell, then forget it.
    Redrive {
        #[command(flatten)]
        letter: LetterArgs,
        #[command(flatten)]
        target: Target,
    },
    /// Forget a dead letter without delivering it.
    Drop {
        #[command(flatten)]
        letter: LetterArgs,
        #[command(flatten)]
        target: Target,
    },
}

/// Which letter: its actor and its SEQ from `dead-letters list`.
#[derive(Debug, Clone, clap::Args)]
pub struct LetterArgs {
    #[arg(value_name = "TYPE")]
    actor_type: String,
    id: String,
    seq: u64,
}

impl LetterArgs {
    fn to_pb(&self) -> pb::DeadLetterRef {
        pb::DeadLetterRef {
            actor: Some(pb::ActorRef {
                r#type: self.actor_type.clone(),
                id: self.id.clone(),
            }),
            seq: self.seq,
        }
    }

    fn name(&self) -> String {
        format!(
            "dead letter {} of {}",
            self.seq,
            actor_name(&self.actor_type, &self.id)
        )
    }
}

pub async fn run(command: DeadLettersCommand) -> anyhow::Result<()> {
    match command {
        DeadLettersCommand::List { actor_type, target } => list(&target, actor_type).await,
        DeadLettersCommand::Get { letter, target } => get(&target, &letter).await,
        DeadLettersCommand::Redrive { letter, target } => {
            change(&target, &letter, Change::Redrive).await
        }
        DeadLettersCommand::Drop { letter, target } => change(&target, &letter, Change::Drop).await,
    }
}

fn row_json(l: &pb::DeadLetter) -> Value {
    let actor = l.actor.clone().unwrap_or_default();
    let mut row = json!({
        "type": actor.r#type,
        "id": actor.id,
        "seq": l.seq,
        "method": l.method,
        "attempts": l.attempts,
        "error": l.error,
    });
    if let Some(o) = row.as_object_mut() {
        render::time_json(o, "failed", l.failed_unix_ms);
        if let Some(payload) = &l.payload {
            o.insert("payload".into(), Shown::payload(Some(payload)).json());
            o.insert("metadata".into(), json!(l.metadata));
        }
    }
    row
}

async fn list(target: &Target, actor_type: Option<String>) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let admin = Admin::new(daemon.channel.clone());
    let ty = actor_type.unwrap_or_default();
    let of_type = if ty.is_empty() {
        String::new()
    } else {
        format!(" of type {ty}")
    };
    let request = daemon.request(format!("list dead letters{of_type}"));
    let letters = all_pages(|page_token| {
        let mut admin = admin.clone();
        let ask = pb::ListDeadLettersRequest {
            r#type: ty.clone(),
            page_size: 1000,
            page_token,
        };
        let request = &request;
        async move {
            let page = admin
                .list_dead_letters(ask)
                .await
                .map_err(|s| request.failed(s))?
                .into_inner();
            Ok((page.dead_letters, page.next_page_token))
        }
    })
    .await?;
    match target.output {
        Output::Json => emit_json(&Value::Array(letters.iter().map(row_json).collect())),
        Output::Table if letters.is_empty() => emit(&format!("no dead letters{of_type}\n")),
        Output::Table => {
            let mut t = Table::new(&[
                ("TYPE", false),
                ("ID", false),
                ("SEQ", true),
                ("METHOD", false),
                ("ATTEMPTS", true),
                ("FAILED", false),
                ("ERROR", false),
            ]);
            for l in letters {
                let actor = l.actor.unwrap_or_default();
                t.row(vec![
                    actor.r#type,
                    actor.id,
                    l.seq.to_string(),
                    l.method,
                    l.attempts.to_string(),
                    render::time_cell(l.failed_unix_ms),
                    // One line per letter: the first line of the error.
                    l.error.lines().next().unwrap_or_default().to_owned(),
                ]);
            }
            emit(&t.render())
        }
    }
}

async fn get(target: &Target, letter: &LetterArgs) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = Admin::new(daemon.channel.clone());
    let request = daemon.request(format!("show {}", letter.name()));
    let l = admin
        .get_dead_letter(letter.to_pb())
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    if target.output == Output::Json {
        return emit_json(&row_json(&l));
    }
    let mut metadata: Vec<String> = l.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
    metadata.sort();
    let mut out = render::fields(&[
        ("actor", actor_name(&letter.actor_type, &letter.id)),
        ("seq", l.seq.to_string()),
        ("method", l.method.clone()),
        ("attempts", l.attempts.to_string()),
        ("failed", render::time_cell(l.failed_unix_ms)),
        (
            "metadata",
            if metadata.is_empty() {
                "-".into()
            } else {
                metadata.join(", ")
            },
        ),
        ("error", l.error.clone()),
    ]);
    out.push_str("\nPAYLOAD\n");
    out.push_str(&Shown::payload(l.payload.as_ref()).pretty());
    out.push('\n');
    emit(&out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Redrive,
    Drop,
}

async fn change(target: &Target, letter: &LetterArgs, change: Change) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = Admin::new(daemon.channel.clone());
    let verb = match change {
        Change::Redrive => "re-drive",
        Change::Drop => "drop",
    };
    let request = daemon.request(format!("{verb} {}", letter.name()));
    let answer = match change {
        Change::Redrive => admin.redrive_dead_letter(letter.to_pb()).await.map(drop),
        Change::Drop => admin.drop_dead_letter(letter.to_pb()).await.map(drop),
    };
    answer.map_err(|s| request.failed(s))?;
    match (target.output, change) {
        (Output::Json, _) => {
            let done = match change {
                Change::Redrive => "redriven",
                Change::Drop => "dropped",
            };
            let mut out = json!({
                "type": letter.actor_type,
                "id": letter.id,
                "seq": letter.seq,
            });
            if let Some(o) = out.as_object_mut() {
                o.insert(done.into(), Value::Bool(true));
            }
            emit_json(&out)
        }
        (Output::Table, Change::Redrive) => emit(&format!(
            "re-drove {}: it is stored in the actor's inbox as a new durable tell\n",
            letter.name()
        )),
        (Output::Table, Change::Drop) => emit(&format!("dropped {}\n", letter.name())),
    }
}
