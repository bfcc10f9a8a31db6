//! Round trips of every per-actor request and answer through the wire
//! messages: what the forwarder writes, the owner reads back the same.

use bytes::Bytes;
use troupe_runtime::{
    ActorId, CallChain, ChainToken, CronSchedule, MissedFirings, Payload, ReminderInfo, RetryPolicy,
};

use super::*;

fn requests() -> Vec<ActorRequest> {
    let actor = ActorId::new("counter", "c1");
    let mut invoke = Call::new(actor.clone(), "incr", Payload::json(&b"{\"by\":2}"[..]));
    invoke.extra = Some(Box::new(CallExtra {
        metadata: vec![("k".into(), "v".into())],
        chain: Some(CallChain {
            id: "ch".into(),
            actors: vec![ActorId::new("a", "1")],
            // A forwarded chain keeps its token (the peer does not
            // check it, but passes it back unchanged).
            token: ChainToken::new(Bytes::from_static(b"token")),
        }),
        idempotency_key: Some("key-1".into()),
        new_key: true,
        key_retention: Some(Duration::from_secs(70)),
        ..CallExtra::default()
    }));
    let retry = RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(250),
        max_backoff: Duration::from_secs(9),
    };
    vec![
        ActorRequest::Invoke(invoke.clone()),
        ActorRequest::Tell(invoke.clone()),
        ActorRequest::TellDurable(invoke.clone()),
        ActorRequest::TellLater {
            call: invoke,
            delay: Duration::from_millis(90_500),
        },
        ActorRequest::GetState {
            actor: actor.clone(),
            keys: vec!["count".into()],
        },
        ActorRequest::SetReminder(ReminderSpec {
            actor: actor.clone(),
            name: "bill".into(),
            due_unix_ms: 1_767_225_600_123,
            period: Some(Duration::from_millis(86_400_500)),
            cron: None,
            jitter: None,
            repeat: Some(3),
            until_unix_ms: Some(1_800_000_000_000),
            payload: Payload {
                data: Bytes::from_static(b"\x00\x01"),
                content_type: troupe_runtime::ContentType::Bytes,
            },
            retry,
            missed: MissedFirings::Skip,
        }),
        ActorRequest::SetReminder(ReminderSpec {
            actor: actor.clone(),
            name: "standup".into(),
            due_unix_ms: 1_767_225_600_000,
            period: None,
            cron: Some(CronSchedule {
                pattern: "0 9 * * MON-FRI".into(),
                time_zone: "Europe/Berlin".into(),
            }),
            jitter: Some(Duration::from_secs(600)),
            repeat: None,
            until_unix_ms: None,
            payload: Payload::json("null"),
            retry,
            missed: MissedFirings::FireOnce,
        }),
        ActorRequest::GetReminder {
            actor: actor.clone(),
            name: "bill".into(),
        },
        ActorRequest::DeleteReminder {
            actor: actor.clone(),
            name: "bill".into(),
        },
        ActorRequest::PauseReminder {
            actor: actor.clone(),
            name: "bill".into(),
        },
        ActorRequest::ResumeReminder {
            actor: actor.clone(),
            name: "bill".into(),
        },
        ActorRequest::SetAlarm(AlarmSpec {
            actor: actor.clone(),
            at_unix_ms: 1_767_225_601_000,
            payload: Payload::json("null"),
            retry,
        }),
        ActorRequest::GetAlarm {
            actor: actor.clone(),
        },
        ActorRequest::DeleteAlarm {
            actor: actor.clone(),
        },
        ActorRequest::SetTimer(TimerSpec {
            actor: actor.clone(),
            name: "tick".into(),
            due: Duration::from_millis(1_500),
            period: Some(Duration::from_millis(20)),
            payload: Payload::json("1"),
            keep_alive: true,
        }),
        ActorRequest::DeleteTimer {
            actor,
            name: "tick".into(),
        },
    ]
}

