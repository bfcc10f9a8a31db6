//! [`ServerTls`]: TLS for a listener that proves who it is with a
//! certificate and key reloaded when their files change, and checks its
//! clients' certificates only when told to. The admission webhook
//! (`troupe injector`) asks for none: the Kubernetes API server checks the
//! webhook's certificate against the `caBundle` it was given and presents
//! none, and kubelet's HTTPS probes check nothing. A daemon's `/metrics`
//! asks for none either unless the daemon requires client certificates
//! ([`ServerTls::load_requiring_clients`]); that listener speaks HTTP
//! rather than gRPC, hence a configuration apart from [`crate::Tls`]'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::files::{read_certs, read_key, read_roots, stamp_of};
use crate::tls::client_verifier;
use crate::{TlsError, TlsFiles};

/// What the certificate, key and (when clients are checked) CA files
/// looked like when last read.
type Stamp = [Option<(SystemTime, u64)>; 3];

/// A server-only TLS set-up, rebuilt from its files when they change (the
/// check is made as each connection starts, as [`crate::Tls`] does); cheap
/// to clone.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.inner.cert)
            .field("key", &self.inner.key)
            .field("clients_ca", &self.inner.clients_ca)
            .finish_non_exhaustive()
    }
}

struct Inner {
    cert: PathBuf,
    key: PathBuf,
    /// The CA every client's certificate must chain to; `None`: clients
    /// are asked for no certificate.
    clients_ca: Option<PathBuf>,
    alpn: Vec<Vec<u8>>,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<(Stamp, Arc<ServerConfig>)>,
    /// The stamp of files that failed to load, reported once.
    failed: Mutex<Option<Stamp>>,
}

impl ServerTls {
    /// Reads `cert` (PEM chain, leaf first) and `key` and builds the
    /// configuration, offering `alpn` (e.g. `h2` and `http/1.1`) and asking
    /// clients for no certificate; fails with what is wrong with the files.
    pub fn load(cert: PathBuf, key: PathBuf, alpn: Vec<Vec<u8>>) -> Result<Self, TlsError> {
        Self::with_clients(cert, key, None, alpn)
    }

    /// As [`ServerTls::load`] with `files`' certificate and key, and every
    /// client must present a certificate chaining to `files.ca` (any
    /// identity): checked as [`crate::Tls`]'s listener checks clients under
    /// [`crate::ClientCerts::Required`], and the CA read again when it
    /// changes, as the certificate and key are.
    pub fn load_requiring_clients(files: TlsFiles, alpn: Vec<Vec<u8>>) -> Result<Self, TlsError> {
        Self::with_clients(files.cert, files.key, Some(files.ca), alpn)
    }

    fn with_clients(
        cert: PathBuf,
        key: PathBuf,
        clients_ca: Option<PathBuf>,
        alpn: Vec<Vec<u8>>,
    ) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let built = build(&cert, &key, clients_ca.as_deref(), &alpn, &provider)?;
        Ok(Self {
            inner: Arc::new(Inner {
                cert,
                key,
                clients_ca,
                alpn,
                provider,
                current: ArcSwap::from_pointee(built),
                failed: Mutex::new(None),
            }),
        })
    }

    /// The server side of a handshake, as the files are now (the last good
    /// configuration while changed files cannot be used).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        let inner = &self.inner;
        let current = inner.current.load_full();
        let now = stamp(&inner.cert, &inner.key, inner.clients_ca.as_deref());
        if current.0 == now {
            return current.1.clone();
        }
        let mut failed = inner.failed.lock();
        if *failed == Some(now) {
            return current.1.clone();
        }
        match build(
            &inner.cert,
            &inner.key,
            inner.clients_ca.as_deref(),
            &inner.alpn,
            &inner.provider,
        ) {
            Ok(fresh) => {
                let config = fresh.1.clone();
                inner.current.store(Arc::new(fresh));
                *failed = None;
                tracing::info!(cert = %inner.cert.display(), "TLS certificate files changed; new connections use them");
                config
            }
            Err(error) => {
                *failed = Some(now);
                tracing::warn!(%error, "TLS files changed but cannot be used; connections keep the previous certificate until they are fixed");
                current.1.clone()
            }
        }
    }
}

fn stamp(cert: &Path, key: &Path, clients_ca: Option<&Path>) -> Stamp {
    [stamp_of(cert), stamp_of(key), clients_ca.and_then(stamp_of)]
}

fn build(
    cert: &Path,
    key: &Path,
    clients_ca: Option<&Path>,
    alpn: &[Vec<u8>],
    provider: &Arc<CryptoProvider>,
) -> Result<(Stamp, Arc<ServerConfig>), TlsError> {
    // Stamped before reading: a change while reading is seen next time.
    let stamp = stamp(cert, key, clients_ca);
    let chain = read_certs(cert, "certificate", "--tls-cert")?;
    let private = read_key(key)?;
    CertifiedKey::from_der(chain.clone(), private.clone_key(), provider).map_err(|source| {
        TlsError::KeyMismatch {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        }
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match clients_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(client_verifier(
            read_roots(ca)?,
            provider,
            ca,
            false,
            None,
        )?),
    };
    let mut config = builder.with_single_cert(chain, private)?;
    config.alpn_protocols = alpn.to_vec();
    Ok((stamp, Arc::new(config)))
}
