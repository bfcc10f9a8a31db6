//! Calendar schedules: a reminder that fires at the matches of a cron
//! pattern read in a time zone ("at 09:00 Berlin time on weekdays", "on the
//! last day of each month") instead of every fixed period, which cannot say
//! "monthly" or keep 09:00 across a DST change.
//!
//! Owns checking what a caller gave, the occurrence after an instant, and a
//! cache of parsed schedules: the firing path asks for the next occurrence
//! once per firing, and parsing a pattern and finding its zone costs more
//! than the search.
//!
//! Occurrences are whole seconds. Across a DST change a wall time the clocks
//! skip fires at the first instant after the gap; one they pass twice fires
//! once, at its first occurrence (what Vixie cron and Quartz do); a pattern
//! matching every minute or every half hour fires in both passes.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use croner::Cron;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use parking_lot::Mutex;

use crate::error::{abridged, CallError};

/// A cron pattern and the time zone it is read in, as a caller gives it or
/// as a reminder keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CronSchedule {
    pub pattern: String,
    /// An IANA name ("Europe/Berlin"); empty: UTC.
    pub time_zone: String,
}

/// Longest pattern accepted: the longest sensible one (every field a list)
/// is well under it, and the pattern is kept in every firing's record.
const MAX_PATTERN: usize = 200;
/// Longest zone name accepted (the longest IANA name has 32 characters).
const MAX_ZONE: usize = 64;
/// Parsed schedules kept; beyond it the cache starts over (a daemon's
/// reminders use a handful of schedules; this only bounds a caller who
/// sets ever-new ones).
const MAX_CACHED: usize = 1024;
/// What the caller reads when the pattern does not parse.
const PATTERN_HELP: &str = "give five fields (minute hour day-of-month month day-of-week) such \
     as \"0 9 * * MON-FRI\", six with seconds first, or @hourly, @daily, @weekly, @monthly or \
     @yearly";

/// A schedule checked and ready to answer "when next".
#[derive(Debug)]
pub(crate) struct Calendar {
    cron: Cron,
    zone: TimeZone,
    /// As stored: the pattern trimmed, the zone by its canonical name.
    normalized: CronSchedule,
}

impl Calendar {
    /// Checks a schedule a user gave (or a stored one, read again).
    pub(crate) fn parse(schedule: &CronSchedule) -> Result<Self, CallError> {
        let pattern = schedule.pattern.trim();
        if pattern.chars().count() > MAX_PATTERN {
            return Err(CallError::InvalidArgument(format!(
                "cron pattern {} is longer than {MAX_PATTERN} characters; {PATTERN_HELP}",
                abridged(pattern, 40)
            )));
        }
        let cron = Cron::from_str(pattern).map_err(|e| {
            CallError::InvalidArgument(format!(
                "cron pattern {} is not valid ({e}); {PATTERN_HELP}",
                abridged(pattern, 80)
            ))
        })?;
        let zone_name = schedule.time_zone.trim();
        let zone = if zone_name.is_empty() {
            TimeZone::UTC
        } else if zone_name.chars().count() > MAX_ZONE {
            return Err(unknown_zone(zone_name));
        } else {
            TimeZone::get(zone_name).map_err(|_| unknown_zone(zone_name))?
        };
        let canonical = zone.iana_name().unwrap_or(zone_name);
        let normalized = CronSchedule {
            pattern: pattern.to_owned(),
            time_zone: if canonical.is_empty() {
                "UTC"
            } else {
                canonical
            }
            .to_owned(),
        };
        Ok(Self {
            cron,
            zone,
            normalized,
        })
    }

    /// The schedule as a reminder keeps and shows it.
    pub(crate) fn normalized(&self) -> &CronSchedule {
        &self.normalized
    }

    /// The first occurrence strictly after `unix_ms`; `None` when there is
    /// none (a pattern limited to past years, or none within the search
    /// limit, such as February 30th).
    pub(crate) fn next_after(&self, unix_ms: u64) -> Option<u64> {
        // Floor: an occurrence in the same second lies at or before it.
        self.search(unix_ms / 1000, false)
    }

    /// The first occurrence at or after `unix_ms`.
    pub(crate) fn at_or_after(&self, unix_ms: u64) -> Option<u64> {
        // Ceiling: the search counts whole seconds, and the second that
        // holds `unix_ms` began before it.
        self.search(unix_ms.div_ceil(1000), true)
    }

