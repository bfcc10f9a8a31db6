//! A placement replica's `/metrics` (`troupe placement serve
//! --metrics-listen`): its Raft role and progress, the table and the
//! daemons' heartbeats (`troupe_placement_service::metrics`), the scrapes
//! it refused, its certificates' expiry and its process; and who may
//! scrape it. Placement has no API token, so a scraper proves itself with
//! the read-only token or, under TLS, a certificate from `--tls-ca`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use troupe_placement_service::metrics::ReplicaMetrics;
use troupe_tls::{Tls, TlsFiles};

use crate::auth::{Credential, Refusals, Tokens};
use crate::config::{memory_limit, token_source, MetricsTls};
use crate::metrics_http::{self, Access, Exposition, MetricsServer, ProcessFamilies};

/// What a scrape of the replica reads.
struct PlacementMetrics {
    replica: ReplicaMetrics,
    /// Its scrapes' refusals and read-only tokens, certificates and process.
    process: ProcessFamilies,
}

#[tonic::async_trait]
impl Exposition for PlacementMetrics {
    async fn encode(&self, body: &mut String) -> std::fmt::Result {
        self.replica.encode(body)?;
        self.process.encode(body)
    }
}

/// How the replica was told to serve its metrics.
pub struct MetricsSettings {
    pub listen: SocketAddr,
    pub read_token_file: Option<PathBuf>,
    /// The replica's certificate files, when it has TLS.
    pub tls_files: Option<TlsFiles>,
    pub insecure: bool,
}

/// The endpoint, checked and ready to start once the replica runs.
pub struct CheckedMetrics {
    listen: SocketAddr,
    tokens: Option<Arc<Tokens>>,
    tls: Option<MetricsTls>,
}

/// Reads the tokens and checks who could scrape, before the replica
/// starts: a port anyone beyond loopback could read is refused.
pub fn check(settings: MetricsSettings) -> anyhow::Result<CheckedMetrics> {
    let refuse_short = !settings.listen.ip().is_loopback() && !settings.insecure;
    let tokens = token_source(Credential::Read, settings.read_token_file, refuse_short)
        .map(Tokens::load)
        .transpose()?;
    check_exposure(
        settings.listen,
        settings.tls_files.is_some(),
        tokens.is_some(),
        settings.insecure,
    )?;
    // Without a token to ask for, a certificate proves the scraper.
    let tls = settings.tls_files.map(|files| MetricsTls {
        files,
        clients_required: tokens.is_none(),
    });
    Ok(CheckedMetrics {
        listen: settings.listen,
        tokens,
        tls,
    })
}

/// Serves `/metrics`: over HTTPS with the replica's certificate when it
/// has one, asking scrapers for the read-only token when one is
/// configured, else (under TLS) for a certificate from the CA.
pub async fn start(
    checked: CheckedMetrics,
    replica: ReplicaMetrics,
    tls: Option<Tls>,
) -> anyhow::Result<MetricsServer> {
    if let Some(tokens) = &checked.tokens {
        tokens.watch();
    }
    let refusals = Refusals::default();
    let process = ProcessFamilies {
        refusals: refusals.clone(),
        tokens: checked.tokens.iter().cloned().collect(),
        tls,
        memory_limit: memory_limit::detect(),
    };
    metrics_http::start(
        checked.listen,
        checked.tls,
        Access {
            tokens: checked.tokens,
            read_tokens: None,
            refusals: refusals.clone(),
        },
        Arc::new(PlacementMetrics { replica, process }),
    )
    .await
}

/// Refuses a metrics port beyond loopback that anyone could read, and
/// warns when a token would cross the network in plaintext.
fn check_exposure(
    listen: SocketAddr,
    tls: bool,
    token: bool,
    insecure: bool,
) -> anyhow::Result<()> {
    if listen.ip().is_loopback() || insecure {
        return Ok(());
    }
    match (tls, token) {
        (false, false) => bail!(
            "--metrics-listen {listen} is reachable from other machines, and nothing would prove \
             who scrapes it: give --read-token-file (or TROUPE_READ_TOKEN) for scrapers to send, \
             or --tls-cert, --tls-key and --tls-ca for scrapers to present a certificate from \
             the CA; listen on loopback, or pass --insecure if only trusted scrapers can reach \
             {listen}"
        ),
        (false, true) => tracing::warn!(
            %listen,
            "serving /metrics beyond loopback over plain HTTP: scrapers' read-only token crosses \
             the network in plaintext; give the replica --tls-cert for HTTPS (docs/security.md)"
        ),
        (true, _) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_beyond_loopback_need_a_token_a_certificate_or_insecure() {
        let open: SocketAddr = ([0, 0, 0, 0], 9090).into();
        let local: SocketAddr = ([127, 0, 0, 1], 9090).into();
        let refused = check_exposure(open, false, false, false).map_err(|e| e.to_string());
        assert!(
            matches!(&refused, Err(m) if m.contains("--read-token-file") && m.contains("--insecure")),
            "{refused:?}"
        );
        assert!(check_exposure(local, false, false, false).is_ok());
        assert!(check_exposure(open, true, false, false).is_ok());
        assert!(check_exposure(open, false, true, false).is_ok());
        assert!(check_exposure(open, false, false, true).is_ok());
    }
}
