//! Invoke and Tell (method names, metadata, call chains, sizes, deadlines),
//! GetState's keys, and requests that do not decode.

use std::collections::HashMap;

use bytes::Bytes;
use prost::Message as _;
use tonic::Code;
use troupe_tests::*;

use crate::expect::{bad, case, Case, Expect};
use crate::requests::{
    delayed_tell_of, delete_key, edit_state, get_state, invoke, invoke_with, payload, tell_of, Req,
};
use crate::LIMIT;

pub fn chain(id: &str, actors: Vec<pb::ActorRef>, token: &'static [u8]) -> Option<pb::CallChain> {
    Some(pb::CallChain {
        id: id.into(),
        actors,
        token: Bytes::from_static(token),
    })
}

/// Invoke and Tell: method names, payload and metadata sizes, call chains
/// (honoured only with a token the daemon issued to a running turn, which
/// no outside caller has).
pub fn call_cases() -> Vec<Case> {
    let meta = |k: &str, v: &str| HashMap::from([(k.to_owned(), v.to_owned())]);
    let other = || vec![actor("counter", "other")];
    let no_token = Expect::Fails(Code::FailedPrecondition, &["has no token", "send no chain"]);
    let not_issued = Expect::Fails(Code::FailedPrecondition, &["not issued by this daemon"]);
    // (category, what, request, expectation for Invoke and Tell)
    let rows: Vec<(&str, &str, pb::InvokeRequest, Expect)> = vec![
        (
            "names",
            "empty method",
            invoke_with(|r| r.method = String::new()),
            bad(&["method name", "empty"]),
        ),
        (
            "names",
            "method of 257 bytes",
            invoke_with(|r| r.method = "m".repeat(257)),
            bad(&["method name", "257 bytes"]),
        ),
        (
            "names",
            "method with a newline",
            invoke_with(|r| r.method = "g\net".into()),
            bad(&["method name", "control characters"]),
        ),
        (
            "names",
            "method with NUL",
            invoke_with(|r| r.method = "get\0".into()),
            bad(&["method name", "control characters"]),
        ),
        (
            "names",
            "empty metadata key",
            invoke_with(|r| r.metadata = meta("", "v")),
            bad(&["metadata key", "empty"]),
        ),
        (
            "names",
            "metadata key with a newline",
            invoke_with(|r| r.metadata = meta("trace\nparent", "v")),
            bad(&["metadata key", "control characters"]),
        ),
        (
            "chains",
            "a chain without a token",
            invoke_with(|r| r.chain = chain("ch-1", other(), b"")),
            no_token,
        ),
        (
            "chains",
            "a chain with an empty id and no actors",
            invoke_with(|r| r.chain = chain("", vec![], b"")),
            no_token,
        ),
        (
            "chains",
            "a chain with a made-up token",
            invoke_with(|r| r.chain = chain("ch-1", other(), &[7; 24])),
            not_issued,
        ),
        (
            "chains",
            "a chain with a 3-byte token",
            invoke_with(|r| r.chain = chain("ch-1", other(), b"abc")),
            not_issued,
        ),
        (
            "chains",
            "a chain with bad names and a made-up token",
            invoke_with(|r| r.chain = chain("ch\0", vec![actor("", "")], &[7; 24])),
            not_issued,
        ),
        (
            "chains",
            "a chain 33 deep with a made-up token",
            invoke_with(|r| {
                r.chain = chain(
                    "ch-1",
                    (0..33)
                        .map(|i| actor("counter", &format!("c{i}")))
                        .collect(),
                    &[7; 24],
                )
            }),
            not_issued,
        ),
        (
            "limits-ok",
            "payload of exactly --max-payload-bytes",
            invoke_with(|r| r.payload = payload(LIMIT)),
            Expect::Ok,
        ),
        (
            "sizes",
            "payload one byte over --max-payload-bytes",
            invoke_with(|r| r.payload = payload(LIMIT + 1)),
            bad(&["payload is 65537 bytes", "65536", "--max-payload-bytes"]),
        ),
        (
            "sizes",
            "metadata over --max-payload-bytes",
            invoke_with(|r| r.metadata = meta("k", &"v".repeat(LIMIT))),
            bad(&["call metadata", "--max-payload-bytes"]),
        ),
        (
            "sizes",
            "request past the gRPC message limit (2 x payload limit + 64 KiB)",
            invoke_with(|r| r.payload = payload(4 * LIMIT)),
            Expect::Fails(Code::OutOfRange, &["message length too large"]),
        ),
        (
            "enums",
            "content type 99",
            invoke_with(|r| {
                r.payload = Some(pb::Payload {
                    data: Bytes::from_static(b"{}"),
                    content_type: 99,
                })
            }),
            Expect::Ok,
        ),
    ];
    let mut cases = Vec::new();
    for (category, what, request, expect) in rows {
        let tell = Req::Tell(tell_of(request.clone()));
        let later = Req::Tell(delayed_tell_of(request.clone()));
        cases.push(case(category, what, Req::Invoke(request), expect));
        cases.push(case(category, what, tell, expect));
        cases.push(case(category, format!("{what}, delayed"), later, expect));
    }
    // A delayed tell waits, stored: never best effort, never past the
    // times a due time can hold.
    cases.push(case(
        "enums",
        "delayed tell, best effort",
        Req::Tell(pb::TellRequest {
            delivery: pb::Delivery::BestEffort.into(),
            ..delayed_tell_of(invoke())
        }),
        bad(&["delayed tell", "best effort"]),
    ));
    cases.push(case(
        "times",
        "delay of u64::MAX ms",
        Req::Tell(pb::TellRequest {
            delay_ms: u64::MAX,
            ..delayed_tell_of(invoke())
        }),
        bad(&["delay"]),
    ));
    for (name, at) in [
        ("deliver_at not a time", "next tuesday"),
        ("deliver_at month 13", "2026-13-01T00:00:00Z"),
        ("deliver_at past the delay limit", "9999-12-31T23:59:59Z"),
    ] {
        cases.push(case(
            "times",
            name,
            Req::Tell(pb::TellRequest {
                delay_ms: 0,
                deliver_at: at.into(),
                ..delayed_tell_of(invoke())
            }),
            bad(&["deliver_at"]),
        ));
    }
    cases.push(case(
        "times",
        "delay_ms and deliver_at both",
        Req::Tell(pb::TellRequest {
            deliver_at: "2030-01-01T00:00:00Z".into(),
            ..delayed_tell_of(invoke())
        }),
        bad(&["delay_ms", "deliver_at"]),
    ));
    // Deadlines: the caller's `grpc-timeout`. Malformed ones are ignored
    // (as tonic's server does), absurdly long ones capped by --call-timeout.
    // Not here: deadlines of a millisecond or less, which tonic's client
    // enforces itself and ends CANCELLED "Timeout expired" before the
    // daemon can answer (grpcio and grpc-js say DEADLINE_EXCEEDED).
    for header in [
        "garbage",
        "-1S",
        "1.5S",
        "30S",
        "99999999H",
        "999999999999H",
    ] {
        cases.push(Case {
            grpc_timeout: Some(header),
            ..case(
                "deadlines",
                format!("grpc-timeout {header:?}"),
                Req::Invoke(invoke()),
                Expect::Ok,
            )
        });
    }
    cases
}

