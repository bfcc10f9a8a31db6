//! Reminders, alarms and timers: their names, due times, periods, ends,
//! retry policies and payload sizes.

use tonic::Code;
use troupe_tests::*;

use crate::expect::{bad, case, Case, Expect};
use crate::requests::{
    keep, payload, reminder_ref, scratch, set_alarm, set_reminder, set_timer, timer_ref, Req,
};
use crate::{FAR, LIMIT};

/// SetReminder, GetReminder, DeleteReminder, PauseReminder and
/// ResumeReminder of the reminder `name`.
fn reminder_rpcs(name: &str) -> [Req; 5] {
    [
        Req::SetReminder(pb::SetReminderRequest {
            name: name.into(),
            ..set_reminder()
        }),
        Req::GetReminder(reminder_ref(name)),
        Req::DeleteReminder(reminder_ref(name)),
        Req::PauseReminder(reminder_ref(name)),
        Req::ResumeReminder(reminder_ref(name)),
    ]
}

/// SetTimer and DeleteTimer of the timer `name`.
fn timer_rpcs(name: &str) -> [Req; 2] {
    [
        Req::SetTimer(pb::SetTimerRequest {
            name: name.into(),
            ..set_timer()
        }),
        Req::DeleteTimer(timer_ref(name)),
    ]
}

/// Reminder, alarm and timer names.
pub fn schedule_name_cases() -> Vec<Case> {
    let names: [(&str, String, [&'static [&'static str]; 2]); 4] = [
        (
            "empty",
            String::new(),
            [&["reminder name", "empty"], &["timer name", "empty"]],
        ),
        (
            "257 bytes",
            "r".repeat(257),
            [
                &["reminder name", "257 bytes"],
                &["timer name", "257 bytes"],
            ],
        ),
        (
            "with NUL",
            "ke\0ep".into(),
            [
                &["reminder name", "control characters"],
                &["timer name", "control characters"],
            ],
        ),
        (
            "with a newline",
            "ke\nep".into(),
            [
                &["reminder name", "control characters"],
                &["timer name", "control characters"],
            ],
        ),
    ];
    let mut cases = Vec::new();
    for (what, name, [reminder_words, timer_words]) in names {
        let what = format!("name {what}");
        for req in reminder_rpcs(&name) {
            cases.push(case("names", &what, req, bad(reminder_words)));
        }
        for req in timer_rpcs(&name) {
            cases.push(case("names", &what, req, bad(timer_words)));
        }
    }
    let reserved = bad(&["reminder name", "reserved"]);
    for req in reminder_rpcs("$alarm") {
        cases.push(case("names", "name $alarm (reserved)", req, reserved));
    }
    cases
}

/// `SetReminder`, `SetAlarm` or `SetTimer` (by `rpc`) with `field` set to
/// `value` (a time, a duration, a period).
fn with_time(rpc: &str, field: &str, value: &str) -> Req {
    let v = value.to_owned();
    match (rpc, field) {
        ("SetReminder", "due") => Req::SetReminder(pb::SetReminderRequest {
            due: v,
            ..set_reminder()
        }),
        ("SetReminder", "period") => Req::SetReminder(pb::SetReminderRequest {
            period: v,
            ..set_reminder()
        }),
        ("SetReminder", _) => Req::SetReminder(pb::SetReminderRequest {
            until: v,
            ..set_reminder()
        }),
        ("SetAlarm", _) => Req::SetAlarm(pb::SetAlarmRequest {
            at: v,
            ..set_alarm()
        }),
        (_, "due") => Req::SetTimer(pb::SetTimerRequest {
            due: v,
            ..set_timer()
        }),
        _ => Req::SetTimer(pb::SetTimerRequest {
            period: v,
            ..set_timer()
        }),
    }
}

/// `SetReminder`, `SetAlarm` or `SetTimer` on `actor` with a payload of
/// `len` bytes and, where the RPC has one, retry policy `retry`.
fn with_payload(
    rpc: &str,
    actor: Option<pb::ActorRef>,
    len: usize,
    retry: Option<pb::RetryPolicy>,
) -> Req {
    match rpc {
        "SetReminder" => Req::SetReminder(pb::SetReminderRequest {
            actor,
            name: "big".into(),
            payload: payload(len),
            retry,
            ..set_reminder()
        }),
        "SetAlarm" => Req::SetAlarm(pb::SetAlarmRequest {
            actor,
            payload: payload(len),
            retry,
            ..set_alarm()
        }),
        _ => Req::SetTimer(pb::SetTimerRequest {
            actor,
            payload: payload(len),
            ..set_timer()
        }),
    }
}

