//! When a reminder fires next: after a firing (successful, dropped or
//! skipped), and whether one was missed while the daemon was down. Pure
//! arithmetic over a record's meta and its parsed calendar; the firing path
//! (`firing.rs`) calls it, the record format is `record.rs`.

use super::calendar::Calendar;
use super::record::Meta;

/// The next due time after a firing (successful, dropped or skipped) of
/// the one due at `due`, or `None` when the reminder is done. `calendar`:
/// the record's calendar schedule, parsed (`None` for a record with one
/// that no longer parses: that firing is its last).
pub(crate) fn advance(
    meta: &mut Meta,
    due: u64,
    now: u64,
    calendar: Option<&Calendar>,
) -> Option<u64> {
    if let Some(remaining) = meta.remaining.as_mut() {
        *remaining = remaining.saturating_sub(1);
        if *remaining == 0 {
            return None;
        }
    }
    let next = if meta.cron.is_some() {
        // The first match after now: missed matches fire at most once, and
        // a retried firing (due later than its match) keeps the calendar.
        // Matches are scheduled times: the jitter's delay comes off before
        // the search and back on after.
        calendar?
            .next_after(due.max(now).saturating_sub(meta.delay_ms))?
            .saturating_add(meta.delay_ms)
    } else {
        // Skip every slot already in the past: missed firings fire at most
        // once. No period (0): a one-shot, done.
        let behind = now.saturating_sub(due).checked_div(meta.period_ms)?;
        behind
            .saturating_add(1)
            .saturating_mul(meta.period_ms)
            .saturating_add(due)
    };
    match meta.until_unix_ms {
        Some(until) if next > until => None,
        _ => Some(next),
    }
}

/// Whether the firing due at `due` was missed (the daemon was down past
/// it): late by more than a period (or a second); a calendar one, by more
/// than a second with its next (delayed) match also past.
pub(crate) fn missed(meta: &Meta, due: u64, now: u64, calendar: Option<&Calendar>) -> bool {
    let late = now.saturating_sub(due);
    match calendar {
        Some(calendar) => {
            let delay = meta.delay_ms;
            late > 1000
                && calendar
                    .next_after(due.saturating_sub(delay))
                    .is_some_and(|next| next.saturating_add(delay) <= now)
        }
        None => late > meta.period_ms.max(1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::calendar::CronSchedule;
    use crate::schedule::record::meta_with;

    #[test]
    fn advance_skips_missed_slots_and_honours_bounds() {
        let mut meta = meta_with(|m| {
            m.period_ms = 100;
            m.remaining = Some(3);
        });
        assert_eq!(advance(&mut meta, 1000, 1000, None), Some(1100));
        // Down for 550 ms: the next slot is the first in the future.
        assert_eq!(advance(&mut meta, 1100, 1650, None), Some(1700));
        assert_eq!(
            advance(&mut meta, 1700, 1700, None),
            None,
            "three firings in all"
        );
        meta.remaining = None;
        meta.until_unix_ms = Some(1850);
        assert_eq!(advance(&mut meta, 1700, 1700, None), Some(1800));
        assert_eq!(advance(&mut meta, 1800, 1800, None), None);
    }

    #[test]
    fn calendar_reminders_advance_to_the_first_match_after_now() {
        let schedule = CronSchedule {
            pattern: "0 * * * *".into(), // on the hour
            time_zone: String::new(),
        };
        let Ok(hourly) = Calendar::parse(&schedule) else {
            panic!("an hourly pattern does not parse");
        };
        let hour = 3_600_000;
        let mut meta = meta_with(|m| m.set_cron(Some(hourly.normalized())));
        assert_eq!(
            advance(&mut meta, hour, hour, Some(&hourly)),
            Some(2 * hour)
        );
        // Down for two and a half hours: the next match after now.
        assert_eq!(
            advance(&mut meta, 2 * hour, 4 * hour + 1, Some(&hourly)),
            Some(5 * hour)
        );
        // A retry due at 5h 00m 07s: back on the hour.
        assert_eq!(
            advance(&mut meta, 5 * hour + 7000, 5 * hour + 7000, Some(&hourly)),
            Some(6 * hour)
        );
        meta.until_unix_ms = Some(6 * hour + 1);
        assert_eq!(advance(&mut meta, 6 * hour, 6 * hour, Some(&hourly)), None);
        // A stored schedule that no longer parses: that firing was its last.
        meta.until_unix_ms = None;
        assert_eq!(advance(&mut meta, 6 * hour, 6 * hour, None), None);
    }

    #[test]
    fn a_jittered_calendar_reminder_keeps_its_delay_after_each_match() {
        let schedule = CronSchedule {
            pattern: "0 * * * *".into(),
            time_zone: String::new(),
        };
        let Ok(hourly) = Calendar::parse(&schedule) else {
            panic!("an hourly pattern does not parse");
        };
        let (hour, delay) = (3_600_000, 2_000_000);
        let mut meta = meta_with(|m| {
            m.set_cron(Some(hourly.normalized()));
            m.jitter_ms = hour;
            m.delay_ms = delay;
        });
        // Fired at 1h + delay: next at 2h + delay, not at the match after
        // the firing (3h) nor on the hour.
        let fired = hour + delay;
        assert_eq!(
            advance(&mut meta, fired, fired, Some(&hourly)),
            Some(2 * hour + delay)
        );
        // A retry 7 s after that: still 3h + delay.
        let retried = 2 * hour + delay + 7000;
        assert_eq!(
            advance(&mut meta, retried, retried, Some(&hourly)),
            Some(3 * hour + delay)
        );
        // Down until 5h 40m: 5h + delay (5h 33m 20s) is past, 6h + delay next.
        assert_eq!(
            advance(
                &mut meta,
                3 * hour + delay,
                5 * hour + 2_400_000,
                Some(&hourly)
            ),
            Some(6 * hour + delay)
        );
        // Late by more than a second, but before the next delayed match:
        // not missed (the undelayed next match, 4h, is past by then).
        let due = 3 * hour + delay;
        assert!(!missed(&meta, due, 4 * hour + 60_000, Some(&hourly)));
        assert!(missed(&meta, due, 4 * hour + delay, Some(&hourly)));
    }
}
