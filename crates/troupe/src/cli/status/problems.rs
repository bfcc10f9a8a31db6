//! `troupe status --check`: what in a daemon's status needs a person, each
//! with what to do, so that a script, a cron job or an on-call engineer
//! gets a yes or no (exit 7) instead of reading every line. Judged from the
//! status alone, at `now`: no second request, no thresholds to configure.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::security_lines::{lapse, Lapse};
use crate::cli::{emit, emit_json, fail, plural, render, Exit, Output};

/// A bound counts as nearly reached from this share of it on (pending
/// calls, watched streams): new work is about to be refused.
const NEAR_BOUND_PERCENT: u64 = 90;

/// Now, in Unix ms, to judge certificates by.
pub(in crate::cli) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Something wrong, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::cli) struct Problem {
    pub(in crate::cli) what: String,
    pub(in crate::cli) fix: String,
}

pub(in crate::cli) fn problem(what: impl Into<String>, fix: impl Into<String>) -> Problem {
    Problem {
        what: what.into(),
        fix: fix.into(),
    }
}

pub(in crate::cli) fn problems(s: &pb::StatusResponse, now_ms: u64) -> Vec<Problem> {
    let mut found = Vec::new();
    let flush = s.flush.clone().unwrap_or_default();
    if flush.failing {
        found.push(problem(
            format!("the store is failing: {}", flush.last_error),
            "durable calls get UNAVAILABLE and dirty state waits in memory; fix the store (the \
             daemon retries on its own)",
        ));
    }
    if s.inbound_links.is_some() && !s.serving {
        found.push(problem(
            "its placement lease lapsed: every call to its actors gets UNAVAILABLE",
            "check that the placement replicas are up and reachable from it (`troupe cluster \
             status`); it rejoins on its own",
        ));
    }
    if let Some(m) = s.memory.as_ref().filter(|m| m.shedding) {
        found.push(problem(
            format!(
                "it refuses new calls for memory: {} resident of a {} limit",
                render::bytes(m.resident_bytes),
                render::bytes(m.memory_limit_bytes)
            ),
            "give it more memory, or bound what it keeps (--max-activations, \
             --idempotency-memory-bytes)",
        ));
    }
    let near = s
        .max_pending_calls
        .saturating_mul(NEAR_BOUND_PERCENT)
        .div_ceil(100);
    if s.max_pending_calls > 0 && s.pending_calls >= near {
        found.push(problem(
            format!(
                "{} of at most {} calls pending: new ones are about to get RESOURCE_EXHAUSTED",
                s.pending_calls, s.max_pending_calls
            ),
            "add daemons or app instances, or raise --max-pending-calls if there is room",
        ));
    }
    if let Some(e) = s.events.as_ref().filter(|e| e.max_watched > 0) {
        let near = e
            .max_watched
            .saturating_mul(NEAR_BOUND_PERCENT)
            .div_ceil(100);
        if e.watched >= near {
            found.push(problem(
                format!(
                    "{} of at most {} actors and types watched: new watches are about to get \
                     RESOURCE_EXHAUSTED",
                    e.watched, e.max_watched
                ),
                "stop watches nobody reads (a stream is held 30 s after its last poll), or \
                 raise --max-watched-actors if there is memory for it",
            ));
        }
    }
    if let Some(d) = s.delivery.as_ref() {
        if d.dead_letters_error.is_empty() && d.dead_letters > 0 {
            let at_least = if d.dead_letters_at_least { "≥" } else { "" };
            found.push(problem(
                format!(
                    "{at_least}{} in the store",
                    plural(d.dead_letters, "dead letter", "dead letters")
                ),
                "see why with `troupe dead-letters list`, then re-drive or drop them",
            ));
        }
    }
    for ty in s.types.iter().filter(|t| t.apps.is_empty()) {
        found.push(problem(
            format!("actor type {} has no app connected", ty.name),
            format!(
                "start an app that hosts {}; its calls wait for one, then fail",
                ty.name
            ),
        ));
    }
    if let Some(security) = &s.security {
        found.extend(security_problems(s, security, now_ms));
    }
    found
}

