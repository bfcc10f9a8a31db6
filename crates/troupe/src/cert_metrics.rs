//! When the daemon's TLS certificates expire, as an OpenMetrics gauge: an
//! operator alerts on it before a certificate lapses, and sees whether a
//! renewal on disk was picked up, since the figure is that of the
//! certificate in use (read again when its files change).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use troupe_tls::Tls;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Which {
    certificate: &'static str,
}

/// Appends the family to `out`, OpenMetrics text ending in `# EOF`.
pub fn encode(tls: &Tls, out: &mut String) -> std::fmt::Result {
    let expiry = tls.expiry();
    let family = Family::<Which, Gauge>::default();
    for (certificate, at) in [("own", expiry.own), ("ca", expiry.ca)] {
        if let Some(at) = at {
            family.get_or_create(&Which { certificate }).set(at);
        }
    }
    let mut registry = Registry::with_prefix("troupe");
    registry.register_with_unit(
        "tls_certificate_expiry_timestamp",
        "When the TLS certificate in use stops being valid (notAfter), as Unix time: own \
         (--tls-cert) and ca (the soonest of --tls-ca)",
        Unit::Seconds,
        family,
    );
    prometheus_client::encoding::text::encode(out, &registry)
}
