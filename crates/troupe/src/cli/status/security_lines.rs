//! The security lines of `troupe status`: which APIs demand a token and how
//! many each accepts, the TLS in use and when its certificates expire, and
//! what the daemon refused; so an operator sees an open API, a certificate
//! about to lapse or a client left behind by a rotation without scraping
//! `/metrics`.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use crate::cli::plural;
use crate::cli::render;

/// Within this much of its end a certificate is shouted about and is a
/// problem to `--check`: renewal takes a person, and the daemon warns in
/// its log from the same point.
const NEAR_MS: u64 = 7 * DAY_MS;
const DAY_MS: u64 = 86_400_000;
const HOUR_MS: u64 = 3_600_000;

pub(super) fn security_json(s: &pb::SecurityStatus) -> Value {
    let tls = s.tls.as_ref().map(|t| {
        let mut out = json!({ "client_certificates": t.client_certificates });
        if let Some(o) = out.as_object_mut() {
            render::time_json(o, "certificate_expires", t.certificate_expires_unix_ms);
            render::time_json(o, "ca_expires", t.ca_expires_unix_ms);
        }
        out
    });
    let refused: Vec<Value> = s
        .refused
        .iter()
        .map(|r| json!({ "service": r.service, "reason": r.reason, "count": r.count }))
        .collect();
    let tokens: Vec<Value> = s
        .tokens
        .iter()
        .map(|t| {
            let mut out = json!({
                "credential": t.credential,
                "source": t.source,
                "source_name": t.source_name,
                "position": t.position,
                "accepted": t.accepted,
                "last_from": (!t.last_from.is_empty()).then_some(&t.last_from),
                "short": t.short,
            });
            if let Some(o) = out.as_object_mut() {
                render::time_json(o, "last_accepted", t.last_accepted_unix_ms);
            }
            out
        })
        .collect();
    json!({
        "api_tokens": s.api_tokens,
        "app_tokens": s.app_tokens,
        "read_tokens": s.read_tokens,
        "tokens": tokens,
        "tls": tls,
        "refused": refused,
    })
}

pub(super) fn security_pairs(s: &pb::SecurityStatus) -> Vec<(&'static str, String)> {
    security_pairs_at(s, super::problems::now_ms())
}

fn security_pairs_at(s: &pb::SecurityStatus, now_ms: u64) -> Vec<(&'static str, String)> {
    let mut pairs = vec![("credentials", credentials(s))];
    for (n, token) in s.tokens.iter().enumerate() {
        let label = if n == 0 { "token use" } else { "" };
        pairs.push((label, token_use(token, now_ms)));
    }
    match &s.tls {
        None => pairs.push((
            "tls",
            "off: plaintext (--tls-cert and --tls-key to serve TLS)".to_owned(),
        )),
        Some(t) => {
            pairs.push((
                "tls",
                format!("on; client certificates {}", t.client_certificates),
            ));
            pairs.push((
                "certificate",
                expiry(t.certificate_expires_unix_ms, now_ms, "--tls-cert"),
            ));
            if t.ca_expires_unix_ms > 0 {
                pairs.push((
                    "ca certificate",
                    expiry(t.ca_expires_unix_ms, now_ms, "--tls-ca"),
                ));
            }
        }
    }
    pairs.push(("refused", refused(&s.refused)));
    pairs
}

/// Each credential's tokens, saying plainly which API anyone may call.
fn credentials(s: &pb::SecurityStatus) -> String {
    let tokens = |n: u32, flag: &str| match n {
        0 => format!("no token, open to anyone who reaches the port ({flag} to close it)"),
        1 => "1 token".to_owned(),
        n => format!("{n} tokens (rotating)"),
    };
    let read = match s.read_tokens {
        0 => "no read-only token (--read-token-file)".to_owned(),
        n => format!("read-only: {}", tokens(n, "")),
    };
    format!(
        "client API: {}; app: {}; {read}",
        tokens(s.api_tokens, "--api-token-file"),
        tokens(s.app_tokens, "--app-token-file"),
    )
}

