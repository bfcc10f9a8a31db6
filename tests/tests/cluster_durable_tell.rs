//! Durable tells in a 2-daemon cluster on PostgreSQL: sent through the
//! daemon that does not own the actor (forwarded, acknowledged once the
//! owner stored them), then the owner leaves while they wait behind a long
//! turn; the other daemon takes the actor over and delivers each one once.
//! A delayed tell sent through a daemon that does not host the type waits
//! on the owner, which delivers it when due.

use std::time::Duration;

use anyhow::Context;
use troupe_tests::cluster_fixture::{until_served, Cluster};
use troupe_tests::cluster_harness::unix_now_ms;
use troupe_tests::log_app::{log_of, tell_durable, tell_with, LogApp};
use troupe_tests::*;

const TELLS: i64 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn durable_tells_are_forwarded_and_survive_a_hand_off() -> anyhow::Result<()> {
    let Some(mut fx) =
        Cluster::start("durable_tells_are_forwarded_and_survive_a_hand_off", 2).await?
    else {
        return Ok(());
    };
    // An actor d1 owns, reached through d2.
    let mut via_d2 = fx.member("d2")?.client.clone();
    let id = fx.counter_owned_by("d1", "d2", "t", 20).await?;
    // A long turn on d1 keeps the tells waiting there, stored.
    let mut holder = via_d2.clone();
    let hold_id = id.clone();
    let hold = tokio::spawn(async move {
        holder
            .invoke_raw("counter", &hold_id, "sleep", r#"{"kwargs":{"ms":3000}}"#)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in 0..TELLS {
        tell_durable(&mut via_d2, "counter", &id, "incr", n)
            .await
            .with_context(|| format!("durable tell {n} through d2\n{}", fx.logs()))?;
    }
    // Acknowledged by d1 (the owner) with the actor still busy: none ran.
    let (entries, _) = via_d2.state("counter", &id).await?;
    anyhow::ensure!(
        entries.get("count").map(|v| &v[..]) == Some(&b"0"[..]),
        "tells ran before the hand-off: the test checks nothing ({entries:?})"
    );
    // d1 leaves: d2 takes the actor over from the shared store.
    let mut d1 = fx.forget("d1").context("no d1")?;
    let status = d1.daemon.terminate().await?;
    anyhow::ensure!(status.success(), "d1 did not stop cleanly: {status:?}");
    hold.abort();
    let count = poll_until(Duration::from_secs(30), "every tell applied on d2", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move {
            let count = until_served(&mut c, &id, WAIT).await?;
            Ok((count >= TELLS).then_some(count))
        }
    })
    .await
    .with_context(|| fx.logs())?;
    // Settled: no tell applied twice, after the scan had time to run again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = until_served(&mut via_d2, &id, WAIT).await?;
    assert_eq!((count, again), (TELLS, TELLS), "each tell applied once");
    Ok(())
}

/// Waits until a call through d2 reaches dlog/x on d1 (placed and serving).
async fn until_d2_reaches_d1(via_d2: &Client, fx: &Cluster) -> anyhow::Result<()> {
    poll_until(Duration::from_secs(30), "d2 to reach dlog on d1", || {
        let mut c = via_d2.clone();
        async move {
            let reached = c
                .invoke_raw("dlog", "x", "hold", r#"{"kwargs":{"ms":0}}"#)
                .await;
            Ok(reached.ok())
        }
    })
    .await
    .with_context(|| fx.logs())?;
    Ok(())
}

/// A tell without a delivery mode sent to a daemon that does not host the
/// type cannot know the type's default: it must not be acknowledged before
/// the owner has answered (for a durable-by-default type, stored it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_non_hosting_daemon_acknowledges_a_default_tell_only_once_the_owner_has(
) -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_non_hosting_daemon_acknowledges_a_default_tell_only_once_the_owner_has",
        2,
    )
    .await?
    else {
        return Ok(());
    };
    // Only d1 hosts `dlog`, whose tells are durable by default.
    let spec = pb::ActorTypeSpec {
        durable_tells: true,
        ..type_spec("dlog")
    };
    let channel = fx.member("d1")?.daemon.channel().await?;
    let _app = LogApp::attach_over(channel, vec![spec]).await?;
    let mut via_d2 = fx.member("d2")?.client.clone();
    until_d2_reaches_d1(&via_d2, &fx).await?;

    // The owner cannot answer: no acknowledgement may come.
    let d1 = fx.member("d1")?.daemon.pid()?;
    signal(d1, "-STOP").await?;
    let unheard = tokio::time::timeout(
        Duration::from_secs(2),
        tell_with(
            &mut via_d2,
            "dlog",
            "x",
            "append",
            1,
            pb::Delivery::Unspecified,
        ),
    )
    .await;
    signal(d1, "-CONT").await?;
    anyhow::ensure!(
        !matches!(unheard, Ok(Ok(()))),
        "acknowledged while the owner was stopped: nothing stored it"
    );
    // Answering again, the owner stores and delivers a default tell. The
    // freeze may have outlasted its lease (2 s of a 3 s lease, counted from
    // its last acknowledged heartbeat): then it serves once it rejoined.
    until_d2_reaches_d1(&via_d2, &fx).await?;
    tell_with(
        &mut via_d2,
        "dlog",
        "x",
        "append",
        2,
        pb::Delivery::Unspecified,
    )
    .await
    .with_context(|| fx.logs())?;
    poll_until(Duration::from_secs(30), "the tell applied", || {
        let mut c = via_d2.clone();
        async move {
            let (entries, _) = c.state("dlog", "x").await?;
            Ok(log_of(&entries)?.contains(&2).then_some(()))
        }
    })
    .await?;

    // A delayed tell through d2 waits on the owner, which delivers it and
    // says, through d2, when it is due.
    let sent_at = unix_now_ms();
    let told = via_d2
        .0
        .tell(pb::TellRequest {
            actor: Some(actor("dlog", "x")),
            method: "append".into(),
            payload: Some(json_payload(r#"{"kwargs":{"n":3}}"#)),
            delay_ms: 5_000,
            ..Default::default()
        })
        .await
        .with_context(|| fx.logs())?
        .into_inner();
    assert!(told.due_unix_ms >= sent_at + 5_000, "{told:?}");
    let reminder = told.reminder;
    let at_owner = |name: &str| pb::ReminderRef {
        actor: Some(actor("dlog", "x")),
        name: name.into(),
    };
    let waiting = via_d2.0.get_reminder(at_owner(&reminder)).await;
    assert_eq!(
        waiting.map(|r| r.into_inner().tell_method).ok().as_deref(),
        Some("append")
    );
    poll_until(Duration::from_secs(30), "the delayed tell applied", || {
        let mut c = via_d2.clone();
        async move {
            let (entries, _) = c.state("dlog", "x").await?;
            Ok(log_of(&entries)?.contains(&3).then_some(()))
        }
    })
    .await
    .with_context(|| fx.logs())?;
    // The firing removes the reminder after it stored the tell, so the
    // tell's turn may run first: wait for the removal, it must come.
    poll_until(
        Duration::from_secs(30),
        "the delayed tell's reminder removed",
        || {
            let mut c = via_d2.clone();
            let name = at_owner(&reminder);
            async move {
                match c.0.get_reminder(name).await {
                    Err(s) if s.code() == tonic::Code::NotFound => Ok(Some(())),
                    Ok(_) => Ok(None),
                    Err(s) => Err(s.into()),
                }
            }
        },
    )
    .await
    .with_context(|| fx.logs())?;
    Ok(())
}

async fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = tokio::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .await?;
    anyhow::ensure!(status.success(), "kill {sig} {pid} failed: {status}");
    Ok(())
}
