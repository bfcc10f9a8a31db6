//! The bad-input matrix (issue 16, point 6): every RPC of `ActorClient` and
//! `Admin`, and the app stream, fed one malformed field at a time against
//! one daemon with an app hosting a type. Each case names the status it
//! must get and words its message must hold (the field or the problem);
//! no message may echo a huge input. The daemon must stay up through every
//! case, a valid call must work after them, and the state, reminders and
//! alarm stored before the matrix must read back unchanged, before and
//! after a `kill -9` and restart.
//!
//! Durations and times are strings in this API ("90s", "PT1M30S", RFC
//! 3339), so "negative", "too large" and "out of range" cases are spelled
//! that way; deadlines are the `grpc-timeout` header. Page sizes are
//! unsigned, so negative sizes cannot be sent.
//!
//! This file holds the runners and the matrix test; the modules:
//! - `requests`: the RPC enum, sending it, and the valid requests the
//!   cases make bad one field at a time;
//! - `expect`: what a case must get, and the `Case` row;
//! - `cases_actor`, `cases_client`, `cases_schedule`, `cases_admin`: the
//!   rows for actor refs on every RPC, Invoke/Tell/GetState and requests
//!   that do not decode, reminders/alarms/timers, and the listings;
//! - `app_stream`, `cases_app_stream`: the AppHost.Attach scripts, their
//!   runner and their cases;
//! - `fixture`: the daemon and the state the matrix must leave alone;
//! - `found_bugs`: what the matrix found, one regression test each.

mod app_stream;
mod cases_actor;
mod cases_admin;
mod cases_app_stream;
mod cases_client;
mod cases_schedule;
mod expect;
mod fixture;
mod found_bugs;
mod requests;

use std::collections::BTreeMap;
use std::time::Instant;

use troupe_tests::*;

use app_stream::{run_stream_case, Script, StreamCase};
use expect::{mismatch, Case};
use fixture::{counter_type, read_back, Fixture};
use requests::Apis;

/// The daemon's `--max-payload-bytes`: small, so sizes at and past it are
/// cheap to send.
const LIMIT: usize = 65_536;
/// `--host-wait 0s`: a call for a type no app registered is NOT_FOUND at
/// once, not after waiting for an app to come.
const DAEMON_ARGS: &[&str] = &["--max-payload-bytes", "65536", "--host-wait", "0s"];
/// Far enough that nothing the matrix sets fires while it runs.
const FAR: &str = "1000h";

/// Cases counted per RPC (or "AppHost.Attach") and category.
type Counts = BTreeMap<&'static str, BTreeMap<&'static str, usize>>;

fn tally(counts: &mut Counts, rpc: &'static str, category: &'static str) {
    *counts.entry(rpc).or_default().entry(category).or_default() += 1;
}

/// Fails, with the daemon's log, if the daemon died at `label`.
fn ensure_running(daemon: &mut Daemon, label: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        daemon.is_running(),
        "the daemon died at {label}; its log:\n{}",
        daemon.log()
    );
    Ok(())
}

/// Runs `cases` in order; what went wrong. Stops at once if the daemon dies.
async fn run_cases(
    daemon: &mut Daemon,
    apis: &mut Apis,
    cases: &[Case],
    counts: &mut Counts,
) -> anyhow::Result<Vec<String>> {
    let mut wrong = Vec::new();
    for case in cases {
        let label = format!("{} [{}] {}", case.req.rpc(), case.category, case.what);
        let sent = case.req.clone().send(apis, case.grpc_timeout);
        match within(WAIT, &label, sent).await {
            Ok(got) => wrong.extend(mismatch(case.expect, &got).map(|m| format!("{label}: {m}"))),
            Err(e) => wrong.push(format!("{label}: {e}")),
        }
        ensure_running(daemon, &label)?;
        tally(counts, case.req.rpc(), case.category);
    }
    Ok(wrong)
}

