//! `troupe dead-letters redrive --all` and `drop --all --yes`: one change
//! made to every dead letter listed when the command starts. Listing first
//! means letters that fail again meanwhile wait for the next run instead of
//! looping. One actor's letters change in SEQ order, so re-driven tells keep
//! their order, and an actor stops at its first failure; different actors
//! go in parallel.

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use tonic::{Code, Status};
use troupe_proto::v1 as pb;

use super::dead_letters::{apply, fetch, letter_name, Change};
use super::render::Table;
use super::{connect, emit, emit_json, exit_of, fail, Daemon, Exit, Output, Target};

/// Actors whose letters change at once: enough to hide the round trip of
/// each letter, few enough to leave the daemon to its other work.
const ACTORS_AT_ONCE: usize = 8;

/// Which letters `--all` is for.
pub(super) struct Filter {
    pub(super) actor_type: Option<String>,
    pub(super) method: Option<String>,
}

impl Filter {
    /// e.g. " of type log, method flaky"; empty for every letter.
    fn narrowing(&self) -> String {
        let mut s = String::new();
        if let Some(ty) = &self.actor_type {
            s.push_str(&format!(" of type {ty}"));
        }
        if let Some(method) = &self.method {
            s.push_str(match self.actor_type {
                Some(_) => ", method ",
                None => " of method ",
            });
            s.push_str(method);
        }
        s
    }

    /// e.g. "every dead letter of type log".
    pub(super) fn describe(&self) -> String {
        format!("every dead letter{}", self.narrowing())
    }
}

/// What became of one letter.
enum Outcome {
    Done,
    /// Someone else re-drove or dropped it first.
    Gone,
    Failed(Status),
    /// Not tried: an earlier letter of the same actor failed, and going on
    /// would change the order of its tells.
    Skipped,
}

pub(super) async fn change_all(
    target: &Target,
    filter: Filter,
    change: Change,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut letters = fetch(&daemon, filter.actor_type.clone()).await?;
    if let Some(method) = &filter.method {
        letters.retain(|l| &l.method == method);
    }
    let listed = letters.len();
    let admin = daemon.admin();
    let outcomes: Vec<(pb::DeadLetter, Outcome)> = stream::iter(by_actor(letters))
        .map(|letters| {
            let mut admin = admin.clone();
            async move {
                let mut outcomes = Vec::with_capacity(letters.len());
                let mut failed = false;
                for letter in letters {
                    let outcome = if failed {
                        Outcome::Skipped
                    } else {
                        let reference = pb::DeadLetterRef {
                            actor: letter.actor.clone(),
                            seq: letter.seq,
                        };
                        match apply(&mut admin, reference, change).await {
                            Ok(()) => Outcome::Done,
                            Err(s) if s.code() == Code::NotFound => Outcome::Gone,
                            Err(s) => {
                                failed = true;
                                Outcome::Failed(s)
                            }
                        }
                    };
                    outcomes.push((letter, outcome));
                }
                outcomes
            }
        })
        .buffer_unordered(ACTORS_AT_ONCE)
        .flat_map(stream::iter)
        .collect()
        .await;
    report(&daemon, target.output, &filter, change, listed, outcomes)
}

/// `letters` (ordered by actor, then SEQ) cut into one run per actor.
fn by_actor(letters: Vec<pb::DeadLetter>) -> Vec<Vec<pb::DeadLetter>> {
    let mut runs: Vec<Vec<pb::DeadLetter>> = Vec::new();
    for letter in letters {
        match runs.last_mut() {
            Some(run) if run.last().map(|l| &l.actor) == Some(&letter.actor) => run.push(letter),
            _ => runs.push(vec![letter]),
        }
    }
    runs
}

/// One letter that was not changed: which, why, and the exit code its
/// failure maps to.
struct NotChanged {
    actor: pb::ActorRef,
    seq: u64,
    why: String,
    exit: Exit,
}

