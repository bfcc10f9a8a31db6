//! The placement service as real `troupe placement serve` processes on
//! loopback: election, forwarding through followers, two-phase promotion,
//! leader failover, lease expiry, restart from disk, SIGTERM.
//!
//! A "daemon" here is the test itself calling Join/Heartbeat, so each rule
//! of the protocol can be driven and observed directly.

use std::time::Duration;

use anyhow::{bail, Context};
use troupe_tests::replicas::{
    free_port, heartbeat_request, join_request, keep_alive, table_nodes, PlacementCluster,
    PlacementReplica,
};
use troupe_tests::scrape::{http_get, metrics_addr, scrape_with, Scrape};
use troupe_tests::{pb, poll_until, WAIT};

const TYPES: &[&str] = &["Counter"];

#[tokio::test]
async fn replicas_elect_a_leader_forward_joins_and_promote_after_drain() -> anyhow::Result<()> {
    let cluster = PlacementCluster::start(3, &[]).await?;
    let leader = cluster.leader().await.context(cluster.logs())?;
    let follower = *cluster
        .replicas
        .keys()
        .find(|id| **id != leader)
        .context("no follower")?;
    let mut f = cluster.client(follower).await?;

    // Through a follower; the first member is current at once.
    let r = f.join(join_request("daemon-a", TYPES)).await?.into_inner();
    assert_eq!((r.lease_ms, r.heartbeat_interval_ms), (3000, 500));
    let t = r.table.context("join answered no table")?;
    assert_eq!(table_nodes(t.current.as_ref()), ["daemon-a"]);
    assert!(t.next.is_none());

    // A second member: a change waiting for daemon-a to drain.
    let r = f.join(join_request("daemon-b", TYPES)).await?.into_inner();
    let t = r.table.context("join answered no table")?;
    let next = t.next.context("the second join made no pending table")?;
    assert_eq!(table_nodes(Some(&next)), ["daemon-a", "daemon-b"]);
    assert_eq!(t.waiting_for, ["daemon-a"]);

    // Not promoted while daemon-a has not drained.
    let hb = f
        .heartbeat(heartbeat_request("daemon-a", 0, TYPES))
        .await?
        .into_inner();
    let t = hb.table.context("a heartbeat knowing no table got none")?;
    assert_eq!(t.next.as_ref().map(|n| n.version), Some(next.version));
    // A heartbeat that knows the versions gets no table.
    let current = t.current.as_ref().map_or(0, |c| c.version);
    let hb = f
        .heartbeat(pb::HeartbeatRequest {
            known_current: current,
            known_next: next.version,
            ..heartbeat_request("daemon-b", 0, TYPES)
        })
        .await?
        .into_inner();
    assert!(hb.table.is_none(), "unchanged table was resent");

    // daemon-a reports the drain: the leader promotes.
    f.heartbeat(heartbeat_request("daemon-a", next.version, TYPES))
        .await?;
    poll_until(WAIT, "the pending table promoted", || {
        let mut f = f.clone();
        async move {
            let t = f.get_table(pb::GetTableRequest {}).await?.into_inner();
            let v = t.current.as_ref().map_or(0, |c| c.version);
            Ok((v == next.version && t.next.is_none()).then_some(()))
        }
    })
    .await
    .context(cluster.logs())?;
    Ok(())
}

#[tokio::test]
async fn killing_the_leader_elects_another_and_daemons_keep_working() -> anyhow::Result<()> {
    let mut cluster = PlacementCluster::start(3, &[]).await?;
    let leader = cluster.leader().await.context(cluster.logs())?;
    let mut any = cluster.client(leader).await?;
    any.join(join_request("daemon-a", TYPES)).await?;

    cluster
        .replicas
        .get_mut(&leader)
        .context("leader not running")?
        .kill9()
        .await?;
    cluster.replicas.remove(&leader);
    let new_leader = cluster.leader().await.context(cluster.logs())?;
    assert_ne!(new_leader, leader);

    // Through each survivor (one is a follower: forwarded).
    for id in cluster.replicas.keys() {
        let mut c = cluster.client(*id).await?;
        let hb = c
            .heartbeat(heartbeat_request("daemon-a", 0, TYPES))
            .await
            .context(cluster.logs())?
            .into_inner();
        let t = hb.table.context("no table in the heartbeat answer")?;
        assert_eq!(table_nodes(t.current.as_ref()), ["daemon-a"]);
        c.join(join_request(&format!("daemon-via-{id}"), TYPES))
            .await
            .context(cluster.logs())?;
    }
    let st = cluster
        .client(new_leader)
        .await?
        .cluster_status(pb::ClusterStatusRequest {})
        .await?
        .into_inner();
    assert_eq!(st.leader, new_leader.to_string());
    assert_eq!(st.replicas.len(), 3);
    assert!(st.replicas.iter().any(|r| r.leader && r.id == st.leader));
    Ok(())
}

