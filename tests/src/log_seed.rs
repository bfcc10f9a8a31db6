//! One of everything a store keeps for an actor, put there through a real
//! daemon hosting `log_app`: for tests of what moves or goes with an actor
//! (`troupe actors purge`, `troupe store copy`).

use anyhow::Context;
use serde_json::Value;

use crate::log_app::{log_of, tell_durable, LogApp, LOG_TYPE};
use crate::{actor, cli_against, pb, poll_until, Client, Daemon, WAIT};

/// The CLI's `-o json` output against `daemon`.
pub async fn json_of(daemon: &Daemon, args: &[&str]) -> anyhow::Result<Value> {
    let (out, _) = cli_against(daemon, &[args, &["-o", "json"]].concat(), 0).await?;
    serde_json::from_str(&out).with_context(|| out.clone())
}

/// The stored log of `LOG_TYPE/id`.
pub async fn stored_log(client: &mut Client, id: &str) -> anyhow::Result<Vec<i64>> {
    let state = client
        .0
        .get_state(pb::GetStateRequest {
            actor: Some(actor(LOG_TYPE, id)),
            keys: Vec::new(),
        })
        .await?
        .into_inner();
    log_of(&state.entries)
}

/// Stores for log/p state `[1]`, the call record of key "order-1", a dead
/// letter (method "flaky"), the reminder "nightly" and the alarm; for log/q
/// state `[5]` beside it.
pub async fn seed(daemon: &Daemon, app: &LogApp) -> anyhow::Result<()> {
    let mut client = daemon.client().await?;
    keyed_call(&mut client).await?;
    client
        .invoke(LOG_TYPE, "q", "append", r#"{"kwargs": {"n": 5}}"#)
        .await?;
    app.set_failing(true);
    tell_durable(&mut client, LOG_TYPE, "p", "flaky", 9).await?;
    poll_until(WAIT, "a dead letter of log/p", || async move {
        let letters = json_of(daemon, &["dead-letters", "list"]).await?;
        Ok(letters
            .as_array()
            .is_some_and(|l| !l.is_empty())
            .then_some(()))
    })
    .await?;
    app.set_failing(false);
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor(LOG_TYPE, "p")),
            name: "nightly".into(),
            due: "1h".into(),
            ..Default::default()
        })
        .await?;
    client
        .0
        .set_alarm(pb::SetAlarmRequest {
            actor: Some(actor(LOG_TYPE, "p")),
            at: "2h".into(),
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// The keyed call [`seed`] makes (log/p appends 1 under key "order-1"),
/// for a test to send again: answered from its record while that is
/// stored, run again once it is gone.
pub async fn keyed_call(client: &mut Client) -> anyhow::Result<()> {
    client
        .invoke_keyed(
            LOG_TYPE,
            "p",
            "append",
            r#"{"kwargs": {"n": 1}}"#,
            "order-1",
        )
        .await?;
    Ok(())
}