fn security_problems(
    s: &pb::StatusResponse,
    security: &pb::SecurityStatus,
    now_ms: u64,
) -> Vec<Problem> {
    let mut found = Vec::new();
    let beyond_loopback = s
        .listen
        .parse::<SocketAddr>()
        .is_ok_and(|a| !a.ip().is_loopback());
    if beyond_loopback && security.api_tokens == 0 {
        found.push(problem(
            format!(
                "the client API on {} is open to anyone who reaches it (--insecure)",
                s.listen
            ),
            "give it --api-token-file (and --app-token-file), or make sure only trusted callers \
             reach the address",
        ));
    }
    for token in security.tokens.iter().filter(|t| t.short) {
        found.push(problem(
            format!(
                "{} token {} of {} is too short to resist brute force",
                token.credential, token.position, token.source_name
            ),
            "replace it with 32 random bytes (`head -c 32 /dev/urandom | base64`): list the new \
             token beside it, move the callers over, then remove it (docs/security.md)",
        ));
    }
    let Some(tls) = &security.tls else {
        return found;
    };
    for (which, at, flag) in [
        ("certificate", tls.certificate_expires_unix_ms, "--tls-cert"),
        ("CA certificate", tls.ca_expires_unix_ms, "--tls-ca"),
    ] {
        let when = render::time_cell(at);
        match lapse(at, now_ms) {
            Lapse::Expired { .. } => found.push(problem(
                format!("its {which} expired at {when}: peers refuse it"),
                format!("replace the files of {flag}; they are read again when they change"),
            )),
            Lapse::Near { .. } => found.push(problem(
                format!("its {which} expires at {when}, within a week"),
                format!("renew it; the files of {flag} are read again when they change"),
            )),
            Lapse::Unknown | Lapse::Far { .. } => {}
        }
    }
    found
}

/// Prints a status, as JSON or as a table; when it was checked (`found`
/// is `Some`), with the problems found (a `problems` array, or a list
/// under the table), and then fails with exit 7 naming `subject` ("the
/// daemon at ...", "the cluster") when there is one.
pub(in crate::cli) fn emit_checked(
    output: Output,
    json: impl FnOnce() -> Value,
    table: impl FnOnce() -> String,
    found: Option<Vec<Problem>>,
    subject: &str,
) -> anyhow::Result<()> {
    match (output, &found) {
        (Output::Json, _) => {
            let mut json = json();
            if let (Some(found), Some(o)) = (&found, json.as_object_mut()) {
                o.insert("problems".into(), problems_json(found));
            }
            emit_json(&json)?;
        }
        (Output::Table, Some(found)) => emit(&format!("{}\n{}", table(), problems_text(found)))?,
        (Output::Table, None) => emit(&table())?,
    }
    match found {
        Some(found) if !found.is_empty() => Err(fail(
            Exit::Problems,
            format!(
                "{subject} has {} (listed above)",
                plural(found.len() as u64, "problem", "problems")
            ),
        )),
        _ => Ok(()),
    }
}

fn problems_json(found: &[Problem]) -> Value {
    found
        .iter()
        .map(|p| json!({ "problem": p.what, "fix": p.fix }))
        .collect()
}

