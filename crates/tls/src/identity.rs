//! Who a certificate says its holder is, and whether that is a member of
//! the cluster.

use std::sync::Arc;

use rustls::{CertificateError, OtherError};
use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

/// The identities in a certificate's subject alternative names: URIs
/// (`spiffe://troupe.local/node`) and DNS names, in the order they appear.
/// A certificate that does not parse has none.
pub fn identities_of(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some((*uri).to_owned()),
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        })
        .collect()
}

/// The identities a cluster member (daemon or placement replica) may
/// present; a peer is accepted when its certificate carries any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentities(Vec<String>);

/// A certificate that chains to the CA but names no cluster member.
#[derive(Debug, thiserror::Error)]
#[error(
    "the peer's certificate names {presented:?}, none of the cluster's identities {expected:?}: \
     issue it with one of those identities, or add its identity with --tls-peer-identity"
)]
pub struct NotAPeer {
    pub presented: Vec<String>,
    pub expected: Vec<String>,
}

impl PeerIdentities {
    pub fn new(identities: Vec<String>) -> Self {
        Self(identities)
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Whether the certificate names a member.
    pub fn check(&self, cert: &CertificateDer<'_>) -> Result<(), NotAPeer> {
        let presented = identities_of(cert);
        if presented.iter().any(|id| self.0.contains(id)) {
            return Ok(());
        }
        Err(NotAPeer {
            presented,
            expected: self.0.clone(),
        })
    }

    /// The same check as rustls reports it, so the handshake fails with the
    /// reason.
    pub(crate) fn check_in_handshake(
        &self,
        cert: &CertificateDer<'_>,
    ) -> Result<(), rustls::Error> {
        self.check(cert).map_err(|e| {
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e))))
        })
    }
}
