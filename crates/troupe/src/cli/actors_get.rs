//! `troupe actors get TYPE ID`: one actor in detail, active or not.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;
use troupe_runtime::RETAIN_NAME;

use super::actors::actor_ref;
use super::render::{self, Shown, Table};
use super::{actor_name, connect, emit, emit_json, reminders, Output, Target};

pub async fn actors_get(target: &Target, actor_type: String, id: String) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = daemon.admin();
    let name = actor_name(&actor_type, &id);
    let request = daemon.request(format!("describe {name}"));
    let d = admin
        .describe_actor(pb::DescribeActorRequest {
            actor: actor_ref(&actor_type, &id),
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    match target.output {
        Output::Json => emit_json(&describe_json(&actor_type, &id, &d)),
        Output::Table => emit(&describe_table(&name, &d)),
    }
}

fn describe_json(ty: &str, id: &str, d: &pb::DescribeActorResponse) -> Value {
    let state: serde_json::Map<String, Value> = d
        .state
        .iter()
        .map(|e| (e.key.clone(), Shown::of(&e.value).json()))
        .collect();
    let dirty_keys: Vec<&str> = d
        .state
        .iter()
        .filter(|e| e.dirty)
        .map(|e| e.key.as_str())
        .collect();
    let timers: Vec<Value> = d
        .timers
        .iter()
        .map(|t| {
            let mut row = json!({
                "name": t.name,
                "period_ms": t.period_ms,
                "keep_alive": t.keep_alive,
            });
            if let Some(o) = row.as_object_mut() {
                render::time_json(o, "next_due", t.next_due_unix_ms);
            }
            row
        })
        .collect();
    let mut out = json!({
        "type": ty,
        "id": id,
        "node": d.node,
        "status": render::activation_status(d.status),
        "app": (!d.app.is_empty()).then_some(&d.app),
        "mailbox": d.mailbox_depth,
        "turns": d.turns,
        "dirty": d.dirty,
        "stored": d.stored,
        "inbox": d.inbox_depth,
        "inbox_retries": d.inbox_retries.iter().map(retry_json).collect::<Vec<_>>(),
        "dead_letters": d.dead_letters,
        "state_mode": render::state_mode(d.state_mode),
        "state": state,
        "dirty_keys": dirty_keys,
        "reminders": d.reminders.iter().map(reminders::row_json).collect::<Vec<_>>(),
        "alarm": d.alarm.as_ref().map(reminders::row_json),
        "timers": timers,
    });
    if let Some(o) = out.as_object_mut() {
        render::time_json(o, "activated", d.activated_unix_ms);
        render::time_json(o, "last_active", d.last_active_unix_ms);
        let retain = retention_mark(d);
        let held = retain.is_some_and(|r| r.paused);
        let erased = retain
            .filter(|r| !r.paused)
            .map_or(0, |r| r.next_due_unix_ms);
        render::time_json(o, "erased", erased);
        o.insert("erasure_held".into(), json!(held));
    }
    out
}

/// The `$retain` reminder of an actor whose type has a retention: when the
/// daemon erases it unless something reaches it first (docs/retention.md).
fn retention_mark(d: &pb::DescribeActorResponse) -> Option<&pb::Reminder> {
    d.reminders.iter().find(|r| r.name == RETAIN_NAME)
}

fn describe_table(name: &str, d: &pb::DescribeActorResponse) -> String {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    let mut fields = vec![
        ("actor", name.to_owned()),
        ("status", render::activation_status(d.status).to_owned()),
        ("node", or_dash(&d.node)),
        ("app", or_dash(&d.app)),
        ("activated", render::time_cell(d.activated_unix_ms)),
        ("last active", render::time_cell(d.last_active_unix_ms)),
        ("mailbox", d.mailbox_depth.to_string()),
        ("turns", d.turns.to_string()),
        ("state mode", render::state_mode(d.state_mode).to_owned()),
        ("dirty", render::yes_no(d.dirty).to_owned()),
        ("stored", render::yes_no(d.stored).to_owned()),
        ("inbox", inbox_cell(d)),
        ("dead letters", d.dead_letters.to_string()),
    ];
    if let Some(retain) = retention_mark(d) {
        fields.push((
            "erased",
            if retain.paused {
                "held: its $retain is paused".to_owned()
            } else {
                format!(
                    "{} unless reached before",
                    render::time_cell(retain.next_due_unix_ms)
                )
            },
        ));
    }
    let mut out = render::fields(&fields);

    // Only actors with trouble have retries: no empty section for the rest.
    if !d.inbox_retries.is_empty() {
        out.push_str("\nRETRIES\n");
        out.push_str(&retries_table(&d.inbox_retries));
    }

    out.push_str("\nSTATE\n");
    if d.state.is_empty() {
        out.push_str("(none)\n");
    } else {
        let mut t = Table::new(&[("KEY", false), ("DIRTY", false), ("VALUE", false)]);
        for e in &d.state {
            t.row(vec![
                e.key.clone(),
                // Only the changed keys are marked, so they stand out.
                if e.dirty { "*" } else { "" }.to_owned(),
                Shown::of(&e.value).text(),
            ]);
        }
        out.push_str(&t.render());
    }

    out.push_str("\nREMINDERS\n");
    let scheduled: Vec<pb::Reminder> = d.alarm.iter().chain(&d.reminders).cloned().collect();
    if scheduled.is_empty() {
        out.push_str("(none)\n");
    } else {
        out.push_str(&reminders::table(&scheduled, false));
    }

    out.push_str("\nTIMERS\n");
    if d.timers.is_empty() {
        out.push_str("(none)\n");
    } else {
        let mut t = Table::new(&[
            ("NAME", false),
            ("NEXT DUE", false),
            ("PERIOD", true),
            ("KEEP ALIVE", false),
        ]);
        for timer in &d.timers {
            t.row(vec![
                timer.name.clone(),
                render::time_cell(timer.next_due_unix_ms),
                render::duration_cell(timer.period_ms),
                render::yes_no(timer.keep_alive).to_owned(),
            ]);
        }
        out.push_str(&t.render());
    }
    out
}

/// The stored depth, and how many of its tells wait to be retried here.
fn inbox_cell(d: &pb::DescribeActorResponse) -> String {
    match d.inbox_retries.len() {
        0 => d.inbox_depth.to_string(),
        n => format!("{} ({n} retrying)", d.inbox_depth),
    }
}

fn retry_json(r: &pb::InboxRetry) -> Value {
    let mut row = json!({
        "seq": r.seq,
        "attempts": r.attempts,
        "max_attempts": r.max_attempts,
        "waiting": r.waiting,
        "last_error": r.last_error,
    });
    if let Some(o) = row.as_object_mut() {
        render::time_json(o, "next_attempt", r.next_attempt_unix_ms);
    }
    row
}

fn retries_table(retries: &[pb::InboxRetry]) -> String {
    let mut t = Table::new(&[
        ("SEQ", false),
        ("FAILED", true),
        ("NEXT ATTEMPT", false),
        ("LAST ERROR", false),
    ]);
    for r in retries {
        t.row(vec![
            r.seq.to_string(),
            format!("{} of {}", r.attempts, r.max_attempts),
            if r.waiting {
                render::time_cell(r.next_attempt_unix_ms)
            } else {
                "under way".to_owned()
            },
            r.last_error.clone(),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inactive_actor_reads_plainly() {
        let d = pb::DescribeActorResponse {
            actor: actor_ref("counter", "c1"),
            node: "n1".into(),
            status: pb::ActivationStatus::Inactive as i32,
            state: vec![pb::StateEntry {
                key: "count".into(),
                value: "5".into(),
                dirty: false,
            }],
            stored: true,
            ..Default::default()
        };
        let text = describe_table("counter/c1", &d);
        assert!(
            text.starts_with("actor         counter/c1\nstatus        INACTIVE\n"),
            "{text}"
        );
        assert!(text.contains("activated     -\n"), "{text}");
        assert!(
            text.contains("\nSTATE\nKEY    DIRTY  VALUE\ncount         5\n"),
            "{text}"
        );
        assert!(text.contains("\nTIMERS\n(none)\n"), "{text}");
        let json = describe_json("counter", "c1", &d);
        assert_eq!(json["state"], json!({"count": 5}));
        assert_eq!(json["activated_unix_ms"], Value::Null);
        assert_eq!(json["app"], Value::Null);
        assert_eq!(json["alarm"], Value::Null);
        assert_eq!(json["state_mode"], "WRITE_BEHIND");
        assert_eq!(json["inbox_retries"], json!([]));
        assert!(!text.contains("RETRIES"), "{text}");
    }

    #[test]
    fn the_retention_says_when_the_actor_is_erased_or_that_it_is_held() {
        let retain = |paused| pb::Reminder {
            actor: actor_ref("session", "s1"),
            name: RETAIN_NAME.into(),
            next_due_unix_ms: 1_795_244_602_217,
            paused,
            ..Default::default()
        };
        let mut d = pb::DescribeActorResponse {
            actor: actor_ref("session", "s1"),
            reminders: vec![retain(false)],
            ..Default::default()
        };
        let text = describe_table("session/s1", &d);
        assert!(
            text.contains("\nerased        2026-11-21T07:03:22.217Z unless reached before\n"),
            "{text}"
        );
        let json = describe_json("session", "s1", &d);
        assert_eq!(json["erased_unix_ms"], 1_795_244_602_217u64);
        assert_eq!(json["erasure_held"], false);

        d.reminders = vec![retain(true)];
        assert!(describe_table("session/s1", &d).contains("\nerased        held:"));
        let json = describe_json("session", "s1", &d);
        assert_eq!(json["erased_unix_ms"], Value::Null);
        assert_eq!(json["erasure_held"], true);

        d.reminders.clear();
        assert!(!describe_table("session/s1", &d).contains("erased"));
    }

    #[test]
    fn retries_show_beside_the_inbox() {
        let retry = |seq, attempts, waiting| pb::InboxRetry {
            seq,
            attempts,
            max_attempts: 3,
            next_attempt_unix_ms: 1_795_244_602_317,
            waiting,
            last_error: "actor raised ValueError: no".into(),
        };
        let d = pb::DescribeActorResponse {
            actor: actor_ref("log", "d"),
            status: pb::ActivationStatus::Idle as i32,
            inbox_depth: 3,
            inbox_retries: vec![retry(7, 1, true), retry(9, 2, false)],
            ..Default::default()
        };
        let text = describe_table("log/d", &d);
        assert!(text.contains("\ninbox         3 (2 retrying)\n"), "{text}");
        assert!(
            text.contains(
                "\nRETRIES\nSEQ  FAILED  NEXT ATTEMPT              LAST ERROR\n\
                 7    1 of 3  2026-11-21T07:03:22.317Z  actor raised ValueError: no\n\
                 9    2 of 3  under way                 actor raised ValueError: no\n"
            ),
            "{text}"
        );
        let json = describe_json("log", "d", &d);
        assert_eq!(
            json["inbox_retries"][0],
            json!({
                "seq": 7,
                "attempts": 1,
                "max_attempts": 3,
                "waiting": true,
                "last_error": "actor raised ValueError: no",
                "next_attempt": "2026-11-21T07:03:22.317Z",
                "next_attempt_unix_ms": 1_795_244_602_317u64,
            })
        );
    }
}