#[test]
fn a_forwarded_request_is_read_back_as_the_same_request() -> Result<(), Status> {
    for request in requests() {
        let wire = request_to_pb(request.clone());
        let now = troupe_runtime::clock::unix_now_ms();
        let back = request_from_pb(wire.clone(), None, now)?;
        // Everything a request carries is in its wire form, so equal wire
        // forms mean equal requests.
        assert_eq!(request_to_pb(back), wire, "{request:?}");
    }
    Ok(())
}

#[test]
fn answers_read_back_as_written() {
    let reminder = ReminderInfo {
        actor: ActorId::new("counter", "c1"),
        name: "$alarm".into(),
        alarm: true,
        next_due_unix_ms: 5,
        period: None,
        cron: None,
        jitter: None,
        jitter_delay: Duration::ZERO,
        remaining: None,
        until_unix_ms: None,
        payload: Payload::json("1"),
        retry: RetryPolicy::default(),
        missed: MissedFirings::FireOnce,
        attempts: 1,
        fired: 2,
        paused: false,
        tell_method: None,
    };
    for answer in [
        ActorResponse::Payload(Payload::json("7")),
        ActorResponse::Accepted,
        ActorResponse::TellScheduled {
            due_unix_ms: 1_800_000_000_123,
        },
        ActorResponse::State {
            entries: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
            active: true,
            expires: vec![("b".into(), 1_800_000_000_456)].into_boxed_slice(),
        },
        ActorResponse::Reminder(Some(Box::new(reminder.clone()))),
        ActorResponse::Reminder(Some(Box::new(ReminderInfo {
            name: "standup".into(),
            alarm: false,
            cron: Some(CronSchedule {
                pattern: "0 9 * * MON-FRI".into(),
                time_zone: "Europe/Berlin".into(),
            }),
            jitter: Some(Duration::from_secs(600)),
            jitter_delay: Duration::from_millis(123_456),
            paused: true,
            ..reminder.clone()
        }))),
        ActorResponse::Reminder(Some(Box::new(ReminderInfo {
            name: "$tell:order-7".into(),
            alarm: false,
            tell_method: Some("ship".into()),
            ..reminder
        }))),
        ActorResponse::Reminder(None),
        ActorResponse::Deleted(true),
    ] {
        assert_eq!(response_from_pb(response_to_pb(answer.clone())), answer);
    }
}

#[test]
fn a_tell_waits_its_delay_or_until_its_time_by_the_daemons_clock() {
    // The daemon's (test) clock, not the wall clock.
    let now = 1_767_225_600_000;
    let tell = |delay_ms: u64, deliver_at: &str| pb::TellRequest {
        delay_ms,
        deliver_at: deliver_at.into(),
        ..pb::TellRequest::default()
    };
    let delay = |r: pb::TellRequest| tell_delay(&r, now).map_err(|s| s.code());
    assert_eq!(delay(tell(0, "")), Ok(None));
    assert_eq!(delay(tell(0, "  ")), Ok(None));
    assert_eq!(
        delay(tell(1_500, "")),
        Ok(Some(Duration::from_millis(1_500)))
    );
    assert_eq!(
        delay(tell(0, "2026-01-01T01:00:00Z")),
        Ok(Some(Duration::from_secs(3_600)))
    );
    assert_eq!(
        delay(tell(0, "2026-01-01T02:00:00+02:00")),
        Ok(Some(Duration::from_millis(1)))
    );
    assert_eq!(delay(tell(0, "90s")), Ok(Some(Duration::from_secs(90))));
    // Past: it still waits as a reminder, due at once.
    assert_eq!(
        delay(tell(0, "2025-06-01T00:00:00Z")),
        Ok(Some(Duration::from_millis(1)))
    );
    for bad in [
        tell(5, "2026-01-01T01:00:00Z"),
        tell(0, "tomorrow"),
        tell(0, "2200-01-01T00:00:00Z"),
    ] {
        assert_eq!(delay(bad), Err(tonic::Code::InvalidArgument));
    }
}
