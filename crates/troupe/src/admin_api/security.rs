//! What `Status` tells of the daemon's protection: how many tokens each
//! credential accepts now and each one's use, the TLS in use with its
//! certificates' expiry, and the requests refused so far. Counts, places,
//! addresses and dates only: never a token, a digest of one, or a key.

use std::sync::Arc;

use troupe_proto::v1 as pb;
use troupe_tls::{ClientCerts, Tls};

use crate::auth::{Refusals, TokenUsage, Tokens};

/// The daemon's credentials and TLS, as its guards use them.
#[derive(Debug, Clone, Default)]
pub struct Security {
    pub api_tokens: Option<Arc<Tokens>>,
    pub app_tokens: Option<Arc<Tokens>>,
    pub read_tokens: Option<Arc<Tokens>>,
    pub tls: Option<Tls>,
    pub refusals: Refusals,
}

impl Security {
    pub fn status(&self) -> pb::SecurityStatus {
        let count = |tokens: &Option<Arc<Tokens>>| {
            tokens
                .as_ref()
                .map_or(0, |t| u32::try_from(t.count()).unwrap_or(u32::MAX))
        };
        pb::SecurityStatus {
            api_tokens: count(&self.api_tokens),
            app_tokens: count(&self.app_tokens),
            read_tokens: count(&self.read_tokens),
            tls: self.tls.as_ref().map(tls_status),
            refused: self
                .refusals
                .snapshot()
                .into_iter()
                .map(|r| pb::AuthRefusals {
                    service: r.service.to_owned(),
                    reason: r.reason.label().to_owned(),
                    count: r.count,
                })
                .collect(),
            tokens: [&self.api_tokens, &self.app_tokens, &self.read_tokens]
                .into_iter()
                .flatten()
                .flat_map(|tokens| tokens.usage())
                .map(|usage| token_use(&usage))
                .collect(),
        }
    }
}

fn token_use(usage: &TokenUsage) -> pb::TokenUse {
    pb::TokenUse {
        credential: usage.credential.label().to_owned(),
        source: usage.place.kind().to_owned(),
        source_name: usage.place.source_name(),
        position: usage.place.position,
        accepted: usage.accepted,
        last_accepted_unix_ms: usage.last_accepted_unix_ms.unwrap_or(0),
        last_from: usage.last_from.map(|a| a.to_string()).unwrap_or_default(),
        short: usage.short,
    }
}

fn tls_status(tls: &Tls) -> pb::TlsStatus {
    let expiry = tls.expiry();
    pb::TlsStatus {
        client_certificates: match tls.client_certs() {
            ClientCerts::Optional => "optional",
            ClientCerts::Required => "required",
            ClientCerts::MembersOnly => "members only",
        }
        .to_owned(),
        certificate_expires_unix_ms: unix_ms(expiry.own),
        ca_expires_unix_ms: unix_ms(expiry.ca),
    }
}

/// Unix seconds as Unix ms; 0 for none, or one before 1970.
fn unix_ms(seconds: Option<i64>) -> u64 {
    seconds
        .and_then(|s| u64::try_from(s).ok())
        .and_then(|s| s.checked_mul(1000))
        .unwrap_or(0)
}
