//! Keys that expire in a cluster, on the system clock and PostgreSQL: a
//! state read through a daemon that does not own the actor says when its
//! key expires and stops showing it then, and once the actor goes idle its
//! owner erases the key from the shared store.

use anyhow::Context;
use std::time::Duration;

use troupe_proto::v1 as pb;
use troupe_tests::cluster_fixture::*;
use troupe_tests::store::postgres_state;
use troupe_tests::*;

/// The shortest ttl there is, so the test waits a second for it.
const FOR_A_SECOND: &str = r#"{"kwargs": {"by": 5, "ttl_ms": 1000}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_expires_through_a_non_owner_and_leaves_the_shared_store() -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_key_expires_through_a_non_owner_and_leaves_the_shared_store",
        2,
    )
    .await?
    else {
        return Ok(());
    };
    let mut via_d2 = fx.member("d2")?.client.clone();
    let id = fx.counter_owned_by("d1", "d2", "x", 40).await?;
    assert_eq!(
        via_d2
            .invoke("counter", &id, "incr_for", FOR_A_SECOND)
            .await?,
        5
    );
    let read = via_d2
        .0
        .get_state(pb::GetStateRequest {
            actor: Some(actor("counter", &id)),
            keys: Vec::new(),
        })
        .await?
        .into_inner();
    assert!(read.expires_unix_ms.contains_key("count"), "{read:?}");

    poll_until(WAIT, "the count to read as expired through d2", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move {
            Ok(c.stored_count("counter", &id)
                .await?
                .is_none()
                .then_some(()))
        }
    })
    .await?;
    // Active on d1 with no turn since, it still holds the key; idle, its
    // owner's $expire reminder erases it.
    let ended = fx
        .member("d2")?
        .daemon
        .admin()
        .await?
        .deactivate_actor(pb::DeactivateActorRequest {
            actor: Some(actor("counter", &id)),
        })
        .await?
        .into_inner();
    assert!(ended.deactivated, "d2 could not end d1's activation");
    let url = fx.store_url.clone();
    poll_until(
        Duration::from_secs(10),
        "the count to leave PostgreSQL",
        || {
            let (url, id) = (url.clone(), id.clone());
            async move {
                let stored = postgres_state(&url, "counter", &id).await?;
                Ok(stored.is_empty().then_some(()))
            }
        },
    )
    .await
    .with_context(|| fx.logs())?;
    Ok(())
}
