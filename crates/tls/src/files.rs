//! The three files TLS needs (certificate chain, private key, CA bundle):
//! reading them and noticing when they change.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Expiry, TlsError};

/// Where a process's TLS material lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This process's certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificates peers' certificates must chain to (PEM).
    pub ca: PathBuf,
}

/// The contents, parsed.
pub(crate) struct Material {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub roots: Arc<RootCertStore>,
    pub expiry: Expiry,
}

/// What the files looked like when last read: a change in any of them
/// means read them again. Length besides the time catches writes within
/// one tick of a coarse clock.
pub(crate) type Stamp = [Option<(SystemTime, u64)>; 3];

impl TlsFiles {
    pub(crate) fn stamp(&self) -> Stamp {
        [
            stamp_of(&self.cert),
            stamp_of(&self.key),
            stamp_of(&self.ca),
        ]
    }

    pub(crate) fn load(&self) -> Result<Material, TlsError> {
        let chain = read_certs(&self.cert, "certificate", "--tls-cert")?;
        let key = read_key(&self.key)?;
        let ca = read_certs(&self.ca, "CA", "--tls-ca")?;
        let expiry = Expiry::of(&chain, &ca);
        let roots = roots_of(&self.ca, ca)?;
        Ok(Material {
            chain,
            key,
            roots,
            expiry,
        })
    }
}

/// The CA certificates in a PEM file (`--tls-ca`), as trust anchors.
pub(crate) fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    roots_of(path, read_certs(path, "CA", "--tls-ca")?)
}

/// `certs`, read from `path`, as trust anchors.
fn roots_of(
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// One file's modification time and length, `None` when it cannot be read.
pub(crate) fn stamp_of(path: &Path) -> Option<(SystemTime, u64)> {
    // Following symlinks, as Kubernetes swaps a secret's files.
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

/// The private key in a PEM file (`--tls-key`).
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let key_pem = read(path, "key", "--tls-key")?;
    PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what: "key",
            flag: "--tls-key",
            path: path.to_owned(),
            expected: "PRIVATE KEY block",
        },
        other => TlsError::Pem {
            what: "key",
            flag: "--tls-key",
            path: path.to_owned(),
            reason: other.to_string(),
        },
    })
}

fn read(path: &Path, what: &'static str, flag: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        flag,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate in a PEM file, in order.
pub(crate) fn read_certs(
    path: &Path,
    what: &'static str,
    flag: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path, what, flag)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            flag,
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            flag,
            path: path.to_owned(),
            expected: "CERTIFICATE block",
        });
    }
    Ok(certs)
}
