//! A daemon frozen at the worst moment cannot undo what its successor did.
//! Three placement replicas, two daemons, PostgreSQL; gdb stops the owner
//! (the whole process, as SIGSTOP or a paused VM would) right before its
//! store write, or with a turn on its way to its app, for longer than its
//! lease. The actor moves on and is served elsewhere; then the frozen
//! daemon runs again.
//!
//! Needs PostgreSQL (`TROUPE_TEST_POSTGRES`) and gdb; without them the tests
//! print why and pass as skipped.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use troupe_tests::cluster_fixture::{until_served, Cluster};
use troupe_tests::cluster_harness::{activation_events, check_single_activation, unix_now_ms};
use troupe_tests::freeze::{gdb_available, source_line, Freeze};
use troupe_tests::store::ids;
use troupe_tests::*;

/// Longer than the other cluster tests' 3 s: attaching gdb to the debug
/// binary stops the daemon for a second or two, which must not cost it its
/// lease before the moment the test picks.
const LEASE: &str = "8s";
/// How long the actor may take to be served by the other daemon once the
/// owner froze: the lease, its removal and the table change, with slack.
const TAKEOVER: Duration = Duration::from_secs(40);

/// A two-daemon cluster and an actor (count 1) that lives on `d1`.
async fn cluster_with_actor_on_d1(test: &str) -> anyhow::Result<Option<(Cluster, String)>> {
    if !gdb_available(test)? {
        return Ok(None);
    }
    let Some(mut fx) = Cluster::start_with_lease(test, 2, LEASE).await? else {
        return Ok(None);
    };
    let mut client = fx.member("d1")?.client.clone();
    for id in ids("f", 40) {
        client.incr("counter", &id, 1).await?;
        if fx.member("d1")?.live_ids().await?.contains(&id) {
            return Ok(Some((fx, id)));
        }
    }
    anyhow::bail!("no actor landed on d1\n{}", fx.logs())
}

/// A durable add on `actor` through `client`, answered when it is.
fn spawn_add(
    mut client: Client,
    actor: &str,
) -> tokio::task::JoinHandle<Result<bytes::Bytes, tonic::Status>> {
    let actor = actor.to_owned();
    tokio::spawn(async move {
        client
            .invoke_raw("counter", &actor, "incr", r#"{"kwargs": {"by": 1}}"#)
            .await
    })
}

/// Every daemon's activation log says one activation per actor at a time.
fn no_overlaps(fx: &Cluster) -> anyhow::Result<()> {
    let mut events = Vec::new();
    for m in &fx.members {
        events.extend(activation_events(&m.daemon.log()));
    }
    let report = check_single_activation(&events, &HashMap::new(), unix_now_ms());
    anyhow::ensure!(
        report.overlaps.is_empty(),
        "two live activations: {:?}\n{}",
        report.overlaps,
        fx.logs()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_held_across_a_freeze_cannot_overwrite_the_new_owners_acknowledged_state(
) -> anyhow::Result<()> {
    let test = "a_write_held_across_a_freeze";
    let Some((mut fx, actor)) = cluster_with_actor_on_d1(test).await? else {
        return Ok(());
    };
    // After the lease check, before the statement goes to PostgreSQL.
    let location = source_line(
        "crates/storage-postgres/src/batch_sql.rs",
        "prepare_cached(&statement(parts))",
    )?;
    let d1 = fx.member("d1")?;
    let mut freeze = Freeze::arm(d1.daemon.pid()?, &location).await?;
    // A durable add on d1: its turn ran (count 2 in d1's memory) and its
    // write is on its way when d1 freezes.
    let held = spawn_add(d1.client.clone(), &actor);
    freeze.hit(WAIT).await?;

    // d2 takes the actor over from the store (count 1: the held write is
    // not there) and acknowledges ten durable adds.
    let mut d2 = fx.member("d2")?.client.clone();
    let taken_over = until_served(&mut d2, &actor, TAKEOVER).await?;
    assert_eq!(taken_over, 1, "d2 did not start from the stored count");
    let mut acknowledged = taken_over;
    for _ in 0..10 {
        acknowledged = d2.incr("counter", &actor, 1).await?;
    }
    assert_eq!(acknowledged, 11);

    // d1 runs again: its held write reaches PostgreSQL, which refuses it,
    // and the caller that waited on it is told it was not stored.
    freeze.release().await?;
    let held = within(WAIT, "the held durable add", held).await??;
    let status = expect_code(held, tonic::Code::Unavailable)?;
    println!("the held write's caller got: {}", status.message());

    // d1 rejoins and the actor moves back to it: it loads what d2 stored.
    fx.settle().await?;
    let mut d1 = fx.member("d1")?.client.clone();
    let count = until_served(&mut d1, &actor, TAKEOVER).await?;
    assert_eq!(
        count,
        acknowledged,
        "acknowledged adds were lost: d1's held write overwrote them\n{}",
        fx.logs()
    );
    let log = fx.member("d1")?.daemon.log();
    assert!(
        log.contains("a newer owner has this actor"),
        "d1 never learned its write was refused\n{log}"
    );
    no_overlaps(&fx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_held_across_a_freeze_is_not_run_by_the_old_owners_app() -> anyhow::Result<()> {
    let test = "a_turn_held_across_a_freeze";
    let Some((mut fx, actor)) = cluster_with_actor_on_d1(test).await? else {
        return Ok(());
    };
    // The turn was started under the lease; its message is not sent yet.
    let location = source_line(
        "crates/troupe/src/app_api/app_connection.rs",
        "self.send(call_id, Pending::Turn(",
    )?;
    let d1 = fx.member("d1")?;
    let mut freeze = Freeze::arm(d1.daemon.pid()?, &location).await?;
    let held = spawn_add(d1.client.clone(), &actor);
    freeze.hit(WAIT).await?;

    // The actor is live in d2's app meanwhile.
    let mut d2 = fx.member("d2")?.client.clone();
    until_served(&mut d2, &actor, TAKEOVER).await?;
    let served_at = unix_now_ms();
    d2.incr("counter", &actor, 1).await?;

    freeze.release().await?;
    let held = within(WAIT, "the held call", held).await??;
    expect_code(held, tonic::Code::Unavailable)?;

    // d1's app got the turn after the lease it was sent under: it refused
    // it, so no turn of the actor ran in d1's app once d2's served it.
    let d1_app = fx.member("d1")?.app.as_ref().context("d1's app")?.events();
    let key = ("counter".to_owned(), actor.clone());
    let late: Vec<_> = d1_app
        .turns_run
        .iter()
        .filter(|(k, at)| *k == key && *at >= served_at)
        .collect();
    assert!(
        late.is_empty(),
        "d1's app ran the actor while d2's had it: {late:?}\n{}",
        fx.logs()
    );
    assert!(
        d1_app.lease_refusals.contains(&key),
        "d1's app was never asked to run the held turn late\n{}",
        fx.logs()
    );
    // Nothing it did was lost either: d2's add is there.
    let count = until_served(&mut d2, &actor, TAKEOVER).await?;
    assert_eq!(count, 2, "{}", fx.logs());
    no_overlaps(&fx)
}
