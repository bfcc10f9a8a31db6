//! Who may reach the daemon's listeners, and with what: its tokens, TLS on
//! `--listen` and `/metrics`, and the refusals that keep a listener beyond
//! loopback from serving anyone who reaches it (docs/security.md).

use std::net::SocketAddr;
use std::path::Path;

use super::tls::TlsRole;
use super::values::token_source;
use super::{FileConfig, MetricsTls, ServeArgs};
use crate::auth::{Credential, TokenSource};

/// The credentials and TLS `serve` resolved, checked against where it
/// listens.
pub(super) struct Guards {
    pub(super) api_tokens: Option<TokenSource>,
    pub(super) app_tokens: Option<TokenSource>,
    pub(super) read_tokens: Option<TokenSource>,
    pub(super) tls: Option<troupe_tls::TlsSettings>,
    pub(super) metrics_tls: Option<MetricsTls>,
}

/// Where the daemon listens, which decides what it must guard.
pub(super) struct Listeners<'a> {
    pub(super) listen: SocketAddr,
    pub(super) listen_unix: Option<&'a Path>,
    pub(super) metrics_listen: Option<SocketAddr>,
}

impl ServeArgs {
    /// The tokens and TLS of flags and `file`, refused when they leave a
    /// listener `at` open beyond loopback.
    pub(super) fn guards(&self, file: &FileConfig, at: &Listeners<'_>) -> anyhow::Result<Guards> {
        let (listen, metrics_listen) = (at.listen, at.metrics_listen);
        let insecure = self.insecure || file.insecure;
        // Where other machines reach a listener the tokens guard, a short
        // one can be guessed from there.
        let exposed = !listen.ip().is_loopback()
            || metrics_listen.is_some_and(|metrics| !metrics.ip().is_loopback());
        let refuse_short = exposed && !insecure;
        let api_tokens = token_source(
            Credential::Api,
            self.api_token_file.clone().or(file.api_token_file.clone()),
            refuse_short,
        );
        let app_tokens = token_source(
            Credential::App,
            self.app_token_file.clone().or(file.app_token_file.clone()),
            refuse_short,
        );
        let read_tokens = token_source(
            Credential::Read,
            self.read_token_file
                .clone()
                .or(file.read_token_file.clone()),
            refuse_short,
        );
        if read_tokens.is_some() && api_tokens.is_none() {
            anyhow::bail!(
                "a read-only token (TROUPE_READ_TOKEN or --read-token-file) is set but no API \
                 token: without TROUPE_API_TOKEN the client and admin APIs are open to everyone, \
                 so a read-only token restricts nothing. Set TROUPE_API_TOKEN (or \
                 --api-token-file) for the callers that may change things, or drop the \
                 read-only token"
            );
        }
        let tls = self.tls.resolve(file.tls.as_ref(), TlsRole::Daemon)?;
        // Client certificates authenticate every caller as tokens would.
        let callers_proven = tls
            .as_ref()
            .is_some_and(|t| t.client_certs == troupe_tls::ClientCerts::Required);
        if !listen.ip().is_loopback() && !insecure && !callers_proven {
            let missing: Vec<&str> = [
                (&api_tokens, Credential::Api),
                (&app_tokens, Credential::App),
            ]
            .into_iter()
            .filter(|(tokens, _)| tokens.is_none())
            .map(|(_, credential)| credential.env_var())
            .collect();
            if !missing.is_empty() {
                let missing = missing.join(" and ");
                anyhow::bail!(
                    "--listen {listen} is reachable from other machines, and without {missing} \
                     anyone who reaches it can call, read and deactivate every actor or register \
                     as an app and take a type's calls. Set {missing} (or --api-token-file / \
                     --app-token-file; docs/security.md), listen on a loopback address, or pass \
                     --insecure if only trusted callers can reach it"
                );
            }
            if tls.is_none() {
                tracing::warn!(%listen, "listening beyond loopback without TLS: tokens and calls cross the network in plaintext; give --tls-cert, --tls-key and --tls-ca (docs/security.md)");
            }
        }
        if let (Some(path), Some(_)) = (at.listen_unix, &tls) {
            anyhow::bail!(
                "--listen-unix {} serves without TLS, which would let local callers past the \
                 TLS settings of --listen; use one or the other",
                path.display()
            );
        }
        let metrics_plain_http = self.metrics_plain_http || file.metrics_plain_http;
        let metrics_tls = match (&tls, metrics_plain_http) {
            (Some(tls), false) => Some(MetricsTls {
                files: tls.files.clone(),
                clients_required: callers_proven,
            }),
            _ => None,
        };
        // As on --listen: certificates prove scrapers as the token would.
        // Plain HTTP checks no certificate, so it proves nothing.
        let scrapers_proven = metrics_tls.as_ref().is_some_and(|t| t.clients_required);
        if let Some(metrics) = metrics_listen {
            if !metrics.ip().is_loopback() && api_tokens.is_some() && metrics_tls.is_none() {
                tracing::warn!(%metrics, "serving /metrics beyond loopback over plain HTTP: scrapers' API token crosses the network in plaintext; give the daemon --tls-cert (and drop --metrics-plain-http) for HTTPS (docs/security.md)");
            }
            if !metrics.ip().is_loopback() && !insecure && api_tokens.is_none() && !scrapers_proven
            {
                let plain = if callers_proven {
                    " (over --metrics-plain-http no client certificate is checked: drop it and \
                     scrapers need a certificate from --tls-ca instead)"
                } else {
                    ""
                };
                anyhow::bail!(
                    "--metrics-listen {metrics} is reachable from other machines, and without \
                     TROUPE_API_TOKEN anyone who reaches it reads the metrics (actor types, peers, \
                     load){plain}. Set the API token (scrapers then send it as a bearer token, \
                     e.g. Prometheus's authorization.credentials_file), serve metrics on a \
                     loopback address, or pass --insecure if only the monitoring network can \
                     reach it"
                );
            }
        }
        Ok(Guards {
            api_tokens,
            app_tokens,
            read_tokens,
            tls,
            metrics_tls,
        })
    }
}
