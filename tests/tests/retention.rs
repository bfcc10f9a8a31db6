//! A type's retention with the real daemon and app, on the test clock: the
//! app asks for it as it registers, the CLI lists the `$retain` reminder an
//! actor waits as, an actor nothing reached for the retention is erased and
//! starts afresh when called again, and one whose `$retain` an operator
//! paused is kept.

use troupe_proto::v1 as pb;
use troupe_tests::{
    actor, cli_against, daemon_with_app, poll_until, type_spec, Client, Daemon, TestApp, WAIT,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_actor_past_its_types_retention_is_erased() -> anyhow::Result<()> {
    let spec = pb::ActorTypeSpec {
        retention_ms: 3_600_000,
        ..type_spec("counter")
    };
    let (_dir, daemon, _app, mut client) = daemon_with_app(&["--test-clock"], vec![spec]).await?;
    let (status, _) = cli_against(&daemon, &["status", "-o", "json"], 0).await?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    assert_eq!(status["types"][0]["retention_ms"], 3_600_000, "{status}");
    assert_eq!(client.incr("counter", "c1", 5).await?, 5);
    cli_against(&daemon, &["actors", "deactivate", "counter", "c1"], 0).await?;
    // An operator holds c2 past the retention.
    assert_eq!(client.incr("counter", "c2", 7).await?, 7);
    cli_against(&daemon, &["actors", "deactivate", "counter", "c2"], 0).await?;
    let hold = ["reminders", "pause", "counter", "c2", "$retain"];
    cli_against(&daemon, &hold, 0).await?;

    // Admin deactivation returns once the activation's end is marked.
    assert!(retain_mark(&mut client, "c1").await?.contains("idle"));
    let (listed, _) = cli_against(&daemon, &["reminders", "list", "--type", "counter"], 0).await?;
    assert!(listed.contains("$retain"), "{listed}");
    let (c1, _) = cli_against(&daemon, &["actors", "get", "counter", "c1"], 0).await?;
    assert!(c1.contains("unless reached before"), "{c1}");
    let (c2, _) = cli_against(&daemon, &["actors", "get", "counter", "c2"], 0).await?;
    assert!(c2.contains("held: its $retain is paused"), "{c2}");

    daemon.advance_clock("59m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, Some(5));
    daemon.advance_clock("2m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, None);
    assert_eq!(client.stored_count("counter", "c2").await?, Some(7));
    let (listed, _) = cli_against(
        &daemon,
        &["reminders", "list", "--type", "counter", "--id", "c1"],
        0,
    )
    .await?;
    assert!(!listed.contains("$retain"), "{listed}");

    assert_eq!(client.incr("counter", "c1", 1).await?, 1);
    Ok(())
}

/// An operator's hold (a paused `$retain`) outlives "pause every
/// reminder of the type" and "resume them all": `--all` leaves the daemon's
/// own reminders alone unless `--name` names them. Before, the resume lifted
/// the hold and the next hour erased the actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_outlives_pausing_and_resuming_every_reminder() -> anyhow::Result<()> {
    let spec = pb::ActorTypeSpec {
        retention_ms: 3_600_000,
        ..type_spec("counter")
    };
    let (_dir, daemon, _app, mut client) = daemon_with_app(&["--test-clock"], vec![spec]).await?;
    assert_eq!(client.incr("counter", "c2", 7).await?, 7);
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "c2")),
            name: "audit".into(),
            due: "1d".into(),
            payload: Some(troupe_tests::json_payload("{}")),
            ..Default::default()
        })
        .await?;
    cli_against(&daemon, &["actors", "deactivate", "counter", "c2"], 0).await?;
    let hold = ["reminders", "pause", "counter", "c2", "$retain"];
    cli_against(&daemon, &hold, 0).await?;

    let all = |verb: &'static str| {
        let daemon = &daemon;
        async move {
            let args = ["reminders", verb, "--all", "--type", "counter"];
            Ok::<_, anyhow::Error>(cli_against(daemon, &args, 0).await?.0)
        }
    };
    let paused = all("pause").await?;
    assert!(
        paused.contains("paused 1 of 1 reminder of type counter"),
        "{paused}"
    );
    let resumed = all("resume").await?;
    assert!(
        resumed.contains("resumed 1 of 1 reminder of type counter"),
        "{resumed}"
    );
    assert!(reminder(&mut client, "c2", "$retain").await?.paused);
    assert!(!reminder(&mut client, "c2", "audit").await?.paused);

    daemon.advance_clock("2h").await?;
    assert_eq!(client.stored_count("counter", "c2").await?, Some(7));

    // Named, the daemon's own are changed too: every hold of the type lifted.
    let lift = [
        "reminders",
        "resume",
        "--all",
        "--type",
        "counter",
        "--name",
        "$retain",
    ];
    let (lifted, _) = cli_against(&daemon, &lift, 0).await?;
    assert!(lifted.contains("resumed 1 of 1"), "{lifted}");
    daemon.advance_clock("0s").await?;
    assert_eq!(client.stored_count("counter", "c2").await?, None);
    Ok(())
}

async fn reminder(client: &mut Client, id: &str, name: &str) -> anyhow::Result<pb::Reminder> {
    let found = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", id)),
            name: name.into(),
        })
        .await?;
    Ok(found.into_inner())
}

/// A `kill -9` leaves the mark of the activation's start: the restarted
/// daemon keeps the actor a retention more, then erases it. Its state
/// reached the store before the kill (a durable type), so a crash that
/// erased it would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_the_actor_is_kept_a_retention_more() -> anyhow::Result<()> {
    let spec = || pb::ActorTypeSpec {
        retention_ms: 3_600_000,
        state_mode: pb::StateMode::Durable as i32,
        ..type_spec("counter")
    };
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &["--test-clock"]).await?;
    let app = TestApp::attach(daemon.addr, vec![spec()]).await?;
    let mut client = daemon.client().await?;
    assert_eq!(client.incr("counter", "c1", 5).await?, 5);
    poll_until(WAIT, "the mark of the activation's start", || {
        let mut client = client.clone();
        async move {
            Ok(retain_mark(&mut client, "c1")
                .await?
                .contains("active")
                .then_some(()))
        }
    })
    .await?;
    daemon.kill9().await?;
    drop(app);

    let daemon = Daemon::start(dir.path(), &["--test-clock"]).await?;
    let _app = TestApp::attach(daemon.addr, vec![spec()]).await?;
    let mut client = daemon.client().await?;
    daemon.advance_clock("61m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, Some(5));
    assert!(retain_mark(&mut client, "c1").await?.contains("idle"));
    daemon.advance_clock("61m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, None);
    Ok(())
}

/// The data of the actor's `$retain` reminder, as text.
async fn retain_mark(client: &mut Client, id: &str) -> anyhow::Result<String> {
    let mark = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", id)),
            name: "$retain".into(),
        })
        .await?
        .into_inner();
    let data = mark.payload.map(|p| p.data).unwrap_or_default();
    Ok(String::from_utf8_lossy(&data).into_owned())
}
