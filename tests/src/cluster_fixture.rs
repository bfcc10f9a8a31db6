//! A whole cluster for one test: three placement replicas and daemons
//! `d1`, `d2`... with the counter app, all on a fresh PostgreSQL database,
//! one cluster at a time per test binary.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cluster_harness::{placement_arg, routing_by, settled_with, Member};
use crate::replicas::PlacementCluster;
use crate::store::{postgres_url, type_with_mode, PgDatabase};
use crate::tls::TestCa;
use crate::{json_payload, pb, within, Client, RawApp};

/// The default lease. Shorter ones keep tests quicker but let a loaded
/// 2-core machine delay a heartbeat past the lease, which fences a healthy
/// daemon (correctly, but not what these tests are about).
pub const LEASE: &str = "3s";
pub const LEASE_MS: u64 = 3_000;

/// One cluster at a time: each is six processes plus the load, and two at
/// once on two cores starve heartbeats.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn durable(name: &str) -> pb::ActorTypeSpec {
    type_with_mode(name, pb::StateMode::Durable)
}

#[derive(Debug)]
pub struct Cluster {
    pub replicas: PlacementCluster,
    pub members: Vec<Member>,
    pub store_url: String,
    _db: PgDatabase,
    /// Last, so the next test starts only once these processes are gone.
    _alone: tokio::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Three replicas with the default [`LEASE`] and `daemons` daemons
    /// `d1`, `d2`...; `None` when PostgreSQL tests are skipped.
    pub async fn start(test: &str, daemons: usize) -> anyhow::Result<Option<Cluster>> {
        Self::start_with_lease(test, daemons, LEASE).await
    }

    /// [`Cluster::start`] with another lease.
    pub async fn start_with_lease(
        test: &str,
        daemons: usize,
        lease: &str,
    ) -> anyhow::Result<Option<Cluster>> {
        let Some(server) = postgres_url(test)? else {
            return Ok(None);
        };
        let alone = ONE_CLUSTER.lock().await;
        let db = PgDatabase::create(&server).await?;
        let store_url = db.url.clone();
        // Every cluster test runs with mTLS between all members, as a
        // production cluster would.
        let ca = TestCa::new()?;
        let replicas = PlacementCluster::start_with_tls(3, &["--lease", lease], Some(ca)).await?;
        replicas.leader().await?;
        let mut fx = Cluster {
            replicas,
            members: Vec::new(),
            store_url,
            _db: db,
            _alone: alone,
        };
        for i in 1..=daemons {
            fx.add(&format!("d{i}")).await?;
        }
        fx.settle().await?;
        Ok(Some(fx))
    }

    /// Waits until placement's table has exactly the current members and no
    /// change in flight, and every member routes by it.
    pub async fn settle(&self) -> anyhow::Result<()> {
        let version = settled_with(&self.replicas, &self.nodes(), "counter").await?;
        routing_by(&self.members, version).await
    }

    pub async fn add(&mut self, node: &str) -> anyhow::Result<()> {
        self.add_with(node, vec![durable("counter")], &[]).await
    }

    /// A daemon `node` whose app hosts `types` (the counter's logic under
    /// each name), started with `extra` arguments.
    pub async fn add_with(
        &mut self,
        node: &str,
        types: Vec<pb::ActorTypeSpec>,
        extra: &[&str],
    ) -> anyhow::Result<()> {
        let member = Member::start(
            node,
            &placement_arg(&self.replicas),
            &self.store_url,
            types,
            extra,
            self.replicas.tls.as_deref(),
        )
        .await?;
        self.members.push(member);
        Ok(())
    }

