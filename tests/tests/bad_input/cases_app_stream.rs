//! The app stream cases: messages before Register, bad Registers, bad
//! messages after it, and bad answers to a turn in flight.

use bytes::Bytes;
use prost::Message as _;
use tonic::Code;
use troupe_tests::*;

use crate::app_stream::{
    answer, deactivated, enc, first_type, msg, opened, register, scripted, set, turn_result,
    Answers, Script, StreamCase,
};
use crate::expect::{bad, Expect};
use crate::LIMIT;

pub fn stream_cases() -> Vec<StreamCase> {
    use pb::app_message::Kind;
    let mut cases = Vec::new();
    // Before Register.
    let not_register = Expect::Fails(Code::FailedPrecondition, &["first message", "Register"]);
    for (what, first) in [
        ("an empty AppMessage", pb::AppMessage::default()),
        ("an AppBatch", msg(Kind::Batch(pb::AppBatch::default()))),
        ("a DeactivateResult", deactivated(0)),
    ] {
        let first = enc(first);
        cases.push(opened(
            format!("{what} first"),
            move |_| first.clone(),
            not_register,
        ));
    }
    // Register with a bad name or option; absurd values that have a
    // meaning (none, the most, the default) are accepted.
    type Edit = fn(&mut pb::Register);
    let registers: [(&str, Edit, Expect); 14] = [
        (
            "type name of 257 bytes",
            |r| first_type(r).name = "t".repeat(257),
            bad(&["actor type", "257 bytes"]),
        ),
        (
            "type name with NUL",
            |r| first_type(r).name = "raw\0".into(),
            bad(&["actor type", "control characters"]),
        ),
        ("no types", |r| r.types.clear(), bad(&["no actor types"])),
        (
            "one type twice",
            |r| r.types.extend(r.types.clone()),
            bad(&["listed twice"]),
        ),
        (
            "counter, with other options than its app's",
            |r| first_type(r).name = "counter".into(),
            bad(&["counter", "different options"]),
        ),
        (
            "app_name of 257 bytes",
            |r| r.app_name = "a".repeat(257),
            bad(&["app_name", "257 bytes"]),
        ),
        (
            "app_name with a newline",
            |r| r.app_name = "app\n".into(),
            bad(&["app_name", "control characters"]),
        ),
        (
            "sdk with NUL",
            |r| r.sdk = "sdk\0".into(),
            bad(&["sdk", "control characters"]),
        ),
        (
            "max_receive_bytes 1",
            |r| r.max_receive_bytes = 1,
            bad(&["max_receive_bytes", "65536"]),
        ),
        (
            "idle_timeout_ms u64::MAX",
            |r| first_type(r).idle_timeout_ms = u64::MAX,
            bad(&["idle timeout", "must be between"]),
        ),
        (
            "idle_timeout_ms 1",
            |r| first_type(r).idle_timeout_ms = 1,
            bad(&["idle timeout", "must be between"]),
        ),
        (
            "max_mailbox u32::MAX",
            |r| first_type(r).max_mailbox = u32::MAX,
            bad(&["max_mailbox", "1000000"]),
        ),
        (
            "turn_timeout_ms u64::MAX",
            |r| first_type(r).turn_timeout_ms = u64::MAX,
            bad(&["turn timeout", "24h"]),
        ),
        (
            "max_receive_bytes u64::MAX, max_pending_calls u32::MAX, state_mode 99",
            |r| {
                r.max_receive_bytes = u64::MAX;
                first_type(r).max_pending_calls = u32::MAX;
                first_type(r).state_mode = 99;
            },
            Expect::Ok,
        ),
    ];
    for (what, edit, expect) in registers {
        cases.push(opened(
            format!("Register: {what}"),
            move |ty| register(ty, edit),
            expect,
        ));
    }
    // After Register, with nothing in flight.
    let batch = |messages| enc(msg(Kind::Batch(pb::AppBatch { messages })));
    // TurnResult { error: ActorFailure { type: 0xff 0xfe } }: not UTF-8.
    let not_utf8 = Bytes::from_static(&[0x1a, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0xff, 0xfe]);
    for (what, message, expect) in [
        (
            "Register twice",
            register("raw-again", |_| ()),
            Expect::Fails(Code::FailedPrecondition, &["Register", "twice"]),
        ),
        (
            "an empty AppMessage",
            enc(pb::AppMessage::default()),
            bad(&["empty AppMessage"]),
        ),
        (
            "Register inside an AppBatch",
            batch(vec![register_message("x", vec![])]),
            bad(&["Register inside an AppBatch"]),
        ),
        (
            "an AppBatch inside an AppBatch",
            batch(vec![msg(Kind::Batch(pb::AppBatch::default()))]),
            bad(&["AppBatch inside an AppBatch"]),
        ),
        (
            "a DeactivateResult nobody asked for",
            enc(deactivated(77)),
            bad(&["DeactivateResult for call_id 77", "waits for nothing"]),
        ),
        (
            "a TurnResult for call id u64::MAX",
            turn_result(u64::MAX, "1", vec![]),
            bad(&["call_id 18446744073709551615"]),
        ),
        (
            "a string that is not UTF-8",
            not_utf8,
            bad(&["app stream broke", "UTF-8"]),
        ),
    ] {
        cases.push(scripted(what, Script::AfterRegister(vec![message], expect)));
    }
    // Answers to a turn in flight.
    use pb::turn_result::Outcome;
    let gone = Expect::Fails(Code::Unavailable, &[]);
    let invalid_change = bad(&["invalid state change", "discarded"]);
    let turns: [(&str, Answers, Expect, Expect); 11] = [
        (
            "the turn answered twice",
            |id| vec![turn_result(id, "2", vec![]), turn_result(id, "3", vec![])],
            Expect::Ok,
            bad(&["TurnResult for call_id", "waits for nothing"]),
        ),
        (
            "the turn answered with an ActivateResult",
            |id| {
                vec![enc(msg(Kind::Activated(pb::ActivateResult {
                    call_id: id,
                    ..Default::default()
                })))]
            },
            gone,
            bad(&["ActivateResult for call_id", "waits for a TurnResult"]),
        ),
        (
            "the turn answered with a DeactivateResult",
            |id| vec![enc(deactivated(id))],
            gone,
            bad(&["DeactivateResult for call_id", "waits for a TurnResult"]),
        ),
        (
            "an answer and one for an unknown call id in one AppBatch",
            |id| {
                let answer = |call_id| {
                    pb::AppMessage::decode(turn_result(call_id, "2", vec![])).unwrap_or_default()
                };
                vec![enc(msg(Kind::Batch(pb::AppBatch {
                    messages: vec![answer(id), answer(999_999)],
                })))]
            },
            Expect::Ok,
            bad(&["call_id 999999"]),
        ),
        (
            "a state change with neither set nor delete",
            |id| {
                vec![turn_result(
                    id,
                    "2",
                    vec![
                        set("k", "v2"),
                        pb::StateChange {
                            ttl_ms: None,
                            key: "k".into(),
                            op: None,
                        },
                    ],
                )]
            },
            gone,
            bad(&["\"k\"", "neither `set` nor `delete`"]),
        ),
        (
            "a state change with an empty key",
            |id| vec![turn_result(id, "2", vec![set("k", "v2"), set("", "x")])],
            invalid_change,
            Expect::Ok,
        ),
        (
            "a state key with control characters",
            |id| vec![turn_result(id, "2", vec![set("k", "v2"), set("k\n", "x")])],
            invalid_change,
            Expect::Ok,
        ),
        (
            "a state value one byte over --max-payload-bytes",
            |id| {
                vec![turn_result(
                    id,
                    "2",
                    vec![set("k", "v2"), set("big", vec![b'x'; LIMIT + 1])],
                )]
            },
            bad(&["invalid state change", "65537 bytes", "--max-payload-bytes"]),
            Expect::Ok,
        ),
        (
            "a reply one byte over --max-payload-bytes",
            |id| vec![turn_result(id, vec![b' '; LIMIT + 1], vec![set("k", "v2")])],
            Expect::Fails(
                Code::ResourceExhausted,
                &["65537 bytes", "--max-payload-bytes"],
            ),
            Expect::Ok,
        ),
        (
            "a TurnResult with neither reply nor error",
            |id| vec![answer(id, None, false)],
            Expect::Fails(Code::Unknown, &["neither a reply nor an error"]),
            Expect::Ok,
        ),
        (
            "lease_expired from an app of a daemon without leases",
            |id| vec![answer(id, Some(Outcome::Reply(json_payload("2"))), true)],
            Expect::Fails(Code::Unavailable, &["lease"]),
            Expect::Ok,
        ),
    ];
    for (what, answers, on_call, on_stream) in turns {
        cases.push(scripted(what, Script::Turn(answers, on_call, on_stream)));
    }
    cases
}
