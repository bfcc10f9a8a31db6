//! The daemon's `/metrics`: the runtime's families, its links, its
//! refusals, its certificates' expiry, its store and its process.

use troupe_runtime::Runtime;
use troupe_transport::link::Links;

use crate::auth::Refusals;
use crate::link_metrics;
use crate::metrics_http::{encode_process, without_eof, Exposition};
use crate::store_metrics::StoreMetrics;

/// What a scrape of the daemon reads.
#[derive(Clone)]
pub struct DaemonMetrics {
    pub runtime: Runtime,
    pub links: Option<Links>,
    /// The cgroup's, if any (`config::memory_limit`).
    pub memory_limit: Option<u64>,
    pub store_metrics: StoreMetrics,
    /// Every guard's refusals, scrapes' included.
    pub refusals: Refusals,
    /// The daemon's TLS, whose certificates' expiry is shown.
    pub tls: Option<troupe_tls::Tls>,
}

#[tonic::async_trait]
impl Exposition for DaemonMetrics {
    async fn encode(&self, body: &mut String) -> std::fmt::Result {
        let store_bytes = self.runtime.store_size_on_disk().await;
        self.runtime.encode_metrics(body)?;
        if let Some(links) = &self.links {
            without_eof(body);
            link_metrics::encode(&links.stats(), links.inbound_stats(), body)?;
        }
        without_eof(body);
        self.store_metrics.encode(store_bytes, body)?;
        encode_process(body, &self.refusals, self.tls.as_ref(), self.memory_limit)
    }
}