/// State keys read (GetState) and edited (EditActorState).
pub fn state_key_cases() -> Vec<Case> {
    let keys = |keys: Vec<String>| {
        Req::GetState(pb::GetStateRequest {
            keys,
            ..get_state()
        })
    };
    let mut cases = vec![
        case(
            "names",
            "empty state key",
            keys(vec!["count".into(), String::new()]),
            bad(&["state key", "empty"]),
        ),
        case(
            "names",
            "state key of 257 bytes",
            keys(vec!["k".repeat(257)]),
            bad(&["state key", "257 bytes"]),
        ),
        case(
            "names",
            "state key of 100 KiB",
            keys(vec!["k".repeat(100 * 1024)]),
            bad(&["state key", "102400 bytes"]),
        ),
        case(
            "names",
            "state key with NUL",
            keys(vec!["co\0unt".into()]),
            bad(&["state key", "control characters"]),
        ),
        case(
            "limits-ok",
            "state key of exactly 256 bytes",
            keys(vec!["k".repeat(256)]),
            Expect::Ok,
        ),
        case(
            "limits-ok",
            "5000 state keys",
            keys((0..5000).map(|i| format!("k{i}")).collect()),
            Expect::Ok,
        ),
    ];
    let edit = |changes: Vec<pb::StateChange>| Req::EditActorState(edit_state(changes));
    cases.extend([
        case(
            "names",
            "edit of no keys",
            edit(vec![]),
            bad(&["names no state key"]),
        ),
        case(
            "names",
            "edit naming a key twice",
            edit(vec![delete_key("probe"), delete_key("probe")]),
            bad(&["\"probe\" twice"]),
        ),
        case(
            "names",
            "edit of an empty key",
            edit(vec![delete_key("")]),
            bad(&["state key", "empty"]),
        ),
        case(
            "names",
            "edit of a key of 257 bytes",
            edit(vec![delete_key(&"k".repeat(257))]),
            bad(&["state key", "257 bytes"]),
        ),
        case(
            "names",
            "edit of a key with NUL",
            edit(vec![delete_key("pro\0be")]),
            bad(&["state key", "control characters"]),
        ),
        case(
            "names",
            "expectation naming a key twice",
            Req::EditActorState(pb::EditActorStateRequest {
                expect: vec![delete_key("probe"), delete_key("probe")],
                ..edit_state(vec![delete_key("probe")])
            }),
            bad(&["expectation", "\"probe\" twice"]),
        ),
        case(
            "names",
            "expectation of a key with NUL",
            Req::EditActorState(pb::EditActorStateRequest {
                expect: vec![delete_key("pro\0be")],
                ..edit_state(vec![delete_key("probe")])
            }),
            bad(&["expectation", "control characters"]),
        ),
        case(
            "names",
            "edit with neither set nor delete",
            edit(vec![pb::StateChange {
                ttl_ms: None,
                key: "probe".into(),
                op: None,
            }]),
            bad(&["neither `set` nor `delete`"]),
        ),
    ]);
    cases
}

