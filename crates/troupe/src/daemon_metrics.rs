//! The daemon's `/metrics`: the runtime's families, its links, its
//! refusals, its certificates' expiry, its store and its process.

use troupe_runtime::Runtime;
use troupe_transport::link::Links;

use crate::link_metrics;
use crate::metrics_http::{without_eof, Exposition, ProcessFamilies};
use crate::store_metrics::StoreMetrics;

/// What a scrape of the daemon reads.
#[derive(Clone)]
pub struct DaemonMetrics {
    pub runtime: Runtime,
    pub links: Option<Links>,
    pub store_metrics: StoreMetrics,
    /// Its refusals, tokens, certificates and process.
    pub process: ProcessFamilies,
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
        self.process.encode(body)
    }
}
