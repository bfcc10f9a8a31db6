//! Two daemons and one placement replica sharing a PostgreSQL store: a call
//! through either daemon reaches the one activation of an actor (forwarded
//! to its owner over links; state reads, timers and the admin API's
//! describe, deactivate, purge and state edit too), `troupe cluster status` lists both
//! with their links and `troupe cluster actors` the actors of both, and a
//! daemon that stops gracefully hands its actors to the other without
//! losing a count.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use troupe_tests::store::TestStore;
use troupe_tests::*;

/// One `troupe placement serve` replica. Killed when dropped.
struct PlacementReplica {
    _child: Child,
    addr: String,
}

impl PlacementReplica {
    async fn start(data_dir: &Path) -> anyhow::Result<PlacementReplica> {
        let mut child = Command::new(troupe_bin())
            .args(["placement", "serve", "--id", "1", "--listen", "127.0.0.1:0"])
            .args(["--lease", "2s", "--heartbeat", "200ms", "--data-dir"])
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawning troupe placement serve")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        within(
            Duration::from_secs(20),
            "the placement replica's listening line",
            lines.read_line(&mut line),
        )
        .await??;
        let Some(addr) = line
            .trim()
            .strip_prefix("troupe placement listening on ")
            .map(str::to_owned)
        else {
            bail!("troupe placement serve did not announce its address (got {line:?})");
        };
        tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = lines.read_to_end(&mut sink).await;
        });
        Ok(PlacementReplica {
            _child: child,
            addr,
        })
    }
}

async fn cluster_status(placement: &str) -> anyhow::Result<Value> {
    let (status, stdout, stderr) =
        run_cli(&["cluster", "status", "--placement", placement, "-o", "json"]).await?;
    if !status.success() {
        bail!("troupe cluster status failed ({status}): {stderr}");
    }
    Ok(serde_json::from_str(&stdout)?)
}

/// Nodes of the members that are settled in the table (no change pending),
/// host `counter` and answer their admin API.
fn settled_nodes(status: &Value) -> Vec<String> {
    if !status["pending"].is_null() {
        return Vec::new();
    }
    let mut nodes: Vec<String> = status["members"]
        .as_array()
        .map(|m| m.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["reachable"] == true && m["types"] == serde_json::json!(["counter"]))
        .filter_map(|m| m["node"].as_str().map(str::to_owned))
        .collect();
    nodes.sort();
    nodes
}

