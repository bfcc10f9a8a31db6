//! The tokens of `troupe cluster status`: each token place (credential,
//! source, position) across the members that answered, with how many accept
//! a token there, on how many it let anything in since they started, and
//! the latest use, where and from whom. Daemons present their first API
//! token to their peers, so a cluster's rotation is over when the old
//! token's place shows no use on any member; one daemon's `troupe status`
//! cannot say that of the others.

use serde_json::{json, Value};

use super::MemberView;
use crate::cli::render::{self, Table};

/// One token place over the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    credential: String,
    source: String,
    /// As the first member listing it names it (the paths of a file may
    /// differ between daemons; the place is what rotation moves).
    source_name: String,
    position: u32,
    /// Members with a token at this place.
    daemons: u32,
    /// Those on which it let anything in since they started.
    used_on: u32,
    /// The latest use on any of them: when, on which node, from whom.
    last: Option<(u64, String, String)>,
}

/// The places in the order their members list them: api, app, read, and
/// each source's tokens in order.
fn places(members: &[MemberView]) -> Vec<Place> {
    let mut places: Vec<Place> = Vec::new();
    for member in members {
        for token in &member.tokens {
            let at = |p: &Place| {
                (p.credential.as_str(), p.source.as_str(), p.position)
                    == (
                        token.credential.as_str(),
                        token.source.as_str(),
                        token.position,
                    )
            };
            if !places.iter().any(at) {
                places.push(Place {
                    credential: token.credential.clone(),
                    source: token.source.clone(),
                    source_name: token.source_name.clone(),
                    position: token.position,
                    daemons: 0,
                    used_on: 0,
                    last: None,
                });
            }
            let Some(place) = places.iter_mut().find(|p| at(p)) else {
                continue;
            };
            place.daemons = place.daemons.saturating_add(1);
            if token.last_accepted_unix_ms == 0 {
                continue;
            }
            place.used_on = place.used_on.saturating_add(1);
            if place
                .last
                .as_ref()
                .is_none_or(|(at, _, _)| token.last_accepted_unix_ms > *at)
            {
                let node = member.member.node.clone();
                place.last = Some((token.last_accepted_unix_ms, node, token.last_from.clone()));
            }
        }
    }
    places
}

pub(super) fn tokens_json(members: &[MemberView]) -> Value {
    let tokens: Vec<Value> = places(members)
        .into_iter()
        .map(|p| {
            let (at, node, from) = p.last.unwrap_or_default();
            let mut out = json!({
                "credential": p.credential,
                "source": p.source,
                "source_name": p.source_name,
                "position": p.position,
                "daemons": p.daemons,
                "used_on": p.used_on,
                "last_node": (!node.is_empty()).then_some(node),
                "last_from": (!from.is_empty()).then_some(from),
            });
            if let Some(o) = out.as_object_mut() {
                render::time_json(o, "last_accepted", at);
            }
            out
        })
        .collect();
    Value::Array(tokens)
}

/// The table of token places; empty when no member takes a token.
pub(super) fn tokens_table(members: &[MemberView], now_ms: u64) -> String {
    let places = places(members);
    if places.is_empty() {
        return String::new();
    }
    let mut t = Table::new(&[
        ("TOKEN", false),
        ("DAEMONS", true),
        ("USED ON", true),
        ("LAST USED", false),
        ("LAST FROM", false),
    ]);
    for p in places {
        let (last, from) = match &p.last {
            None => ("not since start".to_owned(), "-".to_owned()),
            Some((at, node, from)) => {
                let ago = render::duration(now_ms.saturating_sub(*at));
                let from = if from.is_empty() { "?" } else { from };
                (
                    format!("{} ({ago} ago)", render::time_cell(*at)),
                    format!("{from} on {node}"),
                )
            }
        };
        t.row(vec![
            format!("{} token {} of {}", p.credential, p.position, p.source_name),
            p.daemons.to_string(),
            p.used_on.to_string(),
            last,
            from,
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use troupe_proto::v1 as pb;

    use super::*;

    fn used(position: u32, at: u64, from: &str) -> pb::TokenUse {
        pb::TokenUse {
            credential: "api".into(),
            source: "file".into(),
            source_name: "/etc/troupe/api-token".into(),
            position,
            accepted: u64::from(at > 0),
            last_accepted_unix_ms: at,
            last_from: from.into(),
            short: false,
        }
    }

    fn member(node: &str, tokens: Vec<pb::TokenUse>) -> MemberView {
        let member = pb::Member {
            node: node.into(),
            ..Default::default()
        };
        MemberView {
            tokens,
            ..MemberView::unasked(&member, true, false, None)
        }
    }

    const NOW: u64 = 1_800_000_000_000;

    fn cluster() -> Vec<MemberView> {
        vec![
            member(
                "a",
                vec![used(1, NOW - 1_000, "10.0.0.9:1"), used(2, 0, "")],
            ),
            member(
                "b",
                vec![
                    used(1, NOW - 5_000, "10.0.0.8:1"),
                    used(2, NOW - 60_000, "10.0.0.7:4000"),
                ],
            ),
            // Unreachable: no tokens known.
            member("c", Vec::new()),
        ]
    }

    #[test]
    fn each_place_shows_its_latest_use_over_the_members() {
        let json = tokens_json(&cluster());
        assert_eq!(json[0]["daemons"], 2, "{json}");
        assert_eq!(json[0]["used_on"], 2, "{json}");
        assert_eq!(json[0]["last_node"], "a", "{json}");
        assert_eq!(json[0]["last_accepted_unix_ms"], NOW - 1_000, "{json}");
        assert_eq!(json[1]["used_on"], 1, "{json}");
        assert_eq!(json[1]["last_node"], "b", "{json}");
        assert_eq!(json[1]["last_from"], "10.0.0.7:4000", "{json}");
    }

    #[test]
    fn the_table_names_who_still_sends_each_token() {
        let table = tokens_table(&cluster(), NOW);
        assert!(
            table.contains("api token 2 of /etc/troupe/api-token        2        1"),
            "{table}"
        );
        assert!(table.contains("(1m ago)  10.0.0.7:4000 on b"), "{table}");
        let unused = vec![member("a", vec![used(1, 0, "")])];
        assert!(
            tokens_table(&unused, NOW).contains("not since start"),
            "{}",
            tokens_table(&unused, NOW)
        );
        assert_eq!(tokens_table(&[member("a", Vec::new())], NOW), "");
    }
}
