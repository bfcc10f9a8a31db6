//! Watching a whole type with the real daemon and app: a type watcher gets
//! every actor's events, each named with its actor and in that actor's
//! turn order; it resumes after its cursor; a bad cursor or a type nobody
//! hosts is refused; one of an id prefix gets only those actors' events;
//! and the CLI prints a type's events with their actors, through a daemon's
//! restart with `--reconnect`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::Code;
use troupe_proto::v1 as pb;
use troupe_tests::{
    cli_against, daemon_with_app, event_actor, event_text, next_event, troupe_bin, type_spec,
    within, Events, TestApp,
};

const WAIT: Duration = Duration::from_secs(20);

/// The next `count` events, as (actor, text), failing on a gap.
async fn take(events: &mut Events, count: usize) -> anyhow::Result<Vec<pb::ActorEvent>> {
    let mut seen = Vec::new();
    for _ in 0..count {
        let event = next_event(events, WAIT).await?;
        anyhow::ensure!(!event.missed_before, "{event:?}");
        seen.push(event);
    }
    Ok(seen)
}

fn by_actor(events: &[pb::ActorEvent]) -> BTreeMap<String, Vec<String>> {
    let mut by = BTreeMap::<String, Vec<String>>::new();
    for event in events {
        by.entry(event_actor(event))
            .or_default()
            .push(event_text(event));
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_watcher_gets_every_actors_events_each_in_its_order() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut events = client.watch_type("counter", "").await?;
    client.incr_publish("counter", "c1", 1).await?;
    client.incr_publish("counter", "c2", 5).await?;
    client.incr_publish("counter", "c1", 1).await?;
    let seen = take(&mut events, 6).await?;
    let expected = BTreeMap::from([
        (
            "c1".to_owned(),
            vec![
                "1".to_owned(),
                r#"{"after":1}"#.to_owned(),
                "2".to_owned(),
                r#"{"after":2}"#.to_owned(),
            ],
        ),
        (
            "c2".to_owned(),
            vec!["5".to_owned(), r#"{"after":5}"#.to_owned()],
        ),
    ]);
    assert_eq!(by_actor(&seen), expected);
    assert!(seen
        .iter()
        .all(|e| e.actor.as_ref().is_some_and(|a| a.r#type == "counter")));

    // A one-actor watch names its actor too.
    let mut alone = client.watch_counter("c2", "").await?;
    client.incr_publish("counter", "c2", 1).await?;
    assert_eq!(event_actor(&next_event(&mut alone, WAIT).await?), "c2");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_watch_resumes_after_its_cursor() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut events = client.watch_type("counter", "").await?;
    client.incr_publish("counter", "c1", 1).await?;
    let first = take(&mut events, 1).await?.remove(0);
    drop(events);
    // Published while nobody watches: held for the watcher's return.
    client.incr_publish("counter", "c2", 3).await?;

    let mut resumed = client.watch_type("counter", &first.cursor).await?;
    let seen = take(&mut resumed, 3).await?;
    let expected = BTreeMap::from([
        ("c1".to_owned(), vec![r#"{"after":1}"#.to_owned()]),
        (
            "c2".to_owned(),
            vec!["3".to_owned(), r#"{"after":3}"#.to_owned()],
        ),
    ]);
    assert_eq!(by_actor(&seen), expected);

    for bad in ["zz", "0123456789abcdef-1.zz"] {
        let refused = client.watch_type("counter", bad).await.map(|_| ());
        assert_eq!(
            refused.map_err(|s| s.code()),
            Err(Code::InvalidArgument),
            "{bad}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_watch_of_a_type_nobody_hosts_is_refused() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&["--host-wait", "0s"], vec![type_spec("counter")]).await?;
    let refused = client.watch_type("countr", "").await.map(|_| ());
    let status = refused
        .err()
        .ok_or_else(|| anyhow::anyhow!("watched a type nobody hosts"))?;
    assert_eq!(status.code(), Code::NotFound, "{status}");
    assert!(status.message().contains("counter"), "{status}");
    let empty = client.watch_type("", "").await.map(|_| ());
    assert_eq!(empty.map_err(|s| s.code()), Err(Code::InvalidArgument));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_a_types_events_with_their_actors() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut events = client.watch_type("counter", "").await?;
    client.incr_publish("counter", "c1", 1).await?;
    client.incr_publish("counter", "c2", 2).await?;
    let seen = take(&mut events, 1).await?;
    let after = seen[0].cursor.clone();
    let args = [
        "actors", "watch", "counter", "--after", &after, "--count", "3", "-o", "json",
    ];
    let (out, err) = cli_against(&daemon, &args, 0).await?;
    assert!(err.contains("watching every counter"), "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 3, "{out}");
    let actors: Vec<&str> = lines.iter().filter_map(|l| l["actor"].as_str()).collect();
    assert_eq!(actors.iter().filter(|a| **a == "c1").count(), 1, "{out}");
    assert_eq!(actors.iter().filter(|a| **a == "c2").count(), 2, "{out}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_watch_of_an_id_prefix_gets_only_those_actors_events() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut tenant = client.watch_type_ids("counter", "t1/", "").await?;
    client.incr_publish("counter", "t1/a", 1).await?;
    client.incr_publish("counter", "t2/b", 5).await?;
    client.incr_publish("counter", "t1/c", 2).await?;
    let seen = take(&mut tenant, 4).await?;
    let expected = BTreeMap::from([
        (
            "t1/a".to_owned(),
            vec!["1".to_owned(), r#"{"after":1}"#.to_owned()],
        ),
        (
            "t1/c".to_owned(),
            vec!["2".to_owned(), r#"{"after":2}"#.to_owned()],
        ),
    ]);
    assert_eq!(by_actor(&seen), expected);
    drop(tenant);

    // Resuming keeps to the prefix: t2's event after the cursor is not sent.
    let first = seen[0].cursor.clone();
    let mut resumed = client.watch_type_ids("counter", "t1/", &first).await?;
    let again = take(&mut resumed, 3).await?;
    assert!(
        again.iter().all(|e| event_actor(e).starts_with("t1/")),
        "{again:?}"
    );

    // The CLI's --id-prefix, from the same cursor.
    let args = [
        "actors",
        "watch",
        "counter",
        "--id-prefix",
        "t1/",
        "--after",
        &first,
        "--count",
        "3",
        "-o",
        "json",
    ];
    let (out, err) = cli_against(&daemon, &args, 0).await?;
    assert!(
        err.contains(r#"watching every counter whose id starts with "t1/""#),
        "{err}"
    );
    let actors: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).map(|v| v["actor"].to_string()))
        .collect::<Result<_, _>>()?;
    assert_eq!(actors.len(), 3, "{out}");
    assert!(actors.iter().all(|a| a.starts_with(r#""t1/"#)), "{out}");

    let long = "p".repeat(257);
    let refused = client
        .watch_type_ids("counter", &long, "")
        .await
        .map(|_| ());
    assert_eq!(refused.map_err(|s| s.code()), Err(Code::InvalidArgument));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_watch_with_reconnect_outlives_a_daemon_restart() -> anyhow::Result<()> {
    // The restarted daemon waits for the app to come back rather than refuse
    // the type, for longer than the test takes.
    let args = ["--host-wait", "120s"];
    let (_dir, mut daemon, app, mut client) =
        daemon_with_app(&args, vec![type_spec("counter")]).await?;
    let mut events = client.watch_type("counter", "").await?;
    client.incr_publish("counter", "r1", 1).await?;
    let before = take(&mut events, 1).await?.remove(0);
    let addr = daemon.addr.to_string();
    let mut watch = tokio::process::Command::new(troupe_bin())
        .args(["actors", "watch", "counter", "--reconnect", "--count", "3"])
        .args(["--after", &before.cursor, "-o", "json", "--addr", &addr])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = watch.stdout.take().context("the watch's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut next_line = async || -> anyhow::Result<serde_json::Value> {
        let line = within(WAIT, "the CLI's next event", lines.next_line()).await??;
        Ok(serde_json::from_str(
            &line.context("the CLI's output ended")?,
        )?)
    };
    // The event after the cursor, held for it: the CLI is watching.
    assert_eq!(next_line().await?["value"], serde_json::json!({"after": 1}));

    drop(events);
    drop(app);
    daemon.restart(&args).await?;
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    // A watch of the type opened before the next publish makes the new daemon
    // hold the type's events, whenever the CLI's re-open comes.
    let mut events = client.watch_type("counter", "").await?;
    client.incr_publish("counter", "r2", 5).await?;
    take(&mut events, 2).await?;
    let after = next_line().await?;
    assert_eq!(
        (&after["actor"], &after["value"], &after["missed_before"]),
        (
            &serde_json::json!("r2"),
            &serde_json::json!(5),
            &serde_json::json!(true)
        ),
        "the restarted daemon's stream is another: events may be missing before it"
    );
    assert_eq!(next_line().await?["value"], serde_json::json!({"after": 5}));
    let output = within(WAIT, "the CLI to exit", watch.wait_with_output()).await??;
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{err}");
    assert!(err.contains("watching every counter again"), "{err}");
    Ok(())
}