async fn daemon(
    dir: &Path,
    store: &TestStore,
    placement: &str,
    node: &str,
) -> anyhow::Result<Daemon> {
    let mut args = store.args();
    args.extend(
        [
            "--placement",
            placement,
            "--node",
            node,
            "--shutdown-grace",
            "10s",
            // Room for the 8 MiB calls below.
            "--max-payload-bytes",
            "9437184",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start(dir, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_daemons_share_actors_and_hand_them_off() -> anyhow::Result<()> {
    let Some(store) = TestStore::postgres("cluster_smoke").await? else {
        return Ok(());
    };
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let placement = PlacementReplica::start(dirs[0].path()).await?;
    let a = daemon(dirs[1].path(), &store, &placement.addr, "node-a").await?;
    let mut b = daemon(dirs[2].path(), &store, &placement.addr, "node-b").await?;
    let app_a = TestApp::attach(a.addr, vec![type_spec("counter")]).await?;
    let app_b = TestApp::attach(b.addr, vec![type_spec("counter")]).await?;

    let settled = poll_until(
        Duration::from_secs(30),
        "both daemons in the table",
        || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            // The replica may still be electing itself: ask again.
            let Ok(status) = cluster_status(&placement.addr).await else {
                return Ok(None);
            };
            let nodes = settled_nodes(&status);
            anyhow::Ok((nodes == ["node-a", "node-b"]).then_some(status))
        },
    )
    .await
    .with_context(|| format!("daemon a:\n{}\ndaemon b:\n{}", a.log(), b.log()))?;
    assert_eq!(
        settled["members"].as_array().map(Vec::len),
        Some(2),
        "{settled:#}"
    );

    // Every actor counts across both daemons: each call goes through the
    // other daemon than the last, so at least half of them are forwarded.
    let mut client_a = a.client().await?;
    let mut client_b = b.client().await?;
    let ids: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
    for round in 1..=3i64 {
        for id in &ids {
            let client = if round % 2 == 1 {
                &mut client_a
            } else {
                &mut client_b
            };
            let count = client
                .incr("counter", id, 1)
                .await
                .with_context(|| format!("round {round}, {id}"))?;
            assert_eq!(count, round, "{id}: a call reached another activation");
        }
    }
    // One activation per actor in the whole cluster, spread over both.
    let on_a = a.actors().await?;
    let on_b = b.actors().await?;
    assert_eq!(
        on_a.len() + on_b.len(),
        ids.len(),
        "a: {on_a:?}\nb: {on_b:?}"
    );
    assert!(
        !on_a.is_empty() && !on_b.is_empty(),
        "a: {on_a:?}\nb: {on_b:?}"
    );
    for actor in &on_a {
        let id = actor
            .actor
            .as_ref()
            .map(|r| r.id.clone())
            .unwrap_or_default();
        assert!(
            !on_b
                .iter()
                .any(|o| o.actor.as_ref().map(|r| &r.id) == Some(&id)),
            "{id} is active on both daemons"
        );
    }
    // State reads are forwarded to the owner too.
    for id in &ids {
        let (entries, active) = client_a.state("counter", id).await?;
        assert!(
            active,
            "{id}: GetState did not reach the owner's activation"
        );
        assert_eq!(
            entries.get("count").map(|v| v.as_ref()),
            Some(&b"3"[..]),
            "{id}"
        );
    }
    // An actor's exception comes back through the other daemon as it was
    // raised, its stack trace included.
    for id in &ids {
        let status = match client_a.invoke_raw("counter", id, "fail", "{}").await {
            Err(status) => status,
            Ok(reply) => anyhow::bail!("{id}: fail answered {reply:?}"),
        };
        let trailer = |name| status.metadata().get(name).and_then(|v| v.to_str().ok());
        assert_eq!(trailer("troupe-error-type"), Some("ValueError"), "{id}");
        let trace = trailer("troupe-error-details").map(|v| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        });
        assert_eq!(trace.as_deref(), Some(troupe_tests::FAIL_TRACE), "{id}");
    }
    // Timers live in the owner's activation: setting one through either
    // daemon works only if the request reaches the owner.
    for id in &ids {
        client_a
            .0
            .set_timer(pb::SetTimerRequest {
                actor: Some(actor("counter", id)),
                name: "t".into(),
                due: "1h".into(),
                ..Default::default()
            })
            .await
            .with_context(|| format!("SetTimer for {id} through daemon a"))?;
        let deleted = client_b
            .0
            .delete_timer(pb::TimerRef {
                actor: Some(actor("counter", id)),
                name: "t".into(),
            })
            .await
            .with_context(|| format!("DeleteTimer for {id} through daemon b"))?
            .into_inner()
            .deleted;
        assert!(
            deleted,
            "{id}: the timer set through a was not found through b"
        );
    }
    let status = cluster_status(&placement.addr).await?;
    let counted: u64 = status["members"]
        .as_array()
        .map(|m| m.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m["active_actors"].as_u64())
        .sum();
    assert_eq!(counted, ids.len() as u64, "{status:#}");
    // A healthy cluster passes the check: a leader, every member answering,
    // none with a problem of its own.
    let (code, out, err) = run_cli(&[
        "cluster",
        "status",
        "--placement",
        &placement.addr,
        "--check",
    ])
    .await?;
    assert!(code.success(), "{out}{err}");
    assert!(out.ends_with("\nno problems found\n"), "{out}");
    // Each daemon forwarded over its links to the other, and says so.
    for member in status["members"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let links = member["links"].as_array().cloned().unwrap_or_default();
        let call = links
            .iter()
            .find(|l| l["channel"] == "call")
            .with_context(|| format!("no call channel in {member:#}"))?;
        assert!(
            call["connected"].as_u64() >= Some(1) && call["messages_sent"].as_u64() >= Some(16),
            "{call:#}"
        );
        assert_eq!(links.len(), 2, "call and bulk expected: {links:#?}");
    }
    // 8 MiB each way through both daemons: every actor's call through the
    // daemon that does not own it crosses a link on the bulk channel, in
    // chunks, and comes back whole.
    let big = Bytes::from(format!("\"{}\"", "b".repeat(8 << 20)));
    for id in ["e0", "e1"] {
        for client in [&mut client_a, &mut client_b] {
            let echoed = client
                .invoke_raw("counter", id, "echo", big.clone())
                .await
                .with_context(|| format!("8 MiB echo of {id}"))?;
            assert!(echoed == big, "the 8 MiB echo of {id} came back different");
        }
    }
    let status = cluster_status(&placement.addr).await?;
    let bulk_sent: u64 = status["members"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .flat_map(|m| m["links"].as_array().cloned().unwrap_or_default())
        .filter(|l| l["channel"] == "bulk")
        .filter_map(|l| l["bytes_sent"].as_u64())
        .sum();
    assert!(
        bulk_sent >= 2 * (8 << 20),
        "bulk carried {bulk_sent} bytes: {status:#}"
    );

    // The admin requests about one actor reach its owner as well: through
    // either daemon, an actor active on a is described as a holds it, and
    // the daemon that does not own it can end its activation.
    let on_a_now = a.actors().await?;
    let owned_by_a = on_a_now
        .iter()
        .filter_map(|info| info.actor.as_ref())
        .find(|r| r.id.starts_with('c'))
        .cloned()
        .context("no counter active on a")?;
    for daemon in [&a, &b] {
        let seen = daemon
            .admin()
            .await?
            .describe_actor(pb::DescribeActorRequest {
                actor: Some(owned_by_a.clone()),
            })
            .await?
            .into_inner();
        assert_eq!(seen.node, "node-a", "{seen:?}");
        assert_eq!(seen.status, pb::ActivationStatus::Idle as i32, "{seen:?}");
    }
    let ended = b
        .admin()
        .await?
        .deactivate_actor(pb::DeactivateActorRequest {
            actor: Some(owned_by_a.clone()),
        })
        .await?
        .into_inner();
    assert!(ended.deactivated, "b could not end a's activation");
    app_a
        .wait_for("a's app to deactivate the actor b asked to", WAIT, |e| {
            e.deactivations
                .iter()
                .any(|((_, id), _)| *id == owned_by_a.id)
        })
        .await?;

    // A purge asked of b erases an actor a owns, through a.
    for i in 0..8 {
        client_a.incr("counter", &format!("gone{i}"), 3).await?;
    }
    let doomed = a
        .actors()
        .await?
        .iter()
        .filter_map(|info| info.actor.clone())
        .find(|r| r.id.starts_with("gone"))
        .context("none of eight new counters is active on a")?;
    let purged = b
        .admin()
        .await?
        .purge_actor(pb::PurgeActorRequest {
            actor: Some(doomed.clone()),
        })
        .await?
        .into_inner();
    assert!(purged.was_active && purged.state_keys == 1, "{purged:?}");
    let described = a
        .admin()
        .await?
        .describe_actor(pb::DescribeActorRequest {
            actor: Some(doomed.clone()),
        })
        .await;
    assert!(
        matches!(&described, Err(s) if s.code() == tonic::Code::NotFound),
        "{described:?}"
    );

    // A state edit asked of b lands on a counter a owns, through a: a's
    // activation ends, and its next one counts on from the edited value.
    for i in 0..16 {
        client_a.incr("counter", &format!("gone-fix{i}"), 3).await?;
    }
    let edited = a
        .actors()
        .await?
        .iter()
        .filter_map(|info| info.actor.clone())
        .find(|r| r.id.starts_with("gone-fix"))
        .context("none of sixteen new counters is active on a")?;
    let reply = b
        .admin()
        .await?
        .edit_actor_state(pb::EditActorStateRequest {
            actor: Some(edited.clone()),
            changes: vec![pb::StateChange {
                ttl_ms: None,
                key: "count".into(),
                op: Some(pb::state_change::Op::Set(Bytes::from_static(b"100"))),
            }],
            // Compare-and-set, checked by the owner.
            expect: vec![pb::StateChange {
                ttl_ms: None,
                key: "count".into(),
                op: Some(pb::state_change::Op::Set(Bytes::from_static(b"3"))),
            }],
        })
        .await?
        .into_inner();
    assert!(reply.was_active, "{reply:?}");
    assert_eq!(
        reply.before,
        vec![pb::StateChange {
            ttl_ms: None,
            key: "count".into(),
            op: Some(pb::state_change::Op::Set(Bytes::from_static(b"3"))),
        }]
    );
    assert_eq!(client_b.incr("counter", &edited.id, 1).await?, 101);

    // `troupe cluster actors` lists each daemon's counters with its node.
    let (status, stdout, stderr) = run_cli(&[
        "cluster",
        "actors",
        "--placement",
        &placement.addr,
        "--type",
        "counter",
        "-o",
        "json",
    ])
    .await?;
    anyhow::ensure!(
        status.success(),
        "troupe cluster actors: {status}: {stderr}"
    );
    let listed: Value = serde_json::from_str(&stdout)?;
    assert_eq!(listed["unreachable"], serde_json::json!([]), "{listed}");
    let mut seen: Vec<(String, String)> = listed["actors"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|r| (r["node"].to_string(), r["id"].to_string()))
        .collect();
    let mut expected = Vec::new();
    for (daemon, node) in [(&a, "node-a"), (&b, "node-b")] {
        for info in daemon.actors().await? {
            if let Some(r) = info.actor.filter(|r| r.r#type == "counter") {
                expected.push((format!("{node:?}"), format!("{:?}", r.id)));
            }
        }
    }
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected);
    assert!(seen.iter().any(|(n, _)| n == "\"node-b\""), "{listed}");

    // A graceful stop hands b's actors to a with their counts.
    let exit = b.terminate().await?;
    assert!(
        exit.success(),
        "daemon b exited with {exit}; log:\n{}",
        b.log()
    );
    drop(app_b);
    let log_b = b.log();
    assert!(log_b.contains("left the cluster"), "{log_b}");
    for id in &ids {
        let count = client_a
            .incr("counter", id, 1)
            .await
            .with_context(|| format!("after b left, {id}; log of a:\n{}", a.log()))?;
        assert_eq!(count, 4, "{id}: a count was lost in the hand-off");
    }
    // The counters and the two 8 MiB echo actors (besides the purge's and
    // the state edit's).
    let active = a.actors().await?;
    let kept = active
        .iter()
        .filter(|info| {
            info.actor
                .as_ref()
                .is_some_and(|r| !r.id.starts_with("gone"))
        })
        .count();
    assert_eq!(kept, ids.len() + 2);
    let status = cluster_status(&placement.addr).await?;
    assert_eq!(settled_nodes(&status), ["node-a"], "{status:#}");
    drop(app_a);
    Ok(())
}