#[tokio::test]
async fn a_member_that_stops_heartbeating_is_removed_after_the_lease() -> anyhow::Result<()> {
    let cluster = PlacementCluster::start(3, &["--lease", "1s", "--heartbeat", "200ms"]).await?;
    let leader = cluster.leader().await.context(cluster.logs())?;
    let mut c = cluster.client(leader).await?;
    let mut clients = Vec::new();
    for id in cluster.replicas.keys() {
        clients.push(cluster.client(*id).await?);
    }
    let _alive = keep_alive(clients, "daemon-alive", TYPES, Duration::from_millis(200));
    let r = c
        .join(join_request("daemon-alive", TYPES))
        .await?
        .into_inner();
    assert_eq!(r.lease_ms, 1000);
    // The lease runs from when placement received the join: start the
    // clock before sending it, so the bound below is strict.
    let joined = tokio::time::Instant::now();
    c.join(join_request("daemon-silent", TYPES)).await?;

    poll_until(WAIT, "daemon-silent removed", || {
        let mut c = c.clone();
        async move {
            let t = c.get_table(pb::GetTableRequest {}).await?.into_inner();
            let listed = table_nodes(t.current.as_ref())
                .iter()
                .chain(table_nodes(t.next.as_ref()).iter())
                .any(|n| n == "daemon-silent");
            Ok((!listed).then_some(t))
        }
    })
    .await
    .context(cluster.logs())?;
    // Never before the lease, counted from when the join was sent.
    assert!(
        joined.elapsed() >= Duration::from_secs(1),
        "removed after {:?}\n{}",
        joined.elapsed(),
        cluster.logs()
    );

    let err = c
        .heartbeat(heartbeat_request("daemon-silent", 0, TYPES))
        .await
        .err()
        .context("a removed member's heartbeat was accepted")?;
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(err.message().contains("join again"), "{}", err.message());

    // The live member stays.
    let t = c.get_table(pb::GetTableRequest {}).await?.into_inner();
    assert_eq!(table_nodes(t.current.as_ref()), ["daemon-alive"]);
    Ok(())
}

#[tokio::test]
async fn restarted_replicas_keep_the_membership() -> anyhow::Result<()> {
    // A long lease: nobody heartbeats across the restart.
    let mut cluster = PlacementCluster::start(3, &["--lease", "60s"]).await?;
    let leader = cluster.leader().await.context(cluster.logs())?;
    let mut c = cluster.client(leader).await?;
    c.join(join_request("daemon-a", TYPES)).await?;
    c.join(join_request("daemon-b", TYPES)).await?;

    // One replica restarts (SIGTERM: a clean exit).
    let follower = *cluster
        .replicas
        .keys()
        .find(|id| **id != leader)
        .context("no follower")?;
    let status = cluster
        .replicas
        .get_mut(&follower)
        .context("follower not running")?
        .terminate()
        .await?;
    assert!(status.success(), "SIGTERM exit: {status}");
    cluster.start_replica(follower).await?;
    // Then all of them.
    let ids: Vec<u64> = cluster.replicas.keys().copied().collect();
    for id in &ids {
        if let Some(r) = cluster.replicas.get_mut(id) {
            let status = r.terminate().await?;
            if !status.success() {
                bail!("replica {id} exited with {status} on SIGTERM:\n{}", r.log());
            }
        }
    }
    for id in &ids {
        cluster.start_replica(*id).await?;
    }
    let leader = cluster.leader().await.context(cluster.logs())?;
    for id in &ids {
        let mut c = cluster.client(*id).await?;
        // Any replica answers (followers forward to the new leader).
        let t = poll_until(WAIT, "the membership after restart", || {
            let mut c = c.clone();
            async move {
                let t = c.get_table(pb::GetTableRequest {}).await?.into_inner();
                let mut all = table_nodes(t.current.as_ref());
                all.extend(table_nodes(t.next.as_ref()));
                Ok(all.contains(&"daemon-b".to_string()).then_some(t))
            }
        })
        .await
        .context(cluster.logs())?;
        let mut all = table_nodes(t.current.as_ref());
        all.extend(table_nodes(t.next.as_ref()));
        assert!(all.contains(&"daemon-a".to_string()), "{all:?}");
        let hb = c
            .heartbeat(heartbeat_request("daemon-a", 0, TYPES))
            .await
            .context(format!("heartbeat via replica {id}, leader {leader}"))?;
        assert_eq!(hb.into_inner().lease_ms, 60_000);
    }
    Ok(())
}