/// Requests that do not decode: gRPC's rule is INTERNAL for a request that
/// does not parse (tonic answers before the daemon sees it), with the
/// decoder's message naming the field.
pub fn undecodable_cases() -> Vec<Case> {
    // Field 2 (method) as bytes 0xff 0xfe: a string that is not UTF-8.
    let mut invoke = invoke().encode_to_vec();
    invoke.extend_from_slice(&[0x12, 0x02, 0xff, 0xfe]);
    let mut list = pb::ListActorsRequest::default().encode_to_vec();
    list.extend_from_slice(&[0x1a, 0x02, 0xc3, 0x28]);
    vec![
        case(
            "undecodable",
            "method not UTF-8",
            Req::Raw("/troupe.v1.ActorClient/Invoke", invoke.into()),
            Expect::Fails(Code::Internal, &["InvokeRequest.method", "UTF-8"]),
        ),
        case(
            "undecodable",
            "page_token not UTF-8",
            Req::Raw("/troupe.v1.Admin/ListActors", list.into()),
            Expect::Fails(Code::Internal, &["ListActorsRequest.page_token", "UTF-8"]),
        ),
        case(
            "undecodable",
            "not protobuf (wire type 7)",
            Req::Raw("/troupe.v1.Admin/Status", Bytes::from_static(&[0xff; 6])),
            Expect::Fails(Code::Internal, &["failed to decode Protobuf message"]),
        ),
    ]
}
