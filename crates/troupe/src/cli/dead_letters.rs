//! `troupe dead-letters list | get | redrive | drop`: durable tells that
//! failed every attempt (docs/delivery.md); `--all` is in
//! [`super::dead_letters_bulk`]. The letters are in the state
//! store, so any daemon of a cluster lists all of them.

use clap::Subcommand;
use serde_json::{json, Value};
use tonic::Status;
use troupe_proto::v1 as pb;

use super::dead_letters_bulk::{change_all, Filter};
use super::render::{self, Shown, Table};
use super::{
    actor_name, all_pages, connect, emit, emit_json, fail, Admin, Daemon, Exit, Output, Target,
};

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
    /// Send a dead letter again as a new durable tell, then forget it;
    /// with --all, every letter listed when the command starts.
    Redrive {
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        target: Target,
    },
    /// Forget a dead letter without delivering it; with --all (and --yes),
    /// every letter listed when the command starts.
    Drop {
        #[command(flatten)]
        which: Which,
        /// Confirm dropping with --all: there is no undo but a backup.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// Which letters a change is for: one, by its actor and SEQ, or `--all`
/// (narrowed by `--type` and `--method`).
#[derive(Debug, Clone, clap::Args)]
pub struct Which {
    #[arg(value_name = "TYPE", required_unless_present = "all")]
    actor_type: Option<String>,
    #[arg(required_unless_present = "all")]
    id: Option<String>,
    #[arg(required_unless_present = "all")]
    seq: Option<u64>,
    /// Every dead letter listed when the command starts; letters that fail
    /// again meanwhile wait for the next run.
    #[arg(long, conflicts_with_all = ["actor_type", "id", "seq"])]
    all: bool,
    /// With --all: only the letters of actors of this type.
    #[arg(long = "type", value_name = "TYPE", requires = "all")]
    of_type: Option<String>,
    /// With --all: only the letters of tells to this method.
    #[arg(long, value_name = "METHOD", requires = "all")]
    method: Option<String>,
}

impl Which {
    /// The one letter named, when not `--all`.
    fn one(&self) -> Option<LetterArgs> {
        match (&self.actor_type, &self.id, self.seq, self.all) {
            (Some(actor_type), Some(id), Some(seq), false) => Some(LetterArgs {
                actor_type: actor_type.clone(),
                id: id.clone(),
                seq,
            }),
            _ => None,
        }
    }

    fn filter(self) -> Filter {
        Filter {
            actor_type: self.of_type,
            method: self.method,
        }
    }
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
        letter_name(&self.actor_type, &self.id, self.seq)
    }
}

/// As people read a letter: "dead letter 7 of log/a".
pub(super) fn letter_name(ty: &str, id: &str, seq: u64) -> String {
    format!("dead letter {seq} of {}", actor_name(ty, id))
}

pub async fn run(command: DeadLettersCommand) -> anyhow::Result<()> {
    match command {
        DeadLettersCommand::List { actor_type, target } => list(&target, actor_type).await,
        DeadLettersCommand::Get { letter, target } => get(&target, &letter).await,
        DeadLettersCommand::Redrive { which, target } => match which.one() {
            Some(letter) => change(&target, &letter, Change::Redrive).await,
            None => change_all(&target, which.filter(), Change::Redrive).await,
        },
        DeadLettersCommand::Drop { which, yes, target } => match which.one() {
            Some(letter) => change(&target, &letter, Change::Drop).await,
            None if !yes => Err(fail(
                Exit::Usage,
                format!(
                    "drop --all forgets {} without delivering them and there is no undo; \
                     list them with `troupe dead-letters list`, then run again with --yes",
                    which.filter().describe()
                ),
            )),
            None => change_all(&target, which.filter(), Change::Drop).await,
        },
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

/// Every dead letter (of one type), without payloads, in the daemon's
/// order: by actor, then SEQ.
pub(super) async fn fetch(
    daemon: &Daemon,
    actor_type: Option<String>,
) -> anyhow::Result<Vec<pb::DeadLetter>> {
    let admin = daemon.admin();
    let ty = actor_type.unwrap_or_default();
    let what = match ty.as_str() {
        "" => "list dead letters".to_owned(),
        ty => format!("list dead letters of type {ty}"),
    };
    let request = daemon.request(what);
    all_pages(|page_token| {
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
    .await
}

async fn list(target: &Target, actor_type: Option<String>) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let of_type = match &actor_type {
        Some(ty) => format!(" of type {ty}"),
        None => String::new(),
    };
    let letters = fetch(&daemon, actor_type).await?;
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
    let mut admin = daemon.admin();
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
pub(super) enum Change {
    Redrive,
    Drop,
}

impl Change {
    /// As in "re-drive dead letter 7 of log/a".
    pub(super) fn verb(self) -> &'static str {
        match self {
            Change::Redrive => "re-drive",
            Change::Drop => "drop",
        }
    }

    /// As in "re-drove 3 dead letters".
    pub(super) fn past(self) -> &'static str {
        match self {
            Change::Redrive => "re-drove",
            Change::Drop => "dropped",
        }
    }

    /// As in "3 dead letters were not re-driven".
    pub(super) fn participle(self) -> &'static str {
        match self {
            Change::Redrive => "re-driven",
            Change::Drop => "dropped",
        }
    }

    /// The JSON field that says it was done.
    pub(super) fn done_field(self) -> &'static str {
        match self {
            Change::Redrive => "redriven",
            Change::Drop => "dropped",
        }
    }
}

/// Makes `change` to one letter.
pub(super) async fn apply(
    admin: &mut Admin,
    letter: pb::DeadLetterRef,
    change: Change,
) -> Result<(), Status> {
    match change {
        Change::Redrive => admin.redrive_dead_letter(letter).await.map(drop),
        Change::Drop => admin.drop_dead_letter(letter).await.map(drop),
    }
}

async fn change(target: &Target, letter: &LetterArgs, change: Change) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = daemon.admin();
    let request = daemon.request(format!("{} {}", change.verb(), letter.name()));
    apply(&mut admin, letter.to_pb(), change)
        .await
        .map_err(|s| request.failed(s))?;
    match (target.output, change) {
        (Output::Json, _) => {
            let mut out = json!({
                "type": letter.actor_type,
                "id": letter.id,
                "seq": letter.seq,
            });
            if let Some(o) = out.as_object_mut() {
                o.insert(change.done_field().into(), Value::Bool(true));
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