    pub fn nodes(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.node.as_str()).collect()
    }

    pub fn member(&mut self, node: &str) -> anyhow::Result<&mut Member> {
        self.members
            .iter_mut()
            .find(|m| m.node == node)
            .with_context(|| format!("no member {node}"))
    }

    /// A counter id (`prefix` and a number, one of `tries`) that `owner`
    /// activated when called through `via`, as a test of forwarding wants.
    pub async fn counter_owned_by(
        &mut self,
        owner: &str,
        via: &str,
        prefix: &str,
        tries: usize,
    ) -> anyhow::Result<String> {
        let mut client = self.member(via)?.client.clone();
        for id in crate::store::ids(prefix, tries) {
            client
                .incr("counter", &id, 0)
                .await
                .with_context(|| self.logs())?;
            if self.member(owner)?.live_ids().await?.contains(&id) {
                return Ok(id);
            }
        }
        bail!("no actor landed on {owner} in {tries} tries")
    }

    /// Removes `node` from the fixture (after killing or stopping it).
    pub fn forget(&mut self, node: &str) -> Option<Member> {
        let i = self.members.iter().position(|m| m.node == node)?;
        Some(self.members.remove(i))
    }

    /// A raw app on each of d1 and d2 registering `spec`, once the table
    /// hosts the type on both and every member routes by it.
    pub async fn raw_apps_on_two(
        &mut self,
        spec: pb::ActorTypeSpec,
    ) -> anyhow::Result<[RawApp; 2]> {
        self.raw_apps_on_two_as(spec, crate::register_message).await
    }

    /// [`Cluster::raw_apps_on_two`], each registered with `register(app
    /// name, types)`.
    pub async fn raw_apps_on_two_as(
        &mut self,
        spec: pb::ActorTypeSpec,
        register: fn(&str, Vec<pb::ActorTypeSpec>) -> pb::AppMessage,
    ) -> anyhow::Result<[RawApp; 2]> {
        let name = spec.name.clone();
        // The cluster runs with TLS: the apps dial as its clients do.
        let d1 = self.member("d1")?.daemon.channel().await?;
        let d2 = self.member("d2")?.daemon.channel().await?;
        let apps = [
            RawApp::register_as(d1, register("raw-test-app", vec![spec.clone()]))
                .await?
                .0,
            RawApp::register_as(d2, register("raw-test-app", vec![spec]))
                .await?
                .0,
        ];
        let version = settled_with(&self.replicas, &["d1", "d2"], &name).await?;
        routing_by(&self.members, version).await?;
        Ok(apps)
    }

    pub fn clients(&self) -> Vec<Client> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    pub fn logs(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            out.push_str(&format!("--- daemon {}\n{}\n", m.node, m.daemon.log()));
        }
        out.push_str(&self.replicas.logs());
        out
    }
}

/// Reads `actor`'s count (an `incr` by 0) through `client`, retrying until
/// it answers, at most `limit`. Each attempt has a short deadline of its
/// own: a call forwarded to a daemon that stopped answering ends at its
/// caller's deadline (it is not re-sent: it may have run), so waiting on
/// one attempt would measure the test's patience, not the failover.
pub async fn until_served(
    client: &mut Client,
    actor: &str,
    limit: Duration,
) -> anyhow::Result<i64> {
    let deadline = Instant::now() + limit;
    loop {
        let mut request = tonic::Request::new(pb::InvokeRequest {
            actor: Some(crate::actor("counter", actor)),
            method: "incr".into(),
            payload: Some(json_payload(r#"{"kwargs": {"by": 0}}"#)),
            ..Default::default()
        });
        request.set_timeout(Duration::from_millis(500));
        let answer = within(
            Duration::from_secs(2),
            "one attempt",
            client.0.invoke(request),
        )
        .await;
        match answer {
            Ok(Ok(reply)) => {
                let data = reply
                    .into_inner()
                    .payload
                    .map(|p| p.data)
                    .unwrap_or_default();
                return Ok(serde_json::from_slice::<i64>(&data)?);
            }
            _ if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Err(status)) => bail!("{actor} was not served within {limit:?}: {status}"),
            Err(e) => return Err(e.context(format!("{actor} was not served within {limit:?}"))),
        }
    }
}