    /// The first firing of the reminder `name`: the first match at or after
    /// its `due`, within its `until`.
    pub(crate) fn first_firing(
        &self,
        name: &str,
        due_unix_ms: u64,
        until_unix_ms: Option<u64>,
    ) -> Result<u64, CallError> {
        let CronSchedule { pattern, time_zone } = &self.normalized;
        let first = self.at_or_after(due_unix_ms).ok_or_else(|| {
            CallError::InvalidArgument(format!(
                "reminder {name:?}: cron pattern {pattern:?} in {time_zone} never matches from its \
                 due time on (a date that does not exist, such as February 30th, or only past \
                 years); fix the pattern",
            ))
        })?;
        match until_unix_ms {
            Some(until) if first > until => Err(CallError::InvalidArgument(format!(
                "reminder {name:?}: cron pattern {pattern:?} in {time_zone} first matches after its \
                 `until`, so it would never fire; move `until` later or `due` earlier",
            ))),
            _ => Ok(first),
        }
    }

    fn search(&self, unix_secs: u64, inclusive: bool) -> Option<u64> {
        let start = Timestamp::from_second(i64::try_from(unix_secs).ok()?)
            .ok()?
            .to_zoned(self.zone.clone());
        let next = self.cron.find_next_occurrence(&start, inclusive).ok()?;
        u64::try_from(next.timestamp().as_millisecond()).ok()
    }
}

fn unknown_zone(name: &str) -> CallError {
    CallError::InvalidArgument(format!(
        "time zone {} is not a known IANA time zone; give a name such as \"Europe/Berlin\", \
         \"America/New_York\" or \"UTC\" (empty means UTC)",
        abridged(name, MAX_ZONE)
    ))
}

/// Parsed schedules by what they were parsed from.
#[derive(Debug, Default)]
pub(crate) struct Calendars {
    parsed: Mutex<HashMap<CronSchedule, Arc<Calendar>>>,
}