/// Runs the stream `cases`, each on a type of its own, checking after each
/// that the counter app attached beside them still serves.
async fn run_stream_cases(
    fixture: &mut Fixture,
    cases: &[StreamCase],
    counts: &mut Counts,
) -> anyhow::Result<Vec<String>> {
    let mut wrong = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let ty = format!("raw-{i}");
        let label = format!("AppHost.Attach: {}", case.what);
        let ran = run_stream_case(&fixture.daemon, &mut fixture.client, &ty, &case.script);
        match within(WAIT * 2, &label, ran).await.and_then(|r| r) {
            Ok(found) => wrong.extend(found.into_iter().map(|m| format!("{label}: {m}"))),
            Err(e) => wrong.push(format!("{label}: {e:#}")),
        }
        ensure_running(&mut fixture.daemon, &label)?;
        let category = match case.script {
            Script::Open(..) => "before or at Register",
            Script::AfterRegister(..) => "after Register",
            Script::Turn(..) => "answering a turn",
        };
        tally(counts, "AppHost.Attach", category);
        // The well-behaved app beside it goes on.
        let count = fixture
            .client
            .invoke("counter", "keep", "get", "{}")
            .await?;
        anyhow::ensure!(count == 7, "after {label}: keep's count is {count}");
        let end = fixture.app.events().stream_end;
        anyhow::ensure!(
            end.is_none(),
            "after {label}: the counter app's stream ended: {end:?}"
        );
    }
    Ok(wrong)
}

fn report(wrong: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(
        wrong.is_empty(),
        "{} of the cases went wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_rpc_refuses_bad_input_and_keeps_what_is_stored() -> anyhow::Result<()> {
    let started = Instant::now();
    let mut f = Fixture::start().await?;
    let tokens = cases_admin::page_tokens(&mut f.apis).await?;
    let mut cases = cases_actor::actor_cases();
    cases.extend(cases_client::call_cases());
    cases.extend(cases_client::state_key_cases());
    cases.extend(cases_schedule::schedule_name_cases());
    cases.extend(cases_schedule::schedule_time_cases());
    cases.extend(cases_admin::listing_cases(&tokens));
    cases.extend(cases_client::undecodable_cases());
    let stream = cases_app_stream::stream_cases();

    let mut counts = Counts::new();
    let mut wrong = run_cases(&mut f.daemon, &mut f.apis, &cases, &mut counts).await?;
    wrong.extend(run_stream_cases(&mut f, &stream, &mut counts).await?);
    let mut summary = String::new();
    for (rpc, by_category) in &counts {
        let total: usize = by_category.values().sum();
        summary.push_str(&format!("{rpc:>18}: {total:>3} {by_category:?}\n"));
    }
    eprintln!(
        "bad-input matrix: {} RPC cases, {} app stream cases\n{summary}",
        cases.len(),
        stream.len()
    );
    report(&wrong)?;

    // The daemon is up (no task of it panicked either), serves, and kept
    // what was stored ...
    assert!(f.daemon.is_running());
    let log = f.daemon.log();
    assert!(
        !log.contains("panicked"),
        "a panic in the daemon's log:\n{log}"
    );
    assert_eq!(f.client.invoke("counter", "keep", "get", "{}").await?, 7);
    assert_eq!(read_back(&mut f.client, &mut f.apis.admin).await?, f.before);
    // ... in the store itself: after kill -9, only what was written counts.
    drop(f.app);
    f.daemon.kill9().await?;
    let mut daemon = Daemon::start(f.dir.path(), DAEMON_ARGS).await?;
    let _app = TestApp::attach(daemon.addr, vec![counter_type()]).await?;
    let mut client = daemon.client().await?;
    let mut admin = daemon.admin().await?;
    assert_eq!(read_back(&mut client, &mut admin).await?, f.before);
    assert_eq!(client.incr("counter", "keep", 1).await?, 8);
    assert!(daemon.is_running());
    eprintln!("bad-input matrix took {:?}", started.elapsed());
    Ok(())
}
