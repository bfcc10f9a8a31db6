//! [`Tls`]: one process's TLS set-up, rebuilt from its files when they
//! change. The check is made when a connection starts (a few `stat`s), so
//! a certificate renewed on disk is what the next connection presents and
//! no timer or restart is involved; connections already up keep theirs.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::CertificateDer;

use crate::files::{read_roots, Stamp, TlsFiles};
use crate::identity::{identities_of, NotAPeer, PeerIdentities};
use crate::verify::{MemberClientVerifier, MemberServerVerifier};
use crate::{Expiry, TlsError};

/// Who may connect to a TLS listener without a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// Anyone may connect; a certificate, if presented, must chain to the
    /// CA (the daemon's listener: clients and apps authenticate with
    /// tokens, daemons with their certificate, checked per service).
    Optional,
    /// A certificate from the CA is required of every client.
    Required,
    /// Only cluster members: a certificate from the CA carrying a member
    /// identity (placement replicas).
    MembersOnly,
}

/// How a process uses TLS.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub files: TlsFiles,
    /// Identities accepted from cluster members. Empty: the URI identities
    /// of this process's own certificate (members share one).
    pub peer_identities: Vec<String>,
    pub client_certs: ClientCerts,
}

/// The TLS configuration of one process, shared by its listener and its
/// outgoing connections; cheap to clone.
#[derive(Clone)]
pub struct Tls {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.inner.settings.files)
            .field("members", &self.inner.current.load().members)
            .finish_non_exhaustive()
    }
}

struct Inner {
    settings: TlsSettings,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<Configs>,
    /// The stamp of files that failed to load, so a broken renewal is
    /// reported once and not re-read by every connection.
    failed: Mutex<Option<Stamp>>,
}

struct Configs {
    stamp: Stamp,
    expiry: Expiry,
    server: Arc<ServerConfig>,
    member_client: Arc<ClientConfig>,
    members: Arc<PeerIdentities>,
}

/// gRPC is HTTP/2 only.
const ALPN_H2: &[u8] = b"h2";

impl Tls {
    /// Reads the files and builds the configuration; fails with what is
    /// wrong with them.
    pub fn load(settings: TlsSettings) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let configs = build(&settings, &provider)?;
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                provider,
                current: ArcSwap::from_pointee(configs),
                failed: Mutex::new(None),
            }),
        })
    }

    /// The configuration the files hold now (rebuilt if they changed and
    /// load; otherwise the last good one).
    fn current(&self) -> Arc<Configs> {
        let inner = &self.inner;
        let configs = inner.current.load_full();
        let now = inner.settings.files.stamp();
        if configs.stamp == now {
            return configs;
        }
        let mut failed = inner.failed.lock();
        if *failed == Some(now) {
            return configs;
        }
        match build(&inner.settings, &inner.provider) {
            Ok(fresh) => {
                let fresh = Arc::new(fresh);
                inner.current.store(fresh.clone());
                *failed = None;
                tracing::info!(cert = %inner.settings.files.cert.display(), "TLS certificate files changed; new connections use them");
                fresh
            }
            Err(error) => {
                *failed = Some(now);
                tracing::warn!(%error, "TLS files changed but cannot be used; connections keep the previous certificate until they are fixed");
                configs
            }
        }
    }

    /// The server side of a handshake, as the files are now.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current().server.clone()
    }

    /// The client side of a connection to another cluster member: presents
    /// this process's certificate, accepts only a member's.
    pub fn member_client_config(&self) -> Arc<ClientConfig> {
        self.current().member_client.clone()
    }

    /// When the certificate and CA in use expire (read again if the files
    /// changed, as for a new connection).
    pub fn expiry(&self) -> Expiry {
        self.current().expiry
    }

    /// Who may connect without a certificate, as configured.
    pub fn client_certs(&self) -> ClientCerts {
        self.inner.settings.client_certs
    }

    /// The identities accepted from cluster members.
    pub fn members(&self) -> Arc<PeerIdentities> {
        self.current().members.clone()
    }

    /// Whether a connection's client certificates (as tonic hands them to a
    /// service; already chain-checked in the handshake) name a member.
    pub fn check_member(&self, certs: Option<&[CertificateDer<'_>]>) -> Result<(), NotAPeer> {
        let members = self.members();
        match certs.and_then(<[_]>::first) {
            Some(leaf) => members.check(leaf),
            None => Err(NotAPeer {
                presented: Vec::new(),
                expected: members.as_slice().to_vec(),
            }),
        }
    }
}