impl Calendars {
    pub(crate) fn get(&self, schedule: &CronSchedule) -> Result<Arc<Calendar>, CallError> {
        if let Some(calendar) = self.parsed.lock().get(schedule) {
            return Ok(calendar.clone());
        }
        // Parsed outside the lock: a firing asking for another schedule
        // need not wait for it.
        let calendar = Arc::new(Calendar::parse(schedule)?);
        let mut parsed = self.parsed.lock();
        if parsed.len() >= MAX_CACHED {
            parsed.clear();
        }
        parsed.insert(schedule.clone(), calendar.clone());
        Ok(calendar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calendar(pattern: &str, zone: &str) -> Calendar {
        let schedule = CronSchedule {
            pattern: pattern.into(),
            time_zone: zone.into(),
        };
        Calendar::parse(&schedule).unwrap_or_else(|e| panic!("{pattern} in {zone:?}: {e}"))
    }

    fn ms(rfc3339: &str) -> u64 {
        let t: Timestamp = rfc3339.parse().unwrap_or_else(|e| panic!("{rfc3339}: {e}"));
        u64::try_from(t.as_millisecond()).unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
    }

    #[test]
    fn nine_in_berlin_stays_nine_across_the_spring_change() {
        let c = calendar("0 9 * * *", "Europe/Berlin");
        // CET (UTC+1) until the 29th of March 2026, CEST (UTC+2) from then.
        let first = c.at_or_after(ms("2026-03-27T12:00:00Z"));
        assert_eq!(first, Some(ms("2026-03-28T08:00:00Z")));
        let second = first.and_then(|t| c.next_after(t));
        assert_eq!(second, Some(ms("2026-03-29T07:00:00Z")));
    }

    #[test]
    fn a_skipped_wall_time_fires_after_the_gap_and_a_repeated_one_once() {
        let c = calendar("30 2 * * *", "Europe/Berlin");
        // 02:30 does not exist on the 29th of March: the first instant after
        // the gap (03:00 CEST) stands in for it.
        let spring = c.next_after(ms("2026-03-28T12:00:00Z"));
        assert_eq!(spring, Some(ms("2026-03-29T01:00:00Z")));
        // 02:30 exists twice on the 25th of October: it fires once, at the
        // first (CEST), and next on the 26th.
        let fall = c.next_after(ms("2026-10-24T12:00:00Z"));
        assert_eq!(fall, Some(ms("2026-10-25T00:30:00Z")));
        assert_eq!(
            fall.and_then(|t| c.next_after(t)),
            Some(ms("2026-10-26T01:30:00Z"))
        );
    }

    #[test]
    fn the_last_day_of_each_month() {
        let c = calendar("0 0 L * *", "");
        let feb = c.at_or_after(ms("2027-02-01T00:00:00Z"));
        assert_eq!(feb, Some(ms("2027-02-28T00:00:00Z")));
        assert_eq!(
            feb.and_then(|t| c.next_after(t)),
            Some(ms("2027-03-31T00:00:00Z"))
        );
    }

    #[test]
    fn instants_inside_a_second_round_the_right_way() {
        let c = calendar("* * * * * *", "UTC");
        // At or after 10.2 s: 11 s, not the second that began before it.
        assert_eq!(c.at_or_after(10_200), Some(11_000));
        assert_eq!(c.at_or_after(10_000), Some(10_000));
        // Strictly after 10.2 s: 11 s too; after 10 s: 11 s.
        assert_eq!(c.next_after(10_200), Some(11_000));
        assert_eq!(c.next_after(10_000), Some(11_000));
    }

    #[test]
    fn the_patterns_docs_scheduling_md_shows_fire_as_it_says() {
        // From Monday the 1st of February 2027, UTC.
        let from = ms("2027-02-01T00:00:00Z");
        let cases = [
            ("0 9 * * MON-FRI", "2027-02-01T09:00:00Z"),
            ("0 9 1 * *", "2027-02-01T09:00:00Z"),
            ("0 18 L * *", "2027-02-28T18:00:00Z"),
            ("0 12 * * FRI#2", "2027-02-12T12:00:00Z"),
            ("0 0 9 LW * *", "2027-02-26T09:00:00Z"),
            ("@monthly", "2027-02-01T00:00:00Z"),
            ("@weekly", "2027-02-07T00:00:00Z"),
        ];
        for (pattern, first) in cases {
            let c = calendar(pattern, "UTC");
            assert_eq!(c.at_or_after(from), Some(ms(first)), "{pattern}");
        }
    }

    #[test]
    fn a_pattern_that_never_matches_has_no_occurrence() {
        assert_eq!(calendar("0 0 30 2 *", "").at_or_after(0), None);
    }

    #[test]
    fn schedules_are_kept_trimmed_with_the_zone_by_name() {
        let c = calendar("  @daily ", "");
        assert_eq!(
            c.normalized(),
            &CronSchedule {
                pattern: "@daily".into(),
                time_zone: "UTC".into()
            }
        );
        let c = calendar("0 9 * * *", " Asia/Kolkata ");
        assert_eq!(c.normalized().time_zone, "Asia/Kolkata");
    }

    #[test]
    fn bad_patterns_and_zones_are_invalid_arguments_that_say_what_to_give() {
        let cases = [
            ("61 * * * *", "", "cron pattern \"61 * * * *\" is not valid"),
            ("0 9 * *", "", "five fields"),
            ("", "", "five fields"),
            (
                "0 9 * * *",
                "Mars/Olympus",
                "\"Mars/Olympus\" is not a known",
            ),
            (
                "0 9 * * *",
                "../../etc/passwd",
                "not a known IANA time zone",
            ),
        ];
        for (pattern, zone, says) in cases {
            let schedule = CronSchedule {
                pattern: pattern.into(),
                time_zone: zone.into(),
            };
            match Calendar::parse(&schedule) {
                Err(CallError::InvalidArgument(message)) => {
                    assert!(message.contains(says), "{pattern:?} {zone:?}: {message}");
                }
                other => panic!("{pattern:?} {zone:?}: {other:?}"),
            }
        }
        let long = CronSchedule {
            pattern: "1,".repeat(150),
            time_zone: String::new(),
        };
        assert!(matches!(
            Calendar::parse(&long),
            Err(CallError::InvalidArgument(_))
        ));
    }

    #[test]
    fn the_cache_hands_out_one_parse_per_schedule() {
        let calendars = Calendars::default();
        let schedule = CronSchedule {
            pattern: "0 9 * * *".into(),
            time_zone: "Europe/Berlin".into(),
        };
        let (Ok(a), Ok(b)) = (calendars.get(&schedule), calendars.get(&schedule)) else {
            panic!("a valid schedule does not parse");
        };
        assert!(Arc::ptr_eq(&a, &b));
    }
}
