//! What the health service says of the actor API (`troupe.v1.ActorClient`),
//! kept current: SERVING while this daemon can serve actors, which in a
//! cluster means while it holds a placement lease (not before it joined,
//! nor while it is cut off from placement and its actors may be served
//! elsewhere), and NOT_SERVING from the start of a shutdown. The overall
//! status ("") only says the process answers: it is for liveness and
//! startup probes, the actor API's for readiness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tonic::server::NamedService;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;
use tracing::{info, warn};
use troupe_placement::view::ClusterPlacement;
use troupe_proto::v1::actor_client_server::ActorClientServer;

use crate::client_api::ClientApi;
use crate::membership::decisions::lapsed;

/// The service a readiness probe names: `troupe.v1.ActorClient`.
pub const ACTOR_API: &str = <ActorClientServer<ClientApi> as NamedService>::NAME;
/// How often the lease is looked at: a probe period is seconds, and a
/// lapse needs no event to happen.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// The task following the lease; [`Readiness::stop`] ends it.
#[derive(Debug)]
pub struct Readiness {
    health: HealthReporter,
    task: Option<JoinHandle<()>>,
}

/// Whether the actor API can be served: always on a single node; in a
/// cluster while the lease lasts.
pub fn actor_api_serving(lease_end: Option<Option<Instant>>, now: Instant) -> bool {
    match lease_end {
        None => true,
        Some(end) => !lapsed(end, now),
    }
}

impl Readiness {
    /// Sets the actor API's status now and, in a cluster (`view`), keeps it
    /// following the lease.
    pub async fn start(health: HealthReporter, view: Option<Arc<ClusterPlacement>>) -> Self {
        let lease_end = || view.as_ref().map(|view| view.lease_end());
        let mut serving = actor_api_serving(lease_end(), Instant::now());
        health.set_service_status(ACTOR_API, status(serving)).await;
        let task = view.clone().map(|view| {
            let health = health.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(CHECK_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let now_serving = actor_api_serving(Some(view.lease_end()), Instant::now());
                    if now_serving == serving {
                        continue;
                    }
                    serving = now_serving;
                    if serving {
                        info!(
                            service = ACTOR_API,
                            "ready: this daemon holds a placement lease"
                        );
                    } else {
                        warn!(
                            service = ACTOR_API,
                            "not ready: this daemon holds no placement lease (joining, or cut \
                             off from placement), so it serves no actors"
                        );
                    }
                    health.set_service_status(ACTOR_API, status(serving)).await;
                }
            })
        });
        Self { health, task }
    }

    /// A shutdown began: NOT_SERVING from now on.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.health
            .set_service_status(ACTOR_API, ServingStatus::NotServing)
            .await;
    }
}

fn status(serving: bool) -> ServingStatus {
    if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_node_serves_and_a_member_only_within_its_lease() {
        let now = Instant::now();
        assert!(actor_api_serving(None, now));
        assert!(!actor_api_serving(Some(None), now), "before joining");
        assert!(actor_api_serving(
            Some(Some(now + Duration::from_secs(1))),
            now
        ));
        assert!(!actor_api_serving(Some(Some(now)), now), "lapsed");
    }
}
