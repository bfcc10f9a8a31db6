//! Durable-tell figures on the wire: the daemon's (`Status`) and one
//! actor's retries (`DescribeActor`).

use troupe_proto::v1 as pb;
use troupe_runtime::{DeliveryStatus, InboxRetry};

pub(super) fn status_to_pb(d: DeliveryStatus) -> pb::DeliveryStatus {
    let c = d.counts;
    let mut out = pb::DeliveryStatus {
        inbox_depth: c.inbox_depth,
        retrying: d.retrying,
        stored: c.stored,
        delivered: c.delivered,
        retries: c.retried,
        dead_lettered: c.dead_lettered,
        redriven: c.redriven,
        dropped: c.dropped,
        ..Default::default()
    };
    match d.dead_letters {
        Ok(count) => {
            out.dead_letters = count.counted;
            out.dead_letters_at_least = count.at_least;
        }
        Err(e) => out.dead_letters_error = e.to_string(),
    }
    out
}

pub(super) fn retry_to_pb(r: InboxRetry) -> pb::InboxRetry {
    pb::InboxRetry {
        seq: r.seq,
        attempts: r.attempts,
        max_attempts: r.max_attempts,
        next_attempt_unix_ms: r.next_attempt_unix_ms,
        waiting: r.waiting,
        last_error: r.last_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_runtime::{CallError, DeadLetterCount, DeliveryCounts};

    #[test]
    fn a_count_that_failed_says_why_and_keeps_the_rest() {
        let status = DeliveryStatus {
            counts: DeliveryCounts {
                inbox_depth: 2,
                retried: 5,
                ..DeliveryCounts::default()
            },
            retrying: 1,
            dead_letters: Err(CallError::DeadlineExceeded("the store is slow".into())),
        };
        let pb = status_to_pb(status);
        assert_eq!((pb.inbox_depth, pb.retrying, pb.retries), (2, 1, 5));
        assert_eq!(pb.dead_letters, 0);
        assert_eq!(pb.dead_letters_error, "the store is slow");
        let counted = status_to_pb(DeliveryStatus {
            counts: DeliveryCounts::default(),
            retrying: 0,
            dead_letters: Ok(DeadLetterCount {
                counted: 1000,
                at_least: true,
            }),
        });
        assert_eq!(
            (counted.dead_letters, counted.dead_letters_at_least),
            (1000, true)
        );
        assert!(counted.dead_letters_error.is_empty());
    }
}
