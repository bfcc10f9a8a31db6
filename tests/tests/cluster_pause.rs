//! Pausing reminders in a cluster: a pause sent to a daemon that does not
//! own the actor reaches the owner, holds while the actor moves to another
//! daemon (whose scheduler learns it from the shared store), and survives
//! the app setting the reminder again there; resuming lets it fire again.

use anyhow::Context;
use std::time::Duration;

use troupe_proto::v1 as pb;
use troupe_tests::cluster_fixture::*;
use troupe_tests::store::ids;
use troupe_tests::*;

fn incr_of(id: &str) -> pb::ReminderRef {
    pb::ReminderRef {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
    }
}

/// Fires every 300 ms: paused for the seconds a failover takes, it would
/// fire many times.
fn every_300ms(id: &str) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
        due: "200ms".into(),
        period: "300ms".into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_holds_through_a_non_owner_and_a_move() -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start("a_pause_holds_through_a_non_owner_and_a_move", 2).await?
    else {
        return Ok(());
    };
    let mut via_d2 = fx.member("d2")?.client.clone();
    let (mut target, mut on_d2) = (None, None);
    for id in ids("p", 40) {
        via_d2
            .incr("counter", &id, 0)
            .await
            .with_context(|| fx.logs())?;
        if fx.member("d1")?.live_ids().await?.contains(&id) {
            target.get_or_insert(id);
        } else {
            on_d2.get_or_insert(id);
        }
        if target.is_some() && on_d2.is_some() {
            break;
        }
    }
    let id = target.context("no actor landed on d1")?;
    // A reminder d2 owns: d2 reads which reminders are paused now, before
    // the pause below, so it must read again when it takes d1's actors.
    let local = on_d2.context("no actor landed on d2")?;
    via_d2
        .0
        .set_reminder(pb::SetReminderRequest {
            due: "1h".into(),
            ..every_300ms(&local)
        })
        .await?;
    via_d2.0.set_reminder(every_300ms(&id)).await?;
    poll_until(WAIT, "a firing on d1", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move { Ok((until_served(&mut c, &id, WAIT).await? >= 1).then_some(())) }
    })
    .await?;

    // Paused through d2, which forwards it to the owner.
    let paused = via_d2.0.pause_reminder(incr_of(&id)).await?.into_inner();
    assert!(paused.paused, "{paused:?}");
    let at_pause = until_served(&mut via_d2, &id, WAIT).await?;

    fx.member("d1")?.daemon.kill9().await?;
    fx.forget("d1");
    // The app sets it again on the new owner, as at each activation.
    let again = poll_until(Duration::from_secs(30), "d2 to own the actor", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move { Ok(c.0.set_reminder(every_300ms(&id)).await.ok()) }
    })
    .await
    .with_context(|| fx.logs())?
    .into_inner();
    assert!(again.paused, "set again on d2: {again:?}");
    // Seconds of failover at one firing per 300 ms: none while paused (one
    // whose turn had begun at the pause may have finished after it).
    let before_resume = until_served(&mut via_d2, &id, WAIT).await?;
    assert!(
        before_resume <= at_pause + 1,
        "{} firings while paused",
        before_resume - at_pause
    );

    let resumed = via_d2.0.resume_reminder(incr_of(&id)).await?.into_inner();
    assert!(!resumed.paused, "{resumed:?}");
    poll_until(WAIT, "firings after the resume", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move {
            Ok((until_served(&mut c, &id, WAIT).await? >= before_resume + 2).then_some(()))
        }
    })
    .await
    .with_context(|| fx.logs())?;
    Ok(())
}