/// Due times, periods, ends, retry policies and payload sizes of
/// reminders, alarms and timers.
pub fn schedule_time_cases() -> Vec<Case> {
    // (RPC and field, value, words: the field's name, then what is wrong)
    let rows: &[(&str, &str, &'static [&'static str])] = &[
        ("SetReminder", "-5s", &["due", "is not a duration", "90s"]),
        ("SetReminder", "soon", &["due", "is not a duration", "90s"]),
        ("SetReminder", "101y", &["due", "out of range", "100y"]),
        ("SetReminder", "9223372036854775807s", &["due"]),
        (
            "SetReminder",
            "1969-12-31T23:59:59Z",
            &["due", "before 1970"],
        ),
        (
            "SetReminder",
            "10000-01-01T00:00:00Z",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-13-01T00:00:00Z",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-02-30T00:00:00Z",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-01-01T25:00:00Z",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-01-01T00:00:00+24:00",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-01-01T00:00:61Z",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-01-01T23:59:60Z",
            &["due", "is not an RFC 3339 time"],
        ),
        (
            "SetReminder",
            "2030-01-01T00:00:00",
            &["due", "is not an RFC 3339 time"],
        ),
        ("SetReminder", "0s", &["period", "out of range", "1ms"]),
        ("SetReminder", "500us", &["period", "out of range", "1ms"]),
        (
            "SetReminder",
            "-1s",
            &["period", "is not a duration", "90s"],
        ),
        ("SetReminder", "P1M", &["period", "months"]),
        ("SetReminder", "101y", &["period", "out of range", "100y"]),
        ("SetReminder", "R0/PT1S", &["period", "repetition count"]),
        (
            "SetReminder",
            "R4294967296/PT1S",
            &["period", "repetition count"],
        ),
        (
            "SetReminder",
            "1969-12-31T00:00:00Z",
            &["until", "before 1970"],
        ),
        ("SetReminder", "1h", &["until", "before it is first due"]),
        ("SetAlarm", "-1s", &["at", "is not a duration", "90s"]),
        ("SetAlarm", "soon", &["at", "is not a duration", "90s"]),
        ("SetAlarm", "101y", &["at", "out of range", "100y"]),
        ("SetAlarm", "1969-12-31T23:59:59Z", &["at", "before 1970"]),
        (
            "SetAlarm",
            "2030-02-30T00:00:00Z",
            &["at", "is not an RFC 3339 time"],
        ),
        ("SetTimer", "-1s", &["due", "is not a duration", "90s"]),
        ("SetTimer", "soon", &["due", "is not a duration", "90s"]),
        ("SetTimer", "101y", &["due", "out of range", "100y"]),
        (
            "SetTimer",
            "2030-01-01T00:00:00Z",
            &["due", "is not a duration", "90s"],
        ),
        ("SetTimer", "0s", &["period", "out of range", "1ms"]),
        ("SetTimer", "500us", &["period", "out of range", "1ms"]),
        ("SetTimer", "101y", &["period", "out of range", "100y"]),
    ];
    let mut cases = Vec::new();
    for &(rpc, value, words) in rows {
        let field = words.first().copied().unwrap_or_default();
        let req = with_time(rpc, field, value);
        cases.push(case("times", format!("{field} {value:?}"), req, bad(words)));
    }
    let policy = |max_attempts, max_backoff_ms| {
        Some(pb::RetryPolicy {
            max_attempts,
            initial_backoff_ms: 0,
            max_backoff_ms,
        })
    };
    for rpc in ["SetReminder", "SetAlarm"] {
        for (what, retry, words) in [
            (
                "retry.max_attempts 1001",
                policy(1001, 0),
                &["retry.max_attempts", "1000"][..],
            ),
            (
                "retry.max_attempts u32::MAX",
                policy(u32::MAX, 0),
                &["retry.max_attempts", "1000"],
            ),
            (
                "retry.max_backoff_ms u64::MAX",
                policy(0, u64::MAX),
                &["retry.max_backoff", "100y"],
            ),
        ] {
            let req = with_payload(rpc, keep(), 2, retry);
            cases.push(case(
                "times",
                what,
                req,
                Expect::Fails(Code::InvalidArgument, words),
            ));
        }
    }
    for rpc in ["SetReminder", "SetAlarm", "SetTimer"] {
        let over = with_payload(rpc, keep(), LIMIT + 1, None);
        let over_words = &["payload is 65537 bytes", "65536", "--max-payload-bytes"];
        cases.push(case(
            "sizes",
            "payload one byte over the limit",
            over,
            bad(over_words),
        ));
        // Accepted ones go to the scratch actor, so no case changes `keep`.
        let at = with_payload(rpc, scratch(), LIMIT, None);
        cases.push(case(
            "limits-ok",
            "payload of exactly the limit",
            at,
            Expect::Ok,
        ));
    }
    let ok_reminder = |name: &str, due: &str, repeat: u32, missed: i32| {
        Req::SetReminder(pb::SetReminderRequest {
            actor: scratch(),
            name: name.into(),
            due: due.into(),
            repeat,
            missed,
            ..set_reminder()
        })
    };
    // RFC 3339 allows any number of fraction digits (past nanoseconds they
    // are cut); the last instant it writes; unbounded counts and an enum
    // value no version knows (read as the default).
    for (what, req) in [
        (
            "due with 10 fraction digits",
            ok_reminder("ok-1", "2030-01-01T00:00:00.1234567891Z", 0, 0),
        ),
        (
            "due at the last instant RFC 3339 writes",
            ok_reminder("ok-2", "9999-12-31T23:59:59.999Z", 0, 0),
        ),
        (
            "repeat u32::MAX and missed 99",
            ok_reminder("ok-3", FAR, u32::MAX, 99),
        ),
    ] {
        cases.push(case("limits-ok", what, req, Expect::Ok));
    }
    cases
}
