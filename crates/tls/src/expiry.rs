//! When the certificates a process uses stop being valid: for a metric an
//! operator alerts on before they do, and a warning when a certificate is
//! loaded that has little time left (a renewal that did not happen).

use rustls_pki_types::CertificateDer;

/// A certificate loaded with less than this left is logged as a warning.
const WARN_WITHIN_SECS: i64 = 7 * 24 * 3600;

/// The end of validity (`notAfter`) of what is in use, as Unix seconds;
/// `None` where a certificate does not parse as X.509.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expiry {
    /// This process's own certificate (the leaf of `--tls-cert`).
    pub own: Option<i64>,
    /// The soonest of the CA bundle's (`--tls-ca`): once it passes, peers
    /// issued by that CA are refused.
    pub ca: Option<i64>,
}

impl Expiry {
    pub(crate) fn of(chain: &[CertificateDer<'_>], ca: &[CertificateDer<'_>]) -> Self {
        Self {
            own: chain.first().and_then(not_after),
            ca: ca.iter().filter_map(not_after).min(),
        }
    }

    /// Warns of a certificate that expires within a week (or has), naming
    /// `cert`; `now` in Unix seconds.
    pub(crate) fn warn_if_near(&self, cert: &std::path::Path, now: i64) {
        for (which, at) in [("own", self.own), ("CA", self.ca)] {
            let Some(at) = at else { continue };
            let left = at.saturating_sub(now);
            if left < WARN_WITHIN_SECS {
                tracing::warn!(
                    certificate = which,
                    cert = %cert.display(),
                    not_after_unix = at,
                    hours_left = left / 3600,
                    "a TLS certificate in use expires within a week (or has): renew it; the files \
                     are read again when they change, with no restart"
                );
            }
        }
    }
}

fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::{issue, new_ca, Subject};
    use rustls_pki_types::pem::PemObject;

    type Result = std::result::Result<(), Box<dyn std::error::Error>>;

    fn der(
        pem: &str,
    ) -> std::result::Result<CertificateDer<'static>, rustls_pki_types::pem::Error> {
        CertificateDer::from_pem_slice(pem.as_bytes())
    }

    #[test]
    fn reads_the_leaf_and_the_soonest_ca() -> Result {
        let long_ca = new_ca("long", 30)?;
        let short_ca = new_ca("short", 3)?;
        let leaf = issue(&long_ca, &Subject::member("n1"), 10)?;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let expiry = Expiry::of(
            &[der(&leaf.cert)?],
            &[der(&long_ca.cert)?, der(&short_ca.cert)?],
        );
        let days = |at: Option<i64>| at.map(|at| (at - now + 3600) / 86_400);
        assert_eq!(days(expiry.own), Some(10));
        assert_eq!(days(expiry.ca), Some(3));
        Ok(())
    }

    #[test]
    fn a_certificate_that_does_not_parse_has_no_expiry() {
        let expiry = Expiry::of(&[CertificateDer::from(vec![1, 2, 3])], &[]);
        assert_eq!(expiry, Expiry::default());
    }
}
