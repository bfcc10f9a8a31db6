//! `transport_load wait`: until placement's table is settled with exactly the
//! given daemons, each hosting the type and routing by it.

use std::time::{Duration, Instant};

use anyhow::bail;
use troupe_proto::v1 as pb;

use super::{admin, channel, Flags};

/// Waits (bounded) until placement's table has exactly the daemons at
/// `--daemons` as members, each hosting `--type`, with no change in flight,
/// and every one of them routes by it and may serve.
pub(crate) async fn wait(flags: &Flags) -> anyhow::Result<()> {
    let placement = flags.str("placement")?;
    let daemons = flags.list("daemons");
    let ty = flags.str_or("type", "echo");
    let limit = Duration::from_secs(flags.num("seconds", Some(60))?);
    let deadline = Instant::now() + limit;
    let mut last = String::from("nothing checked yet");
    loop {
        match settled(placement, &daemons, ty).await {
            Ok(Some(version)) => {
                println!("{version}");
                return Ok(());
            }
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!("the cluster did not settle within {limit:?} (last: {last})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn settled(placement: &str, daemons: &[String], ty: &str) -> anyhow::Result<Option<u64>> {
    let mut nodes = Vec::new();
    for addr in daemons {
        let status = admin(addr)
            .await?
            .status(pb::StatusRequest {})
            .await?
            .into_inner();
        let hosted = status
            .types
            .iter()
            .any(|t| t.name == ty && !t.apps.is_empty());
        if !hosted {
            return Ok(None);
        }
        nodes.push((status.node, status.placement_version, status.serving));
    }
    let status = pb::placement_client::PlacementClient::new(channel(placement).await?)
        .cluster_status(pb::ClusterStatusRequest {})
        .await?
        .into_inner();
    let Some(table) = status.table else {
        return Ok(None);
    };
    let Some(current) = table.current else {
        return Ok(None);
    };
    let mut members: Vec<&str> = current.members.iter().map(|m| m.node.as_str()).collect();
    members.sort_unstable();
    let mut wanted: Vec<&str> = nodes.iter().map(|(n, _, _)| n.as_str()).collect();
    wanted.sort_unstable();
    let hosting = current
        .members
        .iter()
        .all(|m| m.types.iter().any(|t| t == ty));
    let routing = nodes
        .iter()
        .all(|(_, version, serving)| *serving && *version >= current.version);
    Ok(
        (table.next.is_none() && members == wanted && hosting && routing)
            .then_some(current.version),
    )
}
