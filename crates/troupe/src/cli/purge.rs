//! `troupe actors purge`: erasing everything stored for one actor (an
//! erasure request, a test actor gone wrong). Destructive and without an
//! undo, so it asks for `--yes`.

use serde_json::json;
use troupe_proto::v1 as pb;

use super::actors::actor_ref;
use super::{actor_name, connect, emit, emit_json, fail, Exit, Output, Target};

pub async fn actors_purge(
    target: &Target,
    actor_type: String,
    id: String,
    yes: bool,
) -> anyhow::Result<()> {
    let name = actor_name(&actor_type, &id);
    if !yes {
        return Err(fail(
            Exit::Usage,
            format!(
                "purging {name} erases its state, inbox, dead letters, call records, reminders \
                 and alarm for good (take a `troupe backup` first if you may want them); run \
                 again with --yes to purge it"
            ),
        ));
    }
    let daemon = connect(target).await?;
    let mut admin = daemon.admin();
    let request = daemon.request(format!("purge {name}"));
    let reply = admin
        .purge_actor(pb::PurgeActorRequest {
            actor: actor_ref(&actor_type, &id),
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    match target.output {
        Output::Json => emit_json(&json!({
            "type": actor_type,
            "id": id,
            "was_active": reply.was_active,
            "state_keys": reply.state_keys,
            "inbox_entries": reply.inbox_entries,
            "dead_letters": reply.dead_letters,
            "call_records": reply.call_records,
            "reminders": reply.reminders,
        })),
        Output::Table => emit(&format!("{}\n", summary(&name, &reply))),
    }
}

/// "purged counter/c1 (it was active): 2 state keys, 1 reminder".
fn summary(name: &str, reply: &pb::PurgeActorResponse) -> String {
    let counts = [
        (reply.state_keys, "state key", "state keys"),
        (reply.inbox_entries, "inbox entry", "inbox entries"),
        (reply.dead_letters, "dead letter", "dead letters"),
        (reply.call_records, "call record", "call records"),
        (reply.reminders, "reminder", "reminders"),
    ];
    let removed: Vec<String> = counts
        .iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many }))
        .collect();
    let active = if reply.was_active {
        " (it was active: its app saw a deactivation)"
    } else {
        ""
    };
    if removed.is_empty() {
        format!("purged {name}{active}: nothing was stored for it")
    } else {
        format!("purged {name}{active}: {}", removed.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_what_went() {
        let reply = pb::PurgeActorResponse {
            was_active: true,
            state_keys: 2,
            reminders: 1,
            ..Default::default()
        };
        assert_eq!(
            summary("counter/c1", &reply),
            "purged counter/c1 (it was active: its app saw a deactivation): 2 state keys, 1 \
             reminder"
        );
        assert_eq!(
            summary("counter/c2", &pb::PurgeActorResponse::default()),
            "purged counter/c2: nothing was stored for it"
        );
    }
}