/// One token by its place, and whether and when it let anyone in: what a
/// rotation waits on before it removes the old token.
fn token_use(t: &pb::TokenUse, now_ms: u64) -> String {
    let place = format!("{} token {} of {}", t.credential, t.position, t.source_name);
    let place = if t.short {
        format!("{place} (SHORT: guessable, replace it)")
    } else {
        place
    };
    if t.last_accepted_unix_ms == 0 {
        return format!("{place}: not used since start");
    }
    let ago = match now_ms.saturating_sub(t.last_accepted_unix_ms) {
        0..1000 => "just now".to_owned(),
        ms => format!("{} ago", render::duration(ms)),
    };
    let from = match t.last_from.as_str() {
        "" => String::new(),
        from => format!(" from {from}"),
    };
    format!(
        "{place}: {} since start, last {} ({ago}){from}",
        plural(t.accepted, "request", "requests"),
        render::time_cell(t.last_accepted_unix_ms),
    )
}

/// Where a certificate stands against its end (notAfter): the one
/// judgement the status lines and `--check` (`problems.rs`) both show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lapse {
    /// No date: the certificate could not be parsed.
    Unknown,
    Expired {
        ago_ms: u64,
    },
    /// Within [`NEAR_MS`] of its end.
    Near {
        left_ms: u64,
    },
    Far {
        left_ms: u64,
    },
}

pub(super) fn lapse(at_ms: u64, now_ms: u64) -> Lapse {
    if at_ms == 0 {
        return Lapse::Unknown;
    }
    match at_ms.checked_sub(now_ms) {
        None | Some(0) => Lapse::Expired {
            ago_ms: now_ms - at_ms,
        },
        Some(left_ms) if left_ms <= NEAR_MS => Lapse::Near { left_ms },
        Some(left_ms) => Lapse::Far { left_ms },
    }
}

/// When a certificate lapses, loud when that is within a week or past.
fn expiry(at_ms: u64, now_ms: u64, flag: &str) -> String {
    let at = render::time_cell(at_ms);
    match lapse(at_ms, now_ms) {
        Lapse::Unknown => "expiry unknown (the certificate could not be parsed)".to_owned(),
        Lapse::Expired { ago_ms } => format!(
            "EXPIRED {at} ({} ago): peers refuse it; replace the files of {flag} (read again \
             when they change)",
            coarse(ago_ms)
        ),
        Lapse::Near { left_ms } => format!(
            "EXPIRES {at} (in {}): renew it; the files of {flag} are read again when they change",
            coarse(left_ms)
        ),
        Lapse::Far { left_ms } => format!("expires {at} (in {})", coarse(left_ms)),
    }
}

/// Days, or hours under two days, or minutes under an hour.
fn coarse(ms: u64) -> String {
    if ms >= 2 * DAY_MS {
        format!("{} days", ms / DAY_MS)
    } else if ms >= HOUR_MS {
        plural(ms / HOUR_MS, "hour", "hours")
    } else {
        plural(ms / 60_000, "minute", "minutes")
    }
}

