//! Actor events with the real daemon and app: a watcher gets what turns
//! publish, in order, and only from turns that succeeded; it resumes after
//! a cursor; a cursor of another epoch, or one it fell too far behind,
//! says events were missed; watching does not activate the actor; and a
//! watch ends when the daemon shuts down.

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic::Code;
use troupe_proto::v1 as pb;
use troupe_tests::{daemon_with_app, event_text, next_event, type_spec, Client, Events};

const WAIT: Duration = Duration::from_secs(20);

async fn watch(client: &mut Client, id: &str, after: &str) -> Result<Events, tonic::Status> {
    client.watch_counter(id, after).await
}

async fn next(events: &mut Events) -> anyhow::Result<pb::ActorEvent> {
    next_event(events, WAIT).await
}

fn text(event: &pb::ActorEvent) -> String {
    event_text(event)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_gets_each_succeeding_turn_s_events_in_order_and_no_others() -> anyhow::Result<()>
{
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut events = watch(&mut client, "c1", "").await?;
    client.incr_publish("counter", "c1", 1).await?;
    // A failed turn's events go with its changes.
    let failed = client
        .invoke_raw("counter", "c1", "publish_fail", "{}")
        .await;
    assert_eq!(failed.map(|_| ()).map_err(|s| s.code()), Err(Code::Unknown));
    // So does the turn of one event too many; the app stays.
    let too_many = client
        .invoke_raw("counter", "c1", "publish_many", "{}")
        .await;
    assert_eq!(
        too_many.map(|_| ()).map_err(|s| s.code()),
        Err(Code::InvalidArgument)
    );
    client.incr_publish("counter", "c1", 2).await?;

    let mut seen = Vec::new();
    let mut cursors = Vec::new();
    for _ in 0..4 {
        let event = next(&mut events).await?;
        assert!(!event.missed_before, "{event:?}");
        assert!(event.published_unix_ms > 0);
        cursors.push(event.cursor.clone());
        seen.push(text(&event));
    }
    assert_eq!(seen, ["1", r#"{"after":1}"#, "3", r#"{"after":3}"#]);
    let numbers: Vec<u64> = cursors
        .iter()
        .filter_map(|c| c.rsplit_once('-')?.1.parse().ok())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 4], "{cursors:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_after_its_cursor_and_a_strange_epoch_is_told() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut events = watch(&mut client, "c1", "").await?;
    client.incr_publish("counter", "c1", 1).await?;
    let first = next(&mut events).await?;
    drop(events);
    // Published while nobody watches: held for the watcher's return.
    client.incr_publish("counter", "c1", 1).await?;

    let mut resumed = watch(&mut client, "c1", &first.cursor).await?;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = next(&mut resumed).await?;
        assert!(!event.missed_before, "{event:?}");
        seen.push(text(&event));
    }
    assert_eq!(seen, [r#"{"after":1}"#, "2", r#"{"after":2}"#]);

    // Another epoch's cursor cannot say what it missed.
    let (epoch, _) = first.cursor.split_once('-').unwrap_or_default();
    let other = format!("{:016x}-1", u64::from_str_radix(epoch, 16)? ^ 1);
    let mut strange = watch(&mut client, "c1", &other).await?;
    let event = next(&mut strange).await?;
    assert!(event.missed_before, "{event:?}");

    let bad = watch(&mut client, "c1", "zz").await.map(|_| ());
    assert_eq!(bad.map_err(|s| s.code()), Err(Code::InvalidArgument));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_a_type_nobody_hosts_is_refused() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&["--host-wait", "0s"], vec![type_spec("counter")]).await?;
    let request = pb::WatchRequest {
        actor: Some(troupe_tests::actor("countr", "c1")),
        after: String::new(),
    };
    let refused = client.0.watch(request).await.map(|_| ());
    let status = refused
        .err()
        .ok_or_else(|| anyhow::anyhow!("watched a type nobody hosts"))?;
    assert_eq!(status.code(), Code::NotFound, "{status}");
    assert!(status.message().contains("counter"), "{status}");
    Ok(())
}

/// ... and the daemon counts it (`troupe_watch_gaps_total`), beside the
/// events published and the bytes it holds for watchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_behind_is_told_what_it_missed() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(
        &["--metrics-listen", "127.0.0.1:0"],
        vec![type_spec("counter")],
    )
    .await?;
    let metrics = troupe_tests::scrape::metrics_addr(&daemon.log())
        .ok_or_else(|| anyhow::anyhow!("no metrics address in the log"))?;
    let counter = [("actor_type", "counter")];
    let mut events = watch(&mut client, "c1", "").await?;
    let cursor = {
        client.incr_publish("counter", "c1", 1).await?;
        next(&mut events).await?.cursor
    };
    drop(events);
    // 2 events per turn: more than the 256 the owner holds.
    let turns = 256 / 2 + 1;
    for _ in 0..turns {
        client.incr_publish("counter", "c1", 1).await?;
    }
    let scraped = troupe_tests::scrape::scrape(metrics).await?;
    assert_eq!(scraped.sum("troupe_watch_gaps_total", &counter), 0.0);
    let mut resumed = watch(&mut client, "c1", &cursor).await?;
    let event = next(&mut resumed).await?;
    assert!(event.missed_before, "{event:?}");

    let scraped = troupe_tests::scrape::scrape(metrics).await?;
    let published = f64::from(2 * (1 + turns));
    assert_eq!(
        scraped.sum("troupe_events_published_total", &counter),
        published,
        "{}",
        scraped.text
    );
    assert_eq!(scraped.sum("troupe_watch_gaps_total", &counter), 1.0);
    // The 256 newest are held, a few bytes each.
    let held = scraped.sum("troupe_events_held_bytes", &[]);
    assert!((256.0..=256.0 * 64.0).contains(&held), "{held}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_does_not_activate_and_a_shutdown_ends_the_watch() -> anyhow::Result<()> {
    let (_dir, mut daemon, _app, mut client) = daemon_with_app(
        &["--metrics-listen", "127.0.0.1:0"],
        vec![type_spec("counter")],
    )
    .await?;
    let mut events = watch(&mut client, "quiet", "").await?;
    let (listed, _) =
        troupe_tests::cli_against(&daemon, &["actors", "list", "-o", "json"], 0).await?;
    assert!(!listed.contains("quiet"), "{listed}");
    let metrics = troupe_tests::scrape::metrics_addr(&daemon.log())
        .ok_or_else(|| anyhow::anyhow!("no metrics address in the log"))?;
    let scraped = troupe_tests::scrape::scrape(metrics).await?;
    assert_eq!(
        scraped.sum("troupe_watched_actors", &[]),
        1.0,
        "{}",
        scraped.text
    );
    let (status, _) = troupe_tests::cli_against(&daemon, &["status", "-o", "json"], 0).await?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    assert_eq!(status["events"]["watched"], 1, "{status}");
    assert_eq!(status["events"]["max_held_bytes"], 64 << 20, "{status}");
    let (table, _) = troupe_tests::cli_against(&daemon, &["status"], 0).await?;
    assert!(
        table.contains("1 of at most 65536 actors and types watched"),
        "{table}"
    );

    daemon.terminate().await?;
    // The watch ended as the daemon began to stop, so the server closed
    // without waiting out its time for open streams.
    let log = daemon.log();
    assert!(!log.contains("did not close its connections"), "{log}");
    match tokio::time::timeout(WAIT, events.next()).await {
        Ok(Some(Err(status))) => assert_eq!(status.code(), Code::Unavailable, "{status}"),
        Ok(Some(Ok(event))) => anyhow::bail!("an event from nowhere: {event:?}"),
        Ok(None) => {}
        Err(_) => anyhow::bail!("the watch outlived the daemon"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_the_events_after_a_cursor() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut events = watch(&mut client, "c1", "").await?;
    client.incr_publish("counter", "c1", 1).await?;
    let first = next(&mut events).await?;
    client.incr_publish("counter", "c1", 1).await?;

    let watch_after = |output: &'static str, after: String| {
        let daemon = &daemon;
        async move {
            let args = [
                "actors", "watch", "counter", "c1", "--after", &after, "--count", "2", "-o", output,
            ];
            troupe_tests::cli_against(daemon, &args, 0).await
        }
    };
    let (json, err) = watch_after("json", first.cursor.clone()).await?;
    assert!(err.contains("watching counter/c1"), "{err}");
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 2, "{json}");
    assert_eq!(lines[0]["value"], serde_json::json!({"after": 1}));
    assert_eq!(lines[1]["value"], serde_json::json!(2));
    assert_eq!(lines[1]["missed_before"], serde_json::json!(false));
    assert!(lines[1]["published_unix_ms"].as_u64().is_some(), "{json}");

    let (epoch, _) = first.cursor.split_once('-').unwrap_or_default();
    let other = format!("{:016x}-1", u64::from_str_radix(epoch, 16)? ^ 1);
    let (table, _) = watch_after("table", other).await?;
    assert!(table.starts_with("(events may be missing here)"), "{table}");
    Ok(())
}
