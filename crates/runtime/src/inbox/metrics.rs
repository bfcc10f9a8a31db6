//! The durable-tell families of `/metrics`, per actor type: built at each
//! scrape from the always-on counters (`stats`) and the retries waiting
//! (`retries`), so metrics cost delivery nothing beyond those atomics.
//!
//! Stored dead letters are not a gauge here: the store is shared by the
//! cluster (every daemon would report the same letters) and counting them
//! reads the store; `troupe status` counts them (bounded), and the
//! dead-lettered, re-driven and dropped counters say how they change.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::stats::DeliveryCounts;

/// One type's figures at a scrape.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypeDelivery {
    pub(crate) actor_type: String,
    pub(crate) counts: DeliveryCounts,
    /// Tells waiting for (or in) another attempt after a failed one.
    pub(crate) retrying: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    actor_type: String,
}

/// Registers the families, one series per type, in `registry`.
pub(crate) fn register(registry: &mut Registry, types: &[TypeDelivery]) {
    let counter = |value: fn(&DeliveryCounts) -> u64| {
        let family: Family<TypeLabels, Counter> = Family::default();
        for t in types {
            family.get_or_create(&labels(t)).inc_by(value(&t.counts));
        }
        family
    };
    let gauge = |value: fn(&TypeDelivery) -> u64| {
        let family: Family<TypeLabels, Gauge> = Family::default();
        for t in types {
            family
                .get_or_create(&labels(t))
                .set(i64::try_from(value(t)).unwrap_or(i64::MAX));
        }
        family
    };
    registry.register(
        "durable_tells_stored",
        "Durable tells appended to an actor's inbox on this daemon (each acknowledged once the \
         batch carrying it is stored)",
        counter(|c| c.stored),
    );
    registry.register(
        "durable_tells_delivered",
        "Durable tells whose turn succeeded (their removal from the inbox is written with the \
         turn's state)",
        counter(|c| c.delivered),
    );
    registry.register(
        "durable_tells_retried",
        "Failed durable tell attempts that will be retried after a backoff",
        counter(|c| c.retried),
    );
    registry.register(
        "durable_tells_dead_lettered",
        "Durable tells that failed every attempt and became dead letters",
        counter(|c| c.dead_lettered),
    );
    registry.register(
        "dead_letters_redriven",
        "Dead letters re-driven through this daemon (stored again as new durable tells)",
        counter(|c| c.redriven),
    );
    registry.register(
        "dead_letters_dropped",
        "Dead letters dropped through this daemon",
        counter(|c| c.dropped),
    );
    registry.register(
        "inbox_depth",
        "Durable tells held by this daemon's activations: stored (or being stored) and neither \
         handled nor dead-lettered yet, whether queued, running or waiting to retry; inboxes of \
         actors not active here are not read (troupe actors get reads one from the store)",
        gauge(|t| t.counts.inbox_depth),
    );
    registry.register(
        "inbox_retrying",
        "Durable tells whose last attempt failed and that wait for, or are in, their next attempt",
        gauge(|t| t.retrying),
    );
}

fn labels(t: &TypeDelivery) -> TypeLabels {
    TypeLabels {
        actor_type: t.actor_type.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_a_series_per_type() -> Result<(), std::fmt::Error> {
        let mut registry = Registry::with_prefix("troupe");
        let log = TypeDelivery {
            actor_type: "log".into(),
            counts: DeliveryCounts {
                inbox_depth: 4,
                stored: 10,
                delivered: 5,
                retried: 2,
                dead_lettered: 1,
                redriven: 1,
                dropped: 0,
            },
            retrying: 1,
        };
        let idle = TypeDelivery {
            actor_type: "idle".into(),
            ..TypeDelivery::default()
        };
        register(&mut registry, &[log, idle]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        for line in [
            "troupe_durable_tells_stored_total{actor_type=\"log\"} 10",
            "troupe_durable_tells_delivered_total{actor_type=\"log\"} 5",
            "troupe_durable_tells_retried_total{actor_type=\"log\"} 2",
            "troupe_durable_tells_dead_lettered_total{actor_type=\"log\"} 1",
            "troupe_dead_letters_redriven_total{actor_type=\"log\"} 1",
            "troupe_dead_letters_dropped_total{actor_type=\"log\"} 0",
            "troupe_inbox_depth{actor_type=\"log\"} 4",
            "troupe_inbox_retrying{actor_type=\"log\"} 1",
            "troupe_durable_tells_stored_total{actor_type=\"idle\"} 0",
            "troupe_inbox_depth{actor_type=\"idle\"} 0",
            "# TYPE troupe_durable_tells_stored counter",
            "# TYPE troupe_inbox_depth gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        Ok(())
    }
}