fn refused(refused: &[pb::AuthRefusals]) -> String {
    let total = refused
        .iter()
        .fold(0u64, |sum, r| sum.saturating_add(r.count));
    if total == 0 {
        return "no request refused since start".to_owned();
    }
    let each: Vec<String> = refused
        .iter()
        .map(|r| format!("{} {} {}", r.service, r.reason, r.count))
        .collect();
    format!(
        "{} since start: {} (troupe_auth_refused_total)",
        plural(total, "request", "requests"),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::super::{status_json, status_table};
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn protected() -> pb::SecurityStatus {
        pb::SecurityStatus {
            api_tokens: 2,
            app_tokens: 1,
            read_tokens: 1,
            tokens: vec![
                pb::TokenUse {
                    credential: "api".into(),
                    source: "file".into(),
                    source_name: "/etc/troupe/api-token".into(),
                    position: 1,
                    accepted: 1200,
                    last_accepted_unix_ms: NOW - 3_000,
                    last_from: "10.1.2.3:50000".into(),
                    short: false,
                },
                pb::TokenUse {
                    credential: "api".into(),
                    source: "file".into(),
                    source_name: "/etc/troupe/api-token".into(),
                    position: 2,
                    short: true,
                    ..Default::default()
                },
            ],
            tls: Some(pb::TlsStatus {
                client_certificates: "optional".into(),
                certificate_expires_unix_ms: NOW + 3 * DAY_MS,
                ca_expires_unix_ms: NOW + 400 * DAY_MS,
            }),
            refused: vec![
                pb::AuthRefusals {
                    service: "admin".into(),
                    reason: "read_only".into(),
                    count: 2,
                },
                pb::AuthRefusals {
                    service: "client".into(),
                    reason: "bad_token".into(),
                    count: 10,
                },
            ],
        }
    }

    #[test]
    fn a_protected_daemon_shows_its_tokens_certificates_and_refusals() {
        let text = render::fields(&security_pairs_at(&protected(), NOW));
        for line in [
            "credentials     client API: 2 tokens (rotating); app: 1 token; read-only: 1 token\n",
            "token use       api token 1 of /etc/troupe/api-token: 1200 requests since start, \
             last 2027-01-15T07:59:57.000Z (3s ago) from 10.1.2.3:50000\n",
            "                api token 2 of /etc/troupe/api-token (SHORT: guessable, replace it): \
             not used since start\n",
            "tls             on; client certificates optional\n",
            "certificate     EXPIRES 2027-01-18T08:00:00.000Z (in 3 days): renew it; the files \
             of --tls-cert are read again when they change\n",
            "ca certificate  expires 2028-02-19T08:00:00.000Z (in 400 days)\n",
            "refused         12 requests since start: admin read_only 2, client bad_token 10 \
             (troupe_auth_refused_total)\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        let json = security_json(&protected());
        assert_eq!(json["api_tokens"], 2, "{json}");
        assert_eq!(json["tls"]["client_certificates"], "optional", "{json}");
        assert_eq!(
            json["tls"]["certificate_expires_unix_ms"],
            NOW + 3 * DAY_MS,
            "{json}"
        );
        assert_eq!(json["refused"][1]["count"], 10, "{json}");
        assert_eq!(json["tokens"][0]["last_from"], "10.1.2.3:50000", "{json}");
        assert_eq!(json["tokens"][0]["accepted"], 1200, "{json}");
        assert_eq!(json["tokens"][1]["last_accepted"], Value::Null, "{json}");
        assert_eq!(json["tokens"][1]["last_from"], Value::Null, "{json}");
        assert_eq!(json["tokens"][1]["short"], true, "{json}");
    }

    #[test]
    fn an_open_plaintext_daemon_says_so() {
        let open = pb::SecurityStatus::default();
        let text = render::fields(&security_pairs_at(&open, NOW));
        for line in [
            "credentials  client API: no token, open to anyone who reaches the port (--api-token-file to \
             close it); app: no token, open to anyone who reaches the port (--app-token-file to close it); \
             no read-only token (--read-token-file)\n",
            "tls          off: plaintext (--tls-cert and --tls-key to serve TLS)\n",
            "refused      no request refused since start\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert_eq!(security_json(&open)["tls"], Value::Null);
    }

    #[test]
    fn an_expired_or_unreadable_certificate_is_named() {
        assert_eq!(
            expiry(NOW - 5 * HOUR_MS, NOW, "--tls-cert"),
            "EXPIRED 2027-01-15T03:00:00.000Z (5 hours ago): peers refuse it; replace the files \
             of --tls-cert (read again when they change)"
        );
        assert_eq!(
            expiry(0, NOW, "--tls-cert"),
            "expiry unknown (the certificate could not be parsed)"
        );
        assert_eq!(coarse(59 * 60_000), "59 minutes");
        assert_eq!(coarse(DAY_MS + HOUR_MS), "25 hours");
    }

    #[test]
    fn status_shows_security_only_from_a_daemon_that_reports_it() {
        let s = pb::StatusResponse {
            security: Some(protected()),
            ..Default::default()
        };
        assert!(status_table(&s).contains("tls  "), "{}", status_table(&s));
        assert_eq!(status_json(&s)["security"]["read_tokens"], 1);
        let old = pb::StatusResponse::default();
        assert!(!status_table(&old).contains("credentials"));
        assert_eq!(status_json(&old)["security"], Value::Null);
    }
}