fn problems_text(found: &[Problem]) -> String {
    if found.is_empty() {
        return "no problems found\n".to_owned();
    }
    let mut out = format!("{}:\n", plural(found.len() as u64, "problem", "problems"));
    for p in found {
        out.push_str(&format!("  - {}\n    {}\n", p.what, p.fix));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;
    const DAY: u64 = 86_400_000;

    fn healthy() -> pb::StatusResponse {
        pb::StatusResponse {
            listen: "127.0.0.1:7420".into(),
            serving: true,
            max_pending_calls: 100,
            pending_calls: 89,
            types: vec![pb::RegisteredType {
                name: "counter".into(),
                apps: vec!["app-1".into()],
                ..Default::default()
            }],
            delivery: Some(pb::DeliveryStatus::default()),
            memory: Some(pb::MemoryBounds::default()),
            events: Some(pb::EventsStatus {
                watched: 89,
                max_watched: 100,
                ..Default::default()
            }),
            security: Some(pb::SecurityStatus {
                tls: Some(pb::TlsStatus {
                    client_certificates: "optional".into(),
                    certificate_expires_unix_ms: NOW + 8 * DAY,
                    ca_expires_unix_ms: NOW + 365 * DAY,
                }),
                ..Default::default()
            }),
            inbound_links: Some(pb::InboundLinks::default()),
            ..Default::default()
        }
    }

    #[test]
    fn a_healthy_daemon_has_no_problem() {
        assert_eq!(problems(&healthy(), NOW), Vec::new());
        assert_eq!(problems_text(&[]), "no problems found\n");
        // A daemon older than every field.
        assert_eq!(
            problems(
                &pb::StatusResponse {
                    serving: true,
                    ..Default::default()
                },
                NOW
            ),
            Vec::new()
        );
    }

    #[test]
    fn each_problem_is_named_with_what_to_do() {
        let mut s = healthy();
        s.flush = Some(pb::FlushBacklog {
            failing: true,
            last_error: "connection refused".into(),
            ..Default::default()
        });
        s.serving = false;
        s.pending_calls = 90;
        s.events = Some(pb::EventsStatus {
            watched: 100,
            max_watched: 100,
            ..Default::default()
        });
        s.memory = Some(pb::MemoryBounds {
            shedding: true,
            resident_bytes: 240 << 20,
            memory_limit_bytes: 256 << 20,
            ..Default::default()
        });
        s.delivery = Some(pb::DeliveryStatus {
            dead_letters: 1000,
            dead_letters_at_least: true,
            ..Default::default()
        });
        s.types[0].apps.clear();
        s.listen = "0.0.0.0:7420".into();
        s.security = Some(pb::SecurityStatus {
            tls: Some(pb::TlsStatus {
                client_certificates: "optional".into(),
                certificate_expires_unix_ms: NOW - DAY,
                ca_expires_unix_ms: NOW + 2 * DAY,
            }),
            tokens: vec![
                pb::TokenUse {
                    credential: "api".into(),
                    source_name: "/etc/troupe/api-token".into(),
                    position: 1,
                    ..Default::default()
                },
                pb::TokenUse {
                    credential: "app".into(),
                    source_name: "TROUPE_APP_TOKEN".into(),
                    position: 1,
                    short: true,
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let found: Vec<String> = problems(&s, NOW).into_iter().map(|p| p.what).collect();
        assert_eq!(
            found,
            [
                "the store is failing: connection refused",
                "its placement lease lapsed: every call to its actors gets UNAVAILABLE",
                "it refuses new calls for memory: 240.0 MiB resident of a 256.0 MiB limit",
                "90 of at most 100 calls pending: new ones are about to get RESOURCE_EXHAUSTED",
                "100 of at most 100 actors and types watched: new watches are about to get \
                 RESOURCE_EXHAUSTED",
                "≥1000 dead letters in the store",
                "actor type counter has no app connected",
                "the client API on 0.0.0.0:7420 is open to anyone who reaches it (--insecure)",
                "app token 1 of TROUPE_APP_TOKEN is too short to resist brute force",
                "its certificate expired at 2027-01-14T08:00:00.000Z: peers refuse it",
                "its CA certificate expires at 2027-01-17T08:00:00.000Z, within a week",
            ]
        );
        let text = problems_text(&problems(&s, NOW));
        assert!(
            text.starts_with("11 problems:\n  - the store is failing"),
            "{text}"
        );
        assert!(
            text.contains("\n    see why with `troupe dead-letters list`"),
            "{text}"
        );
        let json = problems_json(&problems(&s, NOW));
        assert_eq!(
            json[0]["problem"],
            "the store is failing: connection refused"
        );
    }

    #[test]
    fn a_single_node_is_not_judged_on_a_lease_it_does_not_have() {
        let mut s = healthy();
        s.inbound_links = None;
        s.serving = false;
        assert_eq!(problems(&s, NOW), Vec::new());
    }
}
