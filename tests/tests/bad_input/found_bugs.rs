//! Bugs the matrix found, one regression test each (`fixed_*`); a bug
//! still open would be here too, ignored, as `bug_*`. None is.

use bytes::Bytes;
use tonic::Code;
use troupe_tests::*;

use crate::app_stream::{first_type, opened, register, turn_result, Script, StreamCase};
use crate::cases_client::chain;
use crate::expect::{bad, case, not_found, Case, Expect};
use crate::fixture::{read_back, Fixture};
use crate::requests::{invoke, scratch, set_reminder, set_timer, tell_of, Req};
use crate::{report, run_cases, run_stream_cases, Counts};

/// Runs `cases` and `stream` on a fresh fixture; fails listing what went
/// wrong, or if the stored state changed.
async fn reproduce(cases: Vec<Case>, stream: Vec<StreamCase>) -> anyhow::Result<()> {
    let mut f = Fixture::start().await?;
    let mut counts = Counts::new();
    let mut wrong = run_cases(&mut f.daemon, &mut f.apis, &cases, &mut counts).await?;
    wrong.extend(run_stream_cases(&mut f, &stream, &mut counts).await?);
    assert_eq!(read_back(&mut f.client, &mut f.apis.admin).await?, f.before);
    report(&wrong)
}

/// A chain refusal repeats the whole chain (its id and every actor on it)
/// in its message: past ~16 KiB the status does not fit the trailers the
/// caller accepts, and it gets an HTTP/2 error instead of
/// FAILED_PRECONDITION.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_a_long_refused_chain_is_cut_short_in_the_status() -> anyhow::Result<()> {
    let no_token = Expect::Fails(Code::FailedPrecondition, &["has no token"]);
    let not_issued = Expect::Fails(Code::FailedPrecondition, &["not issued by this daemon"]);
    let long_id = pb::InvokeRequest {
        chain: chain(&"c".repeat(100 * 1024), vec![], b""),
        ..invoke()
    };
    let many = pb::InvokeRequest {
        chain: chain(
            "ch-1",
            (0..2000)
                .map(|i| actor("counter", &format!("c{i}")))
                .collect(),
            &[7; 24],
        ),
        ..invoke()
    };
    let mut cases = Vec::new();
    for (what, request, expect) in [
        ("a chain id of 100 KiB without a token", long_id, no_token),
        (
            "a chain of 2000 actors with a made-up token",
            many,
            not_issued,
        ),
    ] {
        let tell = Req::Tell(tell_of(request.clone()));
        cases.push(case("chains", what, Req::Invoke(request), expect));
        cases.push(case("chains", what, tell, expect));
    }
    reproduce(cases, Vec::new()).await
}

/// A state change with neither `set` nor `delete` ends the app stream with
/// a message repeating its key whole: with a 100 KiB key the app gets an
/// HTTP/2 error instead of INVALID_ARGUMENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_a_long_bad_state_key_is_cut_short_on_the_app_stream() -> anyhow::Result<()> {
    let case = StreamCase {
        what: "a state change with neither set nor delete, its key 100 KiB".into(),
        script: Script::Turn(
            |id| {
                let change = pb::StateChange {
                    ttl_ms: None,
                    key: "k".repeat(100 * 1024),
                    op: None,
                };
                vec![turn_result(id, "2", vec![change])]
            },
            Expect::Fails(Code::Unavailable, &[]),
            bad(&["neither `set` nor `delete`"]),
        ),
    };
    reproduce(Vec::new(), vec![case]).await
}

/// The NOT_FOUND for an unknown type lists every registered type: with a
/// thousand types of 60 bytes registered, the status does not fit the
/// caller's trailers and it gets an HTTP/2 error (INTERNAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_an_unknown_type_lists_a_few_registered_types() -> anyhow::Result<()> {
    let mut f = Fixture::start().await?;
    let types = (0..1000)
        .map(|i| type_spec(&format!("many-{i:04}-{}", "t".repeat(50))))
        .collect();
    let (raw, _) = RawApp::register(f.daemon.addr, types).await?;
    let nosuch = || Some(actor("nosuch", "x"));
    let cases = [
        Req::Invoke(pb::InvokeRequest {
            actor: nosuch(),
            ..invoke()
        }),
        Req::SetReminder(pb::SetReminderRequest {
            actor: nosuch(),
            ..set_reminder()
        }),
    ]
    .map(|req| {
        case(
            "unknown",
            "unknown type, 1000 registered",
            req,
            not_found(&["nosuch"]),
        )
    });
    let wrong = run_cases(&mut f.daemon, &mut f.apis, &cases, &mut Counts::new()).await?;
    drop(raw);
    report(&wrong)
}

/// A timer's period is read like a reminder's, "R5/PT1S" included, but its
/// repetition count is dropped: the timer fires every second until deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_a_timer_period_with_a_repetition_count_is_refused() -> anyhow::Result<()> {
    let timer = Req::SetTimer(pb::SetTimerRequest {
        actor: scratch(),
        period: "R5/PT1S".into(),
        ..set_timer()
    });
    let expect = bad(&["period", "R5/PT1S"]);
    reproduce(
        vec![case("times", "period R5/PT1S", timer, expect)],
        Vec::new(),
    )
    .await
}

/// The rest of Register's names are checked; `readonly_methods` are taken
/// as they are (empty, control characters, any length) and echoed back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_malformed_readonly_methods_are_refused_at_register() -> anyhow::Result<()> {
    let case = opened(
        "Register: readonly_methods \"\", \"a\\nb\" and 300 bytes",
        |ty| {
            register(ty, |r| {
                first_type(r).readonly_methods = vec![String::new(), "a\nb".into(), "m".repeat(300)]
            })
        },
        bad(&["readonly"]),
    );
    reproduce(Vec::new(), vec![case]).await
}

/// A Register whose answer (Registered) is larger than the daemon sends on
/// an app stream (2 x --max-payload-bytes + 64 KiB) is accepted, and then
/// the stream fails with tonic's OUT_OF_RANGE "encoded message length too
/// large", which says nothing of the registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_a_register_too_large_to_answer_is_refused() -> anyhow::Result<()> {
    let case = opened(
        "Register: 3000 types of 250 bytes",
        |ty| {
            register(ty, |r| {
                r.types = (0..3000)
                    .map(|i| type_spec(&format!("{ty}-{i:04}-{}", "t".repeat(240))))
                    .collect()
            })
        },
        bad(&[]),
    );
    reproduce(Vec::new(), vec![case]).await
}

/// Bytes that are no AppMessage got INVALID_ARGUMENT ("app stream broke")
/// after Register, but INTERNAL (the decoder's status, passed on) as the
/// first message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_garbage_as_the_first_app_message_is_invalid_argument() -> anyhow::Result<()> {
    let garbage = |_: &str| Bytes::from_static(&[0xff; 6]);
    let case = opened(
        "not protobuf as the first message",
        garbage,
        bad(&["app stream broke"]),
    );
    reproduce(Vec::new(), vec![case]).await
}
