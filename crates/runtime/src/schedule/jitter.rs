//! Jitter: the fixed delay a reminder set with `jitter` fires after each of
//! its scheduled times, so that many reminders set alike ("@daily" for every
//! user) do not all fire in the same instant and hit the app and whatever
//! it calls in one burst.
//!
//! The delay is chosen once per reminder, from a hash of its key rather than
//! at random: an app that sets its reminders again at every activation (a
//! common way to make sure they exist) keeps each one's time, and a firing
//! is as predictable as the schedule ("09:00 plus 3m12s, every day").

use std::hash::Hasher as _;
use std::time::Duration;

use siphasher::sip::SipHasher13;
use troupe_storage::ReminderKey;

use crate::input::millis;
use crate::types::ActorId;

/// The delay the reminder `name` of `actor`, set with `jitter`, fires after
/// each scheduled time: what [`ReminderInfo::jitter_delay`] reports, unless
/// `until` cut it short. For tools that predict firings (the reminders
/// benchmark measures lateness from it).
///
/// [`ReminderInfo::jitter_delay`]: crate::ReminderInfo::jitter_delay
pub fn jitter_delay(actor: &ActorId, name: &str, jitter: Duration) -> Duration {
    Duration::from_millis(hashed_delay_ms(
        [&actor.ty, &actor.id, name],
        millis(jitter),
    ))
}

/// The delay in `[0, jitter_ms)` that `key` fires after its scheduled
/// times; 0 without jitter.
pub(crate) fn delay_ms(key: &ReminderKey, jitter_ms: u64) -> u64 {
    hashed_delay_ms([&key.actor_type, &key.actor_id, &key.name], jitter_ms)
}

/// The delay for a reminder named by its type, id and name.
fn hashed_delay_ms(parts: [&str; 3], jitter_ms: u64) -> u64 {
    if jitter_ms == 0 {
        return 0;
    }
    // SipHash with fixed keys: a published algorithm, so the delay stays
    // the same across versions and hosts (std's hasher promises neither).
    let mut h = SipHasher13::new_with_keys(0, 0);
    for part in parts {
        h.write(part.as_bytes());
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h.write_u8(0xff);
    }
    h.finish() % jitter_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> ReminderKey {
        ReminderKey {
            actor_type: "user".into(),
            actor_id: id.into(),
            name: "digest".into(),
        }
    }

    #[test]
    fn the_delay_is_stable_per_reminder_and_spread_over_the_jitter() {
        let hour = 3_600_000;
        assert_eq!(delay_ms(&key("u1"), hour), delay_ms(&key("u1"), hour));
        assert_eq!(delay_ms(&key("u1"), 0), 0);
        // What tools predict is what the scheduler stores.
        assert_eq!(
            jitter_delay(
                &ActorId::new("user", "u1"),
                "digest",
                Duration::from_millis(hour)
            ),
            Duration::from_millis(delay_ms(&key("u1"), hour))
        );
        let delays: Vec<u64> = (0..1000)
            .map(|i| delay_ms(&key(&format!("u{i}")), hour))
            .collect();
        assert!(delays.iter().all(|d| *d < hour));
        // Spread: every tenth of the hour gets some of the thousand.
        for tenth in 0..10 {
            let in_it = delays.iter().filter(|d| **d / (hour / 10) == tenth).count();
            assert!(in_it > 50, "tenth {tenth} got {in_it} of 1000");
        }
    }
}
