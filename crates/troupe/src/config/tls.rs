//! TLS settings, shared by `troupe serve` and `troupe placement serve`:
//! flags, the `[tls]` table of the config file, and what they resolve to.

use std::path::PathBuf;

use serde::Deserialize;
use troupe_tls::{ClientCerts, TlsFiles, TlsSettings};

/// Which process the settings are for: replicas accept cluster members
/// only, daemons also serve clients and apps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsRole {
    Daemon,
    Placement,
}

/// Whether clients of a daemon must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientCertsArg {
    /// Clients and apps may connect without one (they authenticate with
    /// tokens); one presented must chain to --tls-ca.
    Optional,
    /// Every client and app must present a certificate from --tls-ca, and
    /// so must scrapers of --metrics-listen over HTTPS.
    Required,
}

/// TLS flags; in the config file, a `[tls]` table with `cert`, `key`, `ca`,
/// `peer_identities` and `client_certs`.
#[derive(Debug, Clone, Default, clap::Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsArgs {
    /// This process's certificate chain (PEM), shown to clients and to other
    /// cluster members; with --tls-key and --tls-ca it turns TLS on. Re-read
    /// when it changes: the next connection uses a renewed one.
    #[arg(
        id = "tls_cert",
        long = "tls-cert",
        env = "TROUPE_TLS_CERT",
        value_name = "FILE"
    )]
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        id = "tls_key",
        long = "tls-key",
        env = "TROUPE_TLS_KEY",
        value_name = "FILE"
    )]
    pub key: Option<PathBuf>,
    /// CA certificates (PEM) that daemons', replicas' and clients'
    /// certificates must chain to.
    #[arg(
        id = "tls_ca",
        long = "tls-ca",
        env = "TROUPE_TLS_CA",
        value_name = "FILE"
    )]
    pub ca: Option<PathBuf>,
    /// An identity (URI or DNS name in the certificate) other daemons and
    /// replicas must carry; repeat for several, or separate with commas [default: the URI identities
    /// of --tls-cert, e.g. spiffe://troupe.local/node].
    #[arg(
        id = "tls_peer_identity",
        long = "tls-peer-identity",
        env = "TROUPE_TLS_PEER_IDENTITY",
        value_delimiter = ',',
        value_name = "IDENTITY"
    )]
    #[serde(default)]
    pub peer_identities: Vec<String>,
    /// Whether clients and apps (and scrapers of /metrics over HTTPS) must
    /// present a certificate [default: optional].
    #[arg(
        id = "tls_client_certs",
        long = "tls-client-certs",
        env = "TROUPE_TLS_CLIENT_CERTS",
        value_enum
    )]
    pub client_certs: Option<ClientCertsArg>,
}

impl TlsArgs {
    /// The settings, flags over the file's; `None` when TLS is off.
    pub fn resolve(
        &self,
        file: Option<&TlsArgs>,
        role: TlsRole,
    ) -> anyhow::Result<Option<TlsSettings>> {
        let empty = TlsArgs::default();
        let file = file.unwrap_or(&empty);
        let cert = self.cert.clone().or_else(|| file.cert.clone());
        let key = self.key.clone().or_else(|| file.key.clone());
        let ca = self.ca.clone().or_else(|| file.ca.clone());
        let peer_identities = if self.peer_identities.is_empty() {
            file.peer_identities.clone()
        } else {
            self.peer_identities.clone()
        };
        let client_certs = self.client_certs.or(file.client_certs);
        let (cert, key, ca) = match (cert, key, ca) {
            (Some(cert), Some(key), Some(ca)) => (cert, key, ca),
            (None, None, None) => {
                if !peer_identities.is_empty() || client_certs.is_some() {
                    anyhow::bail!(
                        "--tls-peer-identity and --tls-client-certs need TLS on: give --tls-cert, \
                         --tls-key and --tls-ca (`troupe certs` makes development ones)"
                    );
                }
                return Ok(None);
            }
            (cert, key, ca) => {
                let missing: Vec<&str> = [
                    (cert.is_none(), "--tls-cert"),
                    (key.is_none(), "--tls-key"),
                    (ca.is_none(), "--tls-ca"),
                ]
                .into_iter()
                .filter_map(|(absent, flag)| absent.then_some(flag))
                .collect();
                anyhow::bail!(
                    "TLS needs a certificate, its key and the CA together; {} missing (or leave \
                     all three out for plaintext on loopback)",
                    missing.join(" and ")
                );
            }
        };
        let client_certs = match (role, client_certs) {
            (TlsRole::Placement, None) => ClientCerts::MembersOnly,
            (TlsRole::Placement, Some(_)) => anyhow::bail!(
                "--tls-client-certs is for daemons: placement replicas always require a \
                 cluster member's certificate"
            ),
            (TlsRole::Daemon, None | Some(ClientCertsArg::Optional)) => ClientCerts::Optional,
            (TlsRole::Daemon, Some(ClientCertsArg::Required)) => ClientCerts::Required,
        };
        Ok(Some(TlsSettings {
            files: TlsFiles { cert, key, ca },
            peer_identities,
            client_certs,
        }))
    }
}