#[tokio::test]
async fn a_single_replica_serves_on_port_zero_and_rejects_bad_peers() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let r = PlacementReplica::start(1, "127.0.0.1:0", dir.path(), None, &[]).await?;
    let c = r.client().await?;
    let resp = poll_until(WAIT, "a single replica to lead", || {
        let mut c = c.clone();
        async move { Ok(c.join(join_request("solo", TYPES)).await.ok()) }
    })
    .await
    .context(r.log())?;
    let t = resp.into_inner().table.context("no table")?;
    assert_eq!(table_nodes(t.current.as_ref()), ["solo"]);
    drop(c);

    // The peers list must include this replica; the error says so.
    let other = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let (status, _out, err) = troupe_tests::run_cli(&[
        "placement",
        "serve",
        "--id",
        "4",
        "--listen",
        &listen,
        "--data-dir",
        &other.path().display().to_string(),
        "--peers",
        "1=127.0.0.1:1,2=127.0.0.1:2",
    ])
    .await?;
    assert!(!status.success());
    assert!(err.contains("must include this replica"), "{err}");
    Ok(())
}

/// Replica `id`'s metrics, scraped with `token`.
async fn replica_metrics(
    cluster: &PlacementCluster,
    id: u64,
    token: &str,
) -> anyhow::Result<Scrape> {
    let replica = cluster.replicas.get(&id).context("no such replica")?;
    let addr = metrics_addr(&replica.log()).context("no metrics address logged")?;
    let bearer = format!("Bearer {token}");
    scrape_with(addr, &[("authorization", &bearer)]).await
}

#[tokio::test]
async fn replicas_show_raft_the_table_and_heartbeats_to_scrapers_with_the_token(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("read-token");
    std::fs::write(&token_file, "scraper-token\n")?;
    let token_file = token_file.display().to_string();
    let mut cluster = PlacementCluster::start(
        3,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--read-token-file",
            &token_file,
        ],
    )
    .await?;
    let leader = cluster.leader().await.context(cluster.logs())?;
    let mut client = cluster.client(leader).await?;
    client.join(join_request("daemon-a", TYPES)).await?;

    // Without the token: refused, and counted.
    let replica = cluster.replicas.get(&leader).context("no leader")?;
    let addr = metrics_addr(&replica.log()).context("no metrics address logged")?;
    assert_eq!(http_get(addr, "/metrics").await?.status, 401);

    // Every replica applies the join; the leader alone leads, sees the
    // followers' lag and daemon-a's heartbeat.
    for id in cluster.replicas.keys().copied() {
        let scraped = poll_until(WAIT, "the join applied on every replica", || async {
            let scraped = replica_metrics(&cluster, id, "scraper-token").await?;
            Ok((scraped.sum("troupe_placement_daemons", &[]) == 1.0).then_some(scraped))
        })
        .await?;
        let leads = id == leader;
        assert_eq!(
            scraped.sum("troupe_placement_raft_leader", &[]),
            f64::from(u8::from(leads)),
            "{}",
            scraped.text
        );
        assert_eq!(scraped.sum("troupe_placement_raft_voters", &[]), 3.0);
        assert!(scraped.sum("troupe_placement_raft_term", &[]) >= 1.0);
        assert!(scraped.sum("troupe_placement_table_version", &[]) >= 1.0);
        assert!(scraped.sum("troupe_placement_raft_leader_changes_total", &[]) >= 1.0);
        assert_eq!(
            scraped.has("troupe_placement_daemon_heartbeat_age_seconds"),
            leads,
            "{}",
            scraped.text
        );
        assert_eq!(
            scraped.has("troupe_placement_raft_replication_lag_entries"),
            leads
        );
        assert!(
            scraped.has("process_resident_memory_bytes"),
            "{}",
            scraped.text
        );
        if leads {
            assert_eq!(
                scraped.sum(
                    "troupe_auth_refused_total",
                    &[("service", "metrics"), ("reason", "no_token")]
                ),
                1.0
            );
        }
    }

    // A new leader counts the change.
    cluster
        .replicas
        .get_mut(&leader)
        .context("no leader")?
        .terminate()
        .await?;
    cluster.replicas.remove(&leader);
    let next = cluster.leader().await.context(cluster.logs())?;
    let scraped = poll_until(WAIT, "the new leader's metrics", || async {
        let scraped = replica_metrics(&cluster, next, "scraper-token").await?;
        Ok((scraped.sum("troupe_placement_raft_leader", &[]) == 1.0).then_some(scraped))
    })
    .await?;
    assert!(
        scraped.sum("troupe_placement_raft_leader_changes_total", &[]) >= 2.0,
        "{}",
        scraped.text
    );
    Ok(())
}

#[tokio::test]
async fn a_replica_refuses_metrics_anyone_beyond_loopback_could_read() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let started = PlacementReplica::start(
        1,
        &listen,
        dir.path(),
        None,
        &["--metrics-listen", "0.0.0.0:0"],
    )
    .await;
    let Err(e) = started else {
        bail!("a replica served metrics to anyone beyond loopback");
    };
    let message = format!("{e:#}");
    assert!(message.contains("--read-token-file"), "{message}");
    Ok(())
}
