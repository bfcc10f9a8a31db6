//! The scan that activates the actors this daemon owns whose inbox holds
//! entries and that are not active here: after a restart, a crash or a
//! hand-off nothing else would deliver them.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};
use troupe_storage::StoreError;

use crate::activation::Status;
use crate::shared::Shared;
use crate::types::ActorId;

/// How often the daemon looks for stored inbox entries of actors it owns
/// and does not have active.
const SCAN_EVERY: Duration = Duration::from_secs(2);
const SCAN_PAGE: usize = 256;

impl Shared {
    /// Activates, every [`SCAN_EVERY`], the actors this daemon owns whose
    /// inbox holds entries and that are not active here.
    /// Ends at `Draining`: a draining daemon activates nothing.
    pub(crate) async fn scan_inboxes(self: Arc<Self>) {
        let draining = self.shutdown.reached(crate::shutdown::Stage::Draining);
        tokio::pin!(draining);
        loop {
            tokio::select! {
                result = self.scan_once() => {
                    if let Err(e) = result {
                        warn!(error = %e, "looking for actors with stored durable tells failed; retrying");
                    }
                }
                () = &mut draining => return,
            }
            tokio::select! {
                () = tokio::time::sleep(SCAN_EVERY) => {}
                () = &mut draining => return,
            }
        }
    }

    async fn scan_once(self: &Arc<Self>) -> Result<(), StoreError> {
        let store = self.flusher.store().clone();
        let mut after: Option<(String, String)> = None;
        loop {
            let page = store
                .inbox_actors(
                    after.as_ref().map(|(t, i)| (t.as_str(), i.as_str())),
                    SCAN_PAGE,
                )
                .await?;
            for (ty, id) in &page {
                let actor = ActorId::new(ty.as_str(), id.as_str());
                if !self.owns(&actor) || self.directory.get(&actor).is_some() {
                    continue;
                }
                let Ok(act) = self
                    .directory
                    .get_or_create(&actor, || self.new_activation(&actor))
                else {
                    continue;
                };
                let mut inner = act.inner.lock();
                if inner.status != Status::Unloaded
                    || inner.scheduled
                    || self.holds.contains(&actor)
                {
                    continue;
                }
                inner.status = Status::Activating;
                drop(inner);
                debug!(actor = %actor, "activating for its stored durable tells");
                tokio::spawn(self.clone().activate(act));
            }
            if page.len() < SCAN_PAGE {
                return Ok(());
            }
            after = page.last().cloned();
        }
    }
}