fn report(
    daemon: &Daemon,
    output: Output,
    filter: &Filter,
    change: Change,
    listed: usize,
    outcomes: Vec<(pb::DeadLetter, Outcome)>,
) -> anyhow::Result<()> {
    let (mut done, mut gone) = (0usize, 0usize);
    let mut not_changed = Vec::new();
    for (letter, outcome) in outcomes {
        let actor = letter.actor.unwrap_or_default();
        let (why, exit) = match outcome {
            Outcome::Done => {
                done += 1;
                continue;
            }
            Outcome::Gone => {
                gone += 1;
                continue;
            }
            Outcome::Failed(status) => {
                let name = format!(
                    "{} {}",
                    change.verb(),
                    letter_name(&actor.r#type, &actor.id, letter.seq)
                );
                let error = daemon.request(name).failed(status);
                let why = error
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                (why, exit_of(&error))
            }
            Outcome::Skipped => (
                format!(
                    "not tried: an earlier letter of this actor was not {}",
                    change.participle()
                ),
                Exit::Daemon,
            ),
        };
        not_changed.push(NotChanged {
            actor,
            seq: letter.seq,
            why,
            exit,
        });
    }
    match output {
        Output::Json => {
            let failed: Vec<Value> = not_changed
                .iter()
                .map(|n| json!({"type": n.actor.r#type, "id": n.actor.id, "seq": n.seq, "error": n.why}))
                .collect();
            let mut out = json!({"listed": listed, "gone": gone, "failed": failed});
            if let Some(o) = out.as_object_mut() {
                o.insert(change.done_field().into(), json!(done));
            }
            emit_json(&out)?;
        }
        Output::Table if listed == 0 => {
            emit(&format!("no dead letters{}\n", filter.narrowing()))?;
        }
        Output::Table => {
            let mut text = format!(
                "{} {done} of {listed} dead letter{}{}",
                change.past(),
                if listed == 1 { "" } else { "s" },
                filter.narrowing()
            );
            if gone > 0 {
                text.push_str(&format!(" ({gone} already gone)"));
            }
            text.push('\n');
            if !not_changed.is_empty() {
                let mut t = Table::new(&[
                    ("TYPE", false),
                    ("ID", false),
                    ("SEQ", true),
                    ("NOT CHANGED BECAUSE", false),
                ]);
                for n in &not_changed {
                    t.row(vec![
                        n.actor.r#type.clone(),
                        n.actor.id.clone(),
                        n.seq.to_string(),
                        n.why.clone(),
                    ]);
                }
                text.push_str(&t.render());
            }
            emit(&text)?;
        }
    }
    match not_changed.first() {
        None => Ok(()),
        Some(first) => Err(fail(
            first.exit,
            format!(
                "{} of {listed} dead letters were not {} (the output says why); \
                 fix that, then run the command again: it takes up what is left",
                not_changed.len(),
                change.participle()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(id: &str, seq: u64) -> pb::DeadLetter {
        pb::DeadLetter {
            actor: Some(pb::ActorRef {
                r#type: "log".into(),
                id: id.into(),
            }),
            seq,
            ..Default::default()
        }
    }

    #[test]
    fn each_actor_is_one_run_in_seq_order() {
        let runs = by_actor(vec![
            letter("a", 1),
            letter("a", 2),
            letter("b", 1),
            letter("c", 5),
        ]);
        let seqs: Vec<Vec<(String, u64)>> = runs
            .iter()
            .map(|run| {
                run.iter()
                    .map(|l| (l.actor.clone().unwrap_or_default().id, l.seq))
                    .collect()
            })
            .collect();
        assert_eq!(
            seqs,
            [
                vec![("a".into(), 1), ("a".into(), 2)],
                vec![("b".into(), 1)],
                vec![("c".into(), 5)]
            ]
        );
    }

    #[test]
    fn the_filter_reads_as_it_narrows() {
        let filter = |ty: Option<&str>, method: Option<&str>| Filter {
            actor_type: ty.map(Into::into),
            method: method.map(Into::into),
        };
        assert_eq!(filter(None, None).describe(), "every dead letter");
        assert_eq!(filter(Some("log"), None).narrowing(), " of type log");
        assert_eq!(filter(None, Some("f")).narrowing(), " of method f");
        assert_eq!(
            filter(Some("log"), Some("f")).narrowing(),
            " of type log, method f"
        );
    }
}
