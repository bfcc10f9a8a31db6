//! Actor events in a cluster (PostgreSQL): a watch through a daemon that
//! does not own the actor gets its events over the link, and when the
//! owner leaves, the watch follows the actor to its new owner and says
//! that events may have been missed in between. A watch of the whole type
//! gets every daemon's actors' events (or those of an id prefix), resumes
//! through another daemon after its cursor, and polls a daemon that joins
//! (saying events may be missing only when they may: not for a daemon that
//! had published none, but when one crashes); opened right after start
//! before any daemon hosts the type, it waits for the first.

use std::time::Duration;

use anyhow::Context;
use tokio_stream::StreamExt;
use troupe_tests::cluster_fixture::*;
use troupe_tests::cluster_harness::Member;
use troupe_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_through_another_daemon_follows_the_actor_when_its_owner_leaves(
) -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_watch_through_another_daemon_follows_the_actor_when_its_owner_leaves",
        2,
    )
    .await?
    else {
        return Ok(());
    };
    let mut via_d2 = fx.member("d2")?.client.clone();
    let id = fx.counter_owned_by("d1", "d2", "w", 40).await?;
    let mut events = via_d2.watch_counter(&id, "").await?;
    let first = publish_then_next(&fx, &mut via_d2, &mut events, ("counter", &id), 1)
        .await
        .context("the first event, over the link")?;
    assert_eq!(
        (event_text(&first), first.missed_before),
        ("1".into(), false)
    );
    assert_eq!(
        event_text(&next_event(&mut events, WAIT).await?),
        r#"{"after":1}"#
    );

    // d1 leaves: d2 takes the actor over, and the watch goes with it.
    let mut d1 = fx.forget("d1").context("no d1")?;
    let status = d1.daemon.terminate().await?;
    anyhow::ensure!(status.success(), "d1 did not stop cleanly: {status:?}");
    // Until the watch reaches d2, d2 holds no events for the actor: what
    // it publishes meanwhile is gone, which the watch is told.
    let mut moved = None;
    for _ in 0..30 {
        let _ = via_d2.incr_publish("counter", &id, 1).await;
        match tokio::time::timeout(Duration::from_secs(1), events.next()).await {
            Ok(Some(Ok(event))) => {
                moved = Some(event);
                break;
            }
            Ok(Some(Err(status))) => anyhow::bail!("the watch failed: {status}\n{}", fx.logs()),
            Ok(None) => anyhow::bail!("the watch ended\n{}", fx.logs()),
            Err(_) => {}
        }
    }
    let moved = moved.with_context(|| format!("no event from d2\n{}", fx.logs()))?;
    let count: i64 = event_text(&moved).parse()?;
    assert!(count >= 2, "the count came from the shared store: {count}");
    assert!(
        moved.missed_before,
        "a new owner cannot know what the watch missed: {moved:?}"
    );
    assert!(!next_event(&mut events, WAIT).await?.missed_before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_type_watch_through_one_daemon_gets_the_events_of_every_daemons_actors(
) -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_type_watch_through_one_daemon_gets_the_events_of_every_daemons_actors",
        2,
    )
    .await?
    else {
        return Ok(());
    };
    let mut via_d2 = fx.member("d2")?.client.clone();
    // No daemon hosts "": the name is wrong, which is what the caller hears.
    let empty = via_d2.watch_type("", "").await.map(|_| ());
    assert_eq!(
        empty.map_err(|s| s.code()),
        Err(tonic::Code::InvalidArgument)
    );
    let on_d1 = fx.counter_owned_by("d1", "d2", "t1-", 40).await?;
    let on_d2 = fx.counter_owned_by("d2", "d2", "t2-", 40).await?;
    let mut events = via_d2
        .watch_type("counter", "")
        .await
        .with_context(|| fx.logs())?;
    for id in [&on_d1, &on_d2] {
        via_d2
            .incr_publish("counter", id, 1)
            .await
            .with_context(|| fx.logs())?;
    }
    let mut seen = std::collections::BTreeMap::<String, Vec<String>>::new();
    for _ in 0..4 {
        let event = next_event(&mut events, WAIT)
            .await
            .with_context(|| fx.logs())?;
        assert!(!event.missed_before, "{event:?}");
        seen.entry(event_actor(&event))
            .or_default()
            .push(event_text(&event));
    }
    let each = vec!["1".to_owned(), r#"{"after":1}"#.to_owned()];
    assert_eq!(
        seen,
        std::collections::BTreeMap::from([(on_d1.clone(), each.clone()), (on_d2, each)]),
        "d1's actor's events come over the link"
    );
    // The cursor names both daemons' streams: resuming through d1 gets
    // what came after it, from both.
    let last = publish_then_next(&fx, &mut via_d2, &mut events, ("counter", &on_d1), 1).await?;
    assert_eq!(last.cursor.split('.').count(), 2, "{}", last.cursor);
    let mut via_d1 = fx.member("d1")?.client.clone();
    let mut resumed = via_d1.watch_type("counter", &last.cursor).await?;
    let next = next_event(&mut resumed, WAIT).await?;
    assert_eq!(
        (event_actor(&next), event_text(&next), next.missed_before),
        (on_d1.clone(), r#"{"after":2}"#.to_owned(), false)
    );

    // An id prefix crosses the link: d1 leaves out its other actors' events.
    let other_on_d1 = fx.counter_owned_by("d1", "d2", "x1-", 40).await?;
    let mut t1_only = via_d2.watch_type_ids("counter", "t1-", "").await?;
    for id in [&other_on_d1, &on_d1] {
        via_d2
            .incr_publish("counter", id, 1)
            .await
            .with_context(|| fx.logs())?;
    }
    let first = next_event(&mut t1_only, WAIT).await?;
    assert_eq!(event_actor(&first), on_d1, "{first:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_type_watch_polls_a_daemon_that_joins_the_cluster_and_hears_when_one_is_lost(
) -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_type_watch_polls_a_daemon_that_joins_the_cluster_and_hears_when_one_is_lost",
        1,
    )
    .await?
    else {
        return Ok(());
    };
    // The watch goes to d2, whose /metrics counts the gaps it tells.
    let metrics = ["--metrics-listen", "127.0.0.1:0", "--metrics-plain-http"];
    fx.add_with("d2", vec![durable("counter")], &metrics)
        .await?;
    fx.settle().await.with_context(|| fx.logs())?;
    let on_d1 = fx.counter_owned_by("d1", "d2", "k-", 40).await?;
    let scrape_d2 = troupe_tests::scrape::metrics_addr(&fx.member("d2")?.daemon.log())
        .context("no metrics address in d2's log")?;
    let gaps = |scraped: &troupe_tests::scrape::Scrape| {
        scraped.sum("troupe_watch_gaps_total", &[("actor_type", "counter")])
    };
    let mut via_d2 = fx.member("d2")?.client.clone();
    let mut events = via_d2
        .watch_type("counter", "")
        .await
        .with_context(|| fx.logs())?;
    fx.add("d3").await?;
    fx.settle().await.with_context(|| fx.logs())?;
    // The watch's first poll of d3 makes d3 hold the type's events.
    until_holding_events(fx.member("d3")?)
        .await
        .with_context(|| fx.logs())?;
    let on_d3 = fx.counter_owned_by("d3", "d2", "j-", 60).await?;
    let event = publish_then_next(&fx, &mut via_d2, &mut events, ("counter", &on_d3), 1).await?;
    assert_eq!(
        (event_actor(&event), event_text(&event)),
        (on_d3, "1".to_owned())
    );
    // d3 had published nothing of the type before the watch first polled
    // it, so the watch missed nothing.
    assert!(!event.missed_before, "{event:?}");
    assert!(!next_event(&mut events, WAIT).await?.missed_before);
    assert_eq!(gaps(&troupe_tests::scrape::scrape(scrape_d2).await?), 0.0);

    // d3 crashes: what it held and the watch had not fetched is gone, which
    // the watch says once the cluster has let d3 go.
    let mut d3 = fx.forget("d3").context("no d3")?;
    d3.daemon.kill9().await?;
    fx.settle().await.with_context(|| fx.logs())?;
    // d1 then stops polling d3, after one more failed poll: probe at a
    // pace until an event says so.
    for _ in 0..60 {
        let event =
            publish_then_next(&fx, &mut via_d2, &mut events, ("counter", &on_d1), 1).await?;
        assert_eq!(event_actor(&event), on_d1);
        if event.missed_before {
            // Counted where the watch went.
            assert_eq!(gaps(&troupe_tests::scrape::scrape(scrape_d2).await?), 1.0);
            return Ok(());
        }
        let _after = next_event(&mut events, WAIT).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!(
        "no event said events may be missing after d3 crashed\n{}",
        fx.logs()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_that_leaves_gracefully_leaves_a_type_watch_no_gap() -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_daemon_that_leaves_gracefully_leaves_a_type_watch_no_gap",
        3,
    )
    .await?
    else {
        return Ok(());
    };
    let on_d1 = fx.counter_owned_by("d1", "d1", "g-", 40).await?;
    let on_d3 = fx.counter_owned_by("d3", "d1", "h-", 60).await?;
    let mut via_d1 = fx.member("d1")?.client.clone();
    let mut events = via_d1
        .watch_type("counter", "")
        .await
        .with_context(|| fx.logs())?;
    via_d1
        .incr_publish("counter", &on_d3, 1)
        .await
        .with_context(|| fx.logs())?;
    for _ in 0..2 {
        let event = next_event(&mut events, WAIT).await?;
        assert_eq!(
            (event_actor(&event), event.missed_before),
            (on_d3.clone(), false)
        );
    }
    // d3 drains and leaves: the watch polls it until it has nothing more,
    // so nothing it held is lost and no gap is told.
    let mut d3 = fx.forget("d3").context("no d3")?;
    let status = d3.daemon.terminate().await?;
    anyhow::ensure!(status.success(), "d3 did not stop cleanly: {status:?}");
    fx.settle().await.with_context(|| fx.logs())?;
    let event = publish_then_next(&fx, &mut via_d1, &mut events, ("counter", &on_d1), 1).await?;
    assert_eq!((event_actor(&event), event.missed_before), (on_d1, false));
    Ok(())
}

/// `actor` publishes (`incr_publish(by)`, called through `via`): the next
/// event `events` brings, with the cluster's logs on failure.
async fn publish_then_next(
    fx: &Cluster,
    via: &mut Client,
    events: &mut Events,
    (ty, id): (&str, &str),
    by: i64,
) -> anyhow::Result<pb::ActorEvent> {
    via.incr_publish(ty, id, by)
        .await
        .with_context(|| fx.logs())?;
    next_event(events, WAIT).await.with_context(|| fx.logs())
}

/// Until `member` holds the events of some watched actor or type.
async fn until_holding_events(member: &Member) -> anyhow::Result<()> {
    for _ in 0..200 {
        let status = member.daemon.status().await?;
        if status.events.is_some_and(|e| e.watched > 0) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("{} holds no watched events after 10 s", member.node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_type_watch_opened_before_any_daemon_hosts_the_type_waits_for_one() -> anyhow::Result<()>
{
    let Some(mut fx) = Cluster::start(
        "a_type_watch_opened_before_any_daemon_hosts_the_type_waits_for_one",
        1,
    )
    .await?
    else {
        return Ok(());
    };
    // d2's start-up grace outlasts the test, so its watch below is surely
    // opened within it, as one is while a cluster's apps connect.
    fx.add_with("d2", vec![durable("counter")], &["--host-wait", "300s"])
        .await?;
    fx.settle().await.with_context(|| fx.logs())?;
    let mut via_d2 = fx.member("d2")?.client.clone();
    let mut events = via_d2
        .watch_type("meter", "")
        .await
        .with_context(|| fx.logs())?;
    // d3's app is the first to host "meter".
    fx.add_with("d3", vec![durable("counter"), durable("meter")], &[])
        .await?;
    fx.settle().await.with_context(|| fx.logs())?;
    let event = publish_then_next(&fx, &mut via_d2, &mut events, ("meter", "m1"), 2).await?;
    assert_eq!(
        (event_actor(&event), event_text(&event)),
        ("m1".to_owned(), "2".to_owned())
    );
    Ok(())
}