fn build(settings: &TlsSettings, provider: &Arc<CryptoProvider>) -> Result<Configs, TlsError> {
    let files = &settings.files;
    let stamp = files.stamp();
    let material = files.load()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    material.expiry.warn_if_near(&files.cert, now);
    CertifiedKey::from_der(material.chain.clone(), material.key.clone_key(), provider).map_err(
        |source| TlsError::KeyMismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        },
    )?;
    let members = if settings.peer_identities.is_empty() {
        let own: Vec<String> = material
            .chain
            .first()
            .map(identities_of)
            .unwrap_or_default()
            .into_iter()
            .filter(|id| id.contains("://"))
            .collect();
        if own.is_empty() {
            return Err(TlsError::NoPeerIdentity {
                cert: files.cert.clone(),
            });
        }
        own
    } else {
        settings.peer_identities.clone()
    };
    let members = Arc::new(PeerIdentities::new(members));

    let client_check = client_verifier(
        material.roots.clone(),
        provider,
        &files.ca,
        settings.client_certs == ClientCerts::Optional,
        (settings.client_certs == ClientCerts::MembersOnly).then(|| members.clone()),
    )?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(client_check)
        .with_single_cert(material.chain.clone(), material.key.clone_key())?;
    server.alpn_protocols = vec![ALPN_H2.to_vec()];

    let server_check = MemberServerVerifier {
        roots: material.roots.clone(),
        members: members.clone(),
        algorithms: provider.signature_verification_algorithms,
    };
    let mut member_client = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(server_check))
        .with_client_auth_cert(material.chain, material.key)?;
    member_client.alpn_protocols = vec![ALPN_H2.to_vec()];

    Ok(Configs {
        stamp,
        expiry: material.expiry,
        server: Arc::new(server),
        member_client: Arc::new(member_client),
        members,
    })
}

/// How a listener checks the certificates its clients present: chained to
/// `roots` (read from `ca`), demanded of every client unless
/// `anonymous_allowed`, and naming a member when `members_only` says
/// which. One implementation for every listener that checks client
/// certificates ([`Tls`]'s, and
/// [`crate::ServerTls::load_requiring_clients`]'s, `/metrics`), so a
/// certificate passes or fails the chain check alike on each.
pub(crate) fn client_verifier(
    roots: Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
    ca: &Path,
    anonymous_allowed: bool,
    members_only: Option<Arc<PeerIdentities>>,
) -> Result<Arc<MemberClientVerifier>, TlsError> {
    let chain = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
    let chain = if anonymous_allowed {
        chain.allow_unauthenticated()
    } else {
        chain
    }
    .build()
    .map_err(|e| TlsError::BadCa {
        path: ca.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(Arc::new(MemberClientVerifier {
        chain,
        members_only,
    }))
}

/// A client configuration that checks the server's name as usual (clients
/// and the CLI dialling a daemon by the name its certificate carries),
/// presenting a client certificate when given one.
pub fn client_config_for_server(
    ca: &Path,
    client_cert: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = read_roots(ca)?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match client_cert {
        Some((cert, key)) => {
            let files = TlsFiles {
                cert: cert.to_owned(),
                key: key.to_owned(),
                ca: ca.to_owned(),
            };
            let material = files.load()?;
            builder.with_client_auth_cert(material.chain, material.key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(config))
}
