//! The durable-delivery lines of `troupe status`: durable tells held and
//! retried here, and the dead letters in the store.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use crate::cli::plural;

pub(super) fn delivery_json(d: &pb::DeliveryStatus) -> Value {
    let counted = d.dead_letters_error.is_empty();
    json!({
        "inbox_depth": d.inbox_depth,
        "retrying": d.retrying,
        "stored": d.stored,
        "delivered": d.delivered,
        "retries": d.retries,
        "dead_lettered": d.dead_lettered,
        "redriven": d.redriven,
        "dropped": d.dropped,
        "dead_letters": counted.then_some(d.dead_letters),
        "dead_letters_at_least": d.dead_letters_at_least,
        "dead_letters_error": (!counted).then_some(&d.dead_letters_error),
    })
}

pub(super) fn delivery_pairs(d: &pb::DeliveryStatus) -> [(&'static str, String); 3] {
    let depth = format!(
        "{} held here ({} waiting to retry)",
        plural(d.inbox_depth, "durable tell", "durable tells"),
        d.retrying
    );
    let since = format!(
        "{} stored, {} delivered, {}, {} dead-lettered since start",
        d.stored,
        d.delivered,
        plural(d.retries, "retry", "retries"),
        d.dead_lettered
    );
    let letters = if !d.dead_letters_error.is_empty() {
        format!("unknown: {}", d.dead_letters_error)
    } else {
        let at_least = if d.dead_letters_at_least { "≥" } else { "" };
        format!(
            "{at_least}{} in the store (`troupe dead-letters list`); {} re-driven, {} dropped \
             here since start",
            d.dead_letters, d.redriven, d.dropped
        )
    };
    [
        ("inbox depth", depth),
        ("durable tells", since),
        ("dead letters", letters),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::{status_json, status_table};
    use super::*;

    fn with_delivery(delivery: pb::DeliveryStatus) -> pb::StatusResponse {
        pb::StatusResponse {
            version: "0.1.0".into(),
            delivery: Some(delivery),
            ..Default::default()
        }
    }

    #[test]
    fn delivery_figures_read_as_sentences_and_json() {
        let s = with_delivery(pb::DeliveryStatus {
            inbox_depth: 3,
            retrying: 1,
            stored: 120,
            delivered: 115,
            retries: 4,
            dead_lettered: 1,
            redriven: 1,
            dead_letters: 1000,
            dead_letters_at_least: true,
            ..Default::default()
        });
        let text = status_table(&s);
        for line in [
            "inbox depth       3 durable tells held here (1 waiting to retry)\n",
            "durable tells     120 stored, 115 delivered, 4 retries, 1 dead-lettered since start\n",
            "dead letters      ≥1000 in the store (`troupe dead-letters list`); 1 re-driven, 0 \
             dropped here since start\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        let json = status_json(&s);
        assert_eq!(json["delivery"]["inbox_depth"], 3, "{json}");
        assert_eq!(json["delivery"]["retries"], 4, "{json}");
        assert_eq!(json["delivery"]["dead_letters"], 1000, "{json}");
        assert_eq!(json["delivery"]["dead_letters_at_least"], true, "{json}");
        assert_eq!(
            json["delivery"]["dead_letters_error"],
            Value::Null,
            "{json}"
        );
    }

    #[test]
    fn dead_letters_that_could_not_be_counted_say_why() {
        let s = with_delivery(pb::DeliveryStatus {
            dead_letters_error: "the store did not answer within 2s".into(),
            ..Default::default()
        });
        let text = status_table(&s);
        assert!(
            text.contains("dead letters      unknown: the store did not answer within 2s\n"),
            "{text}"
        );
        let json = status_json(&s);
        assert_eq!(json["delivery"]["dead_letters"], Value::Null, "{json}");
        assert_eq!(
            json["delivery"]["dead_letters_error"],
            "the store did not answer within 2s"
        );
        let old = status_json(&pb::StatusResponse::default());
        assert_eq!(old["delivery"], Value::Null, "a daemon older than the CLI");
        assert!(!status_table(&pb::StatusResponse::default()).contains("inbox depth"));
    }
}
