//! What can go wrong loading TLS material or making certificates.

use std::path::PathBuf;

/// Why TLS could not be set up. Each says which file or setting is at fault
/// and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS {what} file {}: {source}; check the path given to {flag}", path.display())]
    Read {
        what: &'static str,
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the TLS {what} file {} is not valid PEM ({reason}); {flag} expects a PEM file", path.display())]
    Pem {
        what: &'static str,
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("the TLS {what} file {} holds no {expected}; {flag} expects a PEM file with one", path.display())]
    Empty {
        what: &'static str,
        flag: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error(
        "the key in {} does not belong to the certificate in {} ({source}); give the key the \
         certificate was issued for", key.display(), cert.display()
    )]
    KeyMismatch {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the CA file {} holds no usable CA certificate ({reason})", path.display())]
    BadCa { path: PathBuf, reason: String },
    #[error(
        "no peer identity to check: the certificate {} carries no URI identity (e.g. \
         spiffe://troupe.local/node) and no --tls-peer-identity was given; give the identities \
         other cluster members' certificates carry", cert.display()
    )]
    NoPeerIdentity { cert: PathBuf },
    #[error("cannot set up TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("cannot make the development certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}
