//! Actor refs: every malformed one on every RPC that takes one, refs at the
//! limits, an unknown type and an unknown actor.

use tonic::Code;
use troupe_tests::*;

use crate::expect::{bad, case, not_found, Case, Expect};
use crate::requests::{invoke, per_actor, set_timer, Req};

/// Every malformed actor ref on every RPC that takes one; a ref at the
/// limits, an unknown type and an unknown actor, which must pass the checks.
pub fn actor_cases() -> Vec<Case> {
    const ID_CONTROL: &[&str] = &["actor id", "control characters"];
    let long_type = "t".repeat(257);
    let (long_id, huge_id) = ("é".repeat(129), "i".repeat(100 * 1024));
    let variants: [(&str, &str, &str, &'static [&'static str]); 9] = [
        ("empty type", "", "keep", &["actor type", "empty"]),
        ("empty id", "counter", "", &["actor id", "empty"]),
        (
            "type of 257 bytes",
            &long_type,
            "keep",
            &["actor type", "at most 256"],
        ),
        (
            "id of 258 bytes in 129 characters",
            "counter",
            &long_id,
            &["actor id", "258 bytes"],
        ),
        (
            "id of 100 KiB",
            "counter",
            &huge_id,
            &["actor id", "102400 bytes"],
        ),
        (
            "type with BEL",
            "co\u{7}",
            "keep",
            &["actor type", "control characters"],
        ),
        ("id with NUL", "counter", "ke\0ep", ID_CONTROL),
        ("id with DEL", "counter", "ke\u{7f}ep", ID_CONTROL),
        (
            "id with U+0085 (a C1 control)",
            "counter",
            "ke\u{85}ep",
            ID_CONTROL,
        ),
    ];
    let mut cases = Vec::new();
    for base in per_actor() {
        let missing = base.clone().with_actor(None);
        cases.push(case(
            "names",
            "no actor",
            missing,
            bad(&["no actor", "actor.type"]),
        ));
        for (what, ty, id, words) in variants {
            let req = base.clone().with_actor(Some(actor(ty, id)));
            cases.push(case("names", what, req, bad(words)));
        }
    }
    // 256 bytes (128 two-byte characters) is allowed: every RPC works on it.
    let at_limit = Some(actor("counter", &"é".repeat(128)));
    for base in per_actor() {
        let req = base.with_actor(at_limit.clone());
        cases.push(case(
            "limits-ok",
            "id of exactly 256 bytes",
            req,
            Expect::Ok,
        ));
    }
    let long_type = Some(actor(&"t".repeat(256), "keep"));
    cases.push(case(
        "limits-ok",
        "type of exactly 256 bytes (unknown)",
        Req::Invoke(pb::InvokeRequest {
            actor: long_type,
            ..invoke()
        }),
        not_found(&["no app hosts actor type", "counter"]),
    ));
    // A well-formed type no app registered.
    let nosuch = Some(actor("nosuch", "keep"));
    let unknown_type = [
        not_found(&["nosuch", "registered types", "counter"]),
        not_found(&["nosuch", "registered types"]),
        Expect::Ok, // GetState reads the store: nothing
        not_found(&["nosuch"]),
        not_found(&["no reminder"]),
        not_found(&["nosuch/keep", "no reminder"]), // pause
        not_found(&["nosuch/keep", "no reminder"]), // resume
        Expect::Ok,                                 // deleted: false
        not_found(&["nosuch"]),
        not_found(&["no alarm"]),
        Expect::Ok,
        not_found(&["nosuch"]),
        Expect::Ok,
        not_found(&["nosuch/keep", "not active"]),
        Expect::Ok, // an edit of what the store holds for it
        Expect::Ok, // deactivated: false
    ];
    for (base, expect) in per_actor().into_iter().zip(unknown_type) {
        let req = base.with_actor(nosuch.clone());
        cases.push(case("unknown", "unknown type", req, expect));
    }
    // A known type, an actor never seen.
    let ghost = || Some(actor("counter", "ghost"));
    for (req, expect) in [
        (
            Req::GetState(pb::GetStateRequest {
                actor: ghost(),
                keys: vec![],
            }),
            Expect::Ok,
        ),
        (
            Req::GetReminder(pb::ReminderRef {
                actor: ghost(),
                name: "keep".into(),
            }),
            not_found(&["counter/ghost", "no reminder \"keep\""]),
        ),
        (
            Req::PauseReminder(pb::ReminderRef {
                actor: ghost(),
                name: "keep".into(),
            }),
            not_found(&["counter/ghost", "no reminder \"keep\""]),
        ),
        (
            Req::GetAlarm(pb::AlarmRef { actor: ghost() }),
            not_found(&["counter/ghost", "no alarm"]),
        ),
        (
            Req::SetTimer(pb::SetTimerRequest {
                actor: ghost(),
                ..set_timer()
            }),
            Expect::Fails(Code::FailedPrecondition, &["not active", "reminder"]),
        ),
        (
            Req::DescribeActor(pb::DescribeActorRequest { actor: ghost() }),
            not_found(&["counter/ghost", "not active"]),
        ),
        (
            Req::DeactivateActor(pb::DeactivateActorRequest { actor: ghost() }),
            Expect::Ok,
        ),
    ] {
        cases.push(case("unknown", "unknown actor", req, expect));
    }
    cases
}
