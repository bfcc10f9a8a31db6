//! The Prometheus endpoint (`--metrics-listen`): real calls move the
//! counters, histograms and gauges by exactly what they did.

use std::net::SocketAddr;

use anyhow::Context;
use troupe_tests::scrape::{http_get, metrics_addr, scrape, Scrape};
use troupe_tests::{
    actor, daemon_with_app, expect_code, json_payload, pb, poll_until, within, Daemon, RawApp, WAIT,
};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn counter_type() -> Vec<pb::ActorTypeSpec> {
    vec![pb::ActorTypeSpec {
        name: "counter".into(),
        ..Default::default()
    }]
}

fn endpoint(daemon: &Daemon) -> anyhow::Result<SocketAddr> {
    metrics_addr(&daemon.log()).with_context(|| {
        format!(
            "the daemon logged no \"metrics listening\" address:\n{}",
            daemon.log()
        )
    })
}

/// A daemon with metrics, and a raw app hosting type `slow` with
/// `max_mailbox` (0: the daemon's default) whose turns the test answers.
async fn slow_type(
    max_mailbox: u32,
) -> anyhow::Result<(tempfile::TempDir, Daemon, SocketAddr, RawApp)> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--metrics-listen", "127.0.0.1:0"]).await?;
    let addr = endpoint(&daemon)?;
    let (app, _) = RawApp::register(
        daemon.addr,
        vec![pb::ActorTypeSpec {
            name: "slow".into(),
            max_mailbox,
            ..Default::default()
        }],
    )
    .await?;
    Ok((dir, daemon, addr, app))
}

/// `after - before` for one series.
fn delta(before: &Scrape, after: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    after.sum(name, labels) - before.sum(name, labels)
}

#[tokio::test]
async fn the_endpoint_serves_openmetrics_on_its_own_port_and_404_elsewhere() -> anyhow::Result<()> {
    let (_dir, daemon, _app, _client) =
        daemon_with_app(&["--metrics-listen", "127.0.0.1:0"], counter_type()).await?;
    let addr = endpoint(&daemon)?;
    assert_ne!(addr, daemon.addr, "metrics have a port of their own");
    assert!(addr.ip().is_loopback());

    let first = scrape(addr).await?;
    assert_eq!(first.content_type, OPENMETRICS);
    assert!(first.text.ends_with("# EOF\n"), "{}", first.text);
    assert_eq!(
        first.sum(
            "troupe_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0,
        "{}",
        first.text
    );
    // A registered type shows up before its first call.
    assert!(
        first.text.contains("actor_type=\"counter\""),
        "{}",
        first.text
    );
    // The process's own figures, under the names process collectors use;
    // one `# EOF`, at the end.
    for family in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
        "process_open_fds",
        "process_threads",
    ] {
        assert!(first.sum(family, &[]) > 0.0, "no {family}:\n{}", first.text);
    }
    assert_eq!(first.text.matches("# EOF").count(), 1, "{}", first.text);

    let other = http_get(addr, "/").await?;
    assert_eq!(other.status, 404);
    let other = http_get(addr, "/metrics/extra").await?;
    assert_eq!(other.status, 404);
    Ok(())
}

#[tokio::test]
async fn without_the_flag_there_is_no_endpoint() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    assert_eq!(metrics_addr(&daemon.log()), None);
    Ok(())
}

/// Calls that succeed, one that raises in the actor, and one for an unknown
/// type: each lands in its own `result`, turns in the histogram, the two
/// actors in the activation counter and the active gauge.
#[tokio::test]
async fn calls_turns_and_activations_are_counted_exactly() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(
        &["--metrics-listen", "127.0.0.1:0", "--host-wait", "200ms"],
        counter_type(),
    )
    .await?;
    let addr = endpoint(&daemon)?;
    let before = scrape(addr).await?;

    for _ in 0..3 {
        client.invoke_raw("counter", "c1", "incr", "{}").await?;
    }
    client.invoke_raw("counter", "c2", "incr", "{}").await?;
    expect_code(
        client.invoke_raw("counter", "c1", "fail", "{}").await,
        tonic::Code::Unknown,
    )?;
    expect_code(
        client.invoke_raw("nosuch", "x", "incr", "{}").await,
        tonic::Code::NotFound,
    )?;

    let after = scrape(addr).await?;
    let call = |result: &str| {
        delta(
            &before,
            &after,
            "troupe_calls_total",
            &[
                ("actor_type", "counter"),
                ("kind", "call"),
                ("result", result),
            ],
        )
    };
    assert_eq!(call("ok"), 4.0, "{}", after.text);
    assert_eq!(call("actor_error"), 1.0, "{}", after.text);
    // The failures alerts take a rate() of are there at 0 before the first:
    // a counter born at 1 would hide the first burst from rate().
    for result in ["resource_exhausted", "unavailable", "deadline_exceeded"] {
        let labels = [
            ("actor_type", "counter"),
            ("kind", "call"),
            ("result", result),
        ];
        assert_eq!(
            (after.count("troupe_calls_total", &labels), call(result)),
            (1, 0.0),
            "{result}: {}",
            after.text
        );
    }
    // So are the turns stopped for their caller leaving.
    let cancelled = [("actor_type", "counter")];
    assert_eq!(
        (
            after.count("troupe_turns_cancelled_total", &cancelled),
            after.sum("troupe_turns_cancelled_total", &cancelled)
        ),
        (1, 0.0),
        "{}",
        after.text
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "troupe_calls_total",
            &[("result", "not_found")]
        ),
        1.0,
        "{}",
        after.text
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "troupe_turn_duration_seconds_count",
            &[("actor_type", "counter"), ("kind", "call")],
        ),
        5.0,
        "every turn is timed, the failed one too: {}",
        after.text
    );
    assert!(
        delta(
            &before,
            &after,
            "troupe_turn_duration_seconds_sum",
            &[("actor_type", "counter"), ("kind", "call")],
        ) > 0.0
    );
    assert_eq!(
        delta(
            &before,
            &after,
            "troupe_activations_total",
            &[("actor_type", "counter")]
        ),
        2.0,
        "{}",
        after.text
    );
    assert_eq!(
        after.sum("troupe_actors_active", &[("actor_type", "counter")]),
        2.0,
        "{}",
        after.text
    );
    assert_eq!(after.sum("troupe_pending_calls", &[]), 0.0);
    Ok(())
}

/// A write marks the actor dirty; the flush that stores it shows in the
/// batch histograms and clears the gauge. An admin deactivation is counted
/// with its reason and leaves the active gauge.
#[tokio::test]
async fn flushes_and_deactivations_are_counted() -> anyhow::Result<()> {
    // A flush interval past the test: only the deactivation flushes.
    let (_dir, daemon, _app, mut client) = daemon_with_app(
        &["--metrics-listen", "127.0.0.1:0", "--flush-interval", "1h"],
        counter_type(),
    )
    .await?;
    let addr = endpoint(&daemon)?;
    client.invoke_raw("counter", "w", "incr", "{}").await?;
    let before = scrape(addr).await?;
    assert_eq!(
        before.sum("troupe_dirty_actors", &[]),
        1.0,
        "{}",
        before.text
    );
    assert!(
        before.sum("troupe_dirty_bytes", &[]) > 0.0,
        "{}",
        before.text
    );

    let mut admin = daemon.admin().await?;
    let reply = admin
        .deactivate_actor(pb::DeactivateActorRequest {
            actor: Some(actor("counter", "w")),
        })
        .await?
        .into_inner();
    assert!(reply.deactivated);

    let after = scrape(addr).await?;
    assert_eq!(after.sum("troupe_dirty_actors", &[]), 0.0, "{}", after.text);
    assert_eq!(
        delta(&before, &after, "troupe_flush_batch_keys_count", &[]),
        1.0,
        "{}",
        after.text
    );
    assert_eq!(
        delta(&before, &after, "troupe_flush_batch_keys_sum", &[]),
        1.0,
        "one key, \"count\": {}",
        after.text
    );
    assert_eq!(
        delta(&before, &after, "troupe_flush_duration_seconds_count", &[]),
        1.0,
        "{}",
        after.text
    );
    assert_eq!(after.sum("troupe_flush_failures_total", &[]), 0.0);
    assert_eq!(
        delta(
            &before,
            &after,
            "troupe_deactivations_total",
            &[("actor_type", "counter"), ("reason", "admin")],
        ),
        1.0,
        "{}",
        after.text
    );
    assert_eq!(
        after.sum("troupe_actors_active", &[("actor_type", "counter")]),
        0.0,
        "{}",
        after.text
    );
    Ok(())
}

/// Calls queued behind a running turn show as mailbox depth and pending
/// calls; the one that finds the mailbox full is counted as
/// resource_exhausted.
#[tokio::test]
async fn a_full_mailbox_shows_in_the_gauges_and_the_refusal_is_counted() -> anyhow::Result<()> {
    let (_dir, daemon, addr, mut app) = slow_type(1).await?;
    let client = daemon.client().await?;
    let before = scrape(addr).await?;

    let call = |n: u32| {
        let mut client = client.clone();
        tokio::spawn(async move { client.invoke_raw("slow", "s", "work", n.to_string()).await })
    };
    // The first call's turn is held by the app; the second waits behind it.
    let first = call(1);
    let turn = app.next_turn().await?;
    let second = call(2);
    let queued = poll_until(WAIT, "the second call to be queued", || async {
        let s = scrape(addr).await?;
        Ok((s.sum("troupe_mailbox_depth", &[("actor_type", "slow")]) == 1.0).then_some(s))
    })
    .await?;
    assert_eq!(
        queued.sum("troupe_pending_calls", &[]),
        2.0,
        "{}",
        queued.text
    );
    assert_eq!(
        queued.sum("troupe_actors_active", &[("actor_type", "slow")]),
        1.0
    );

    let mut third = client.clone();
    expect_code(
        third.invoke_raw("slow", "s", "work", "3").await,
        tonic::Code::ResourceExhausted,
    )?;

    app.reply(turn.call_id, "1")?;
    let turn = app.next_turn().await?;
    app.reply(turn.call_id, "2")?;
    within(WAIT, "the first call", first)
        .await??
        .map_err(anyhow::Error::new)?;
    within(WAIT, "the second call", second)
        .await??
        .map_err(anyhow::Error::new)?;

    let after = scrape(addr).await?;
    let calls = |result: &str| {
        delta(
            &before,
            &after,
            "troupe_calls_total",
            &[("actor_type", "slow"), ("kind", "call"), ("result", result)],
        )
    };
    assert_eq!(calls("ok"), 2.0, "{}", after.text);
    assert_eq!(calls("resource_exhausted"), 1.0, "{}", after.text);
    assert_eq!(
        after.sum("troupe_mailbox_depth", &[("actor_type", "slow")]),
        0.0
    );
    assert_eq!(after.sum("troupe_pending_calls", &[]), 0.0);
    Ok(())
}

/// A reminder firing is counted by kind once its turn succeeded.
#[tokio::test]
async fn reminder_firings_are_counted() -> anyhow::Result<()> {
    let (_dir, daemon, app, mut client) =
        daemon_with_app(&["--metrics-listen", "127.0.0.1:0"], counter_type()).await?;
    let addr = endpoint(&daemon)?;
    let before = scrape(addr).await?;
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "r")),
            // The counter app answers a turn named "get" (the reminder's name).
            name: "get".into(),
            payload: Some(json_payload("{}")),
            ..Default::default()
        })
        .await?;
    app.wait_for("the reminder's turn", WAIT, |e| e.turns >= 1)
        .await?;
    let reminders = [("actor_type", "counter"), ("kind", "reminder")];
    // One scrape is not a snapshot: the turn histogram is written out before
    // the firings, so a scrape can see the firing and not yet its turn.
    let after = poll_until(WAIT, "the firing and its turn to be counted", || async {
        let s = scrape(addr).await?;
        let fired = s.sum("troupe_reminders_fired_total", &reminders);
        let turns = s.sum("troupe_turn_duration_seconds_count", &reminders);
        Ok((fired >= 1.0 && turns >= 1.0).then_some(s))
    })
    .await?;
    for name in [
        "troupe_reminders_fired_total",
        "troupe_turn_duration_seconds_count",
    ] {
        assert_eq!(
            delta(&before, &after, name, &reminders),
            1.0,
            "{name}: {}",
            after.text
        );
    }
    Ok(())
}

/// A delayed tell's firing counts as kind `tell`, apart from reminders,
/// with how late it was stored in the actor's inbox.
#[tokio::test]
async fn delayed_tells_are_counted_apart_from_reminders() -> anyhow::Result<()> {
    const HOUR_MS: u64 = 3_600_000;
    let args = ["--metrics-listen", "127.0.0.1:0", "--test-clock"];
    let (_dir, daemon, app, mut client) = daemon_with_app(&args, counter_type()).await?;
    let addr = endpoint(&daemon)?;
    let before = scrape(addr).await?;
    client
        .0
        .tell(pb::TellRequest {
            actor: Some(actor("counter", "t")),
            method: "get".into(),
            payload: Some(json_payload("{}")),
            delay_ms: HOUR_MS,
            ..Default::default()
        })
        .await?;
    // Returns once the tell came due and its turn ran.
    daemon.advance_clock_ms(2 * HOUR_MS).await?;
    app.wait_for("the tell's turn", WAIT, |e| e.turns >= 1)
        .await?;
    let tells = [("actor_type", "counter"), ("kind", "tell")];
    let after = poll_until(WAIT, "the firing to be counted", || async {
        let s = scrape(addr).await?;
        Ok((s.sum("troupe_reminders_fired_total", &tells) >= 1.0).then_some(s))
    })
    .await?;
    let changed = |name: &str, labels: &[(&str, &str)]| delta(&before, &after, name, labels);
    assert_eq!(
        changed("troupe_reminders_fired_total", &tells),
        1.0,
        "{}",
        after.text
    );
    assert_eq!(
        changed("troupe_reminder_lateness_seconds_count", &tells),
        1.0,
        "{}",
        after.text
    );
    let reminders = [("actor_type", "counter"), ("kind", "reminder")];
    assert_eq!(
        changed("troupe_reminders_fired_total", &reminders),
        0.0,
        "{}",
        after.text
    );
    Ok(())
}

/// A timer's turn shows how late it started, as kind `timer`, and counts
/// no firing of its own (its turn is a call of kind `timer`).
#[tokio::test]
async fn timer_turns_show_how_late_they_started() -> anyhow::Result<()> {
    const HOUR_MS: u64 = 3_600_000;
    let args = ["--metrics-listen", "127.0.0.1:0", "--test-clock"];
    let (_dir, daemon, app, mut client) = daemon_with_app(&args, counter_type()).await?;
    let addr = endpoint(&daemon)?;
    // Timers live in an activation.
    client.invoke_raw("counter", "t", "get", "{}").await?;
    let before = scrape(addr).await?;
    client
        .0
        .set_timer(pb::SetTimerRequest {
            actor: Some(actor("counter", "t")),
            name: "get".into(),
            due: "1h".into(),
            payload: Some(json_payload("{}")),
            ..Default::default()
        })
        .await?;
    let turns = app.events().turns;
    // Returns once the timer's turn ran.
    daemon.advance_clock_ms(HOUR_MS).await?;
    app.wait_for("the timer's turn", WAIT, |e| e.turns > turns)
        .await?;
    let timers = [("actor_type", "counter"), ("kind", "timer")];
    let after = poll_until(WAIT, "the timer's lateness", || async {
        let s = scrape(addr).await?;
        let late = s.sum("troupe_reminder_lateness_seconds_count", &timers);
        Ok((late >= 1.0).then_some(s))
    })
    .await?;
    let changed = |name: &str| delta(&before, &after, name, &timers);
    assert_eq!(
        changed("troupe_reminder_lateness_seconds_count"),
        1.0,
        "{}",
        after.text
    );
    assert_eq!(
        after.count("troupe_reminders_fired_total", &timers),
        0,
        "{}",
        after.text
    );
    Ok(())
}

/// A reminder that comes due while its actor is busy starts late, and the
/// lateness histogram says by how much: the operator's measure of
/// "reminders on time".
#[tokio::test]
async fn a_reminder_held_behind_a_busy_actor_shows_how_late_it_started() -> anyhow::Result<()> {
    /// How long the actor stays busy after the firing queued behind it.
    const BUSY: std::time::Duration = std::time::Duration::from_millis(300);
    let (_dir, daemon, addr, mut app) = slow_type(0).await?;
    let mut client = daemon.client().await?;
    let before = scrape(addr).await?;

    // A call whose turn the app holds keeps the actor busy.
    let held = {
        let mut client = client.clone();
        tokio::spawn(async move { client.invoke_raw("slow", "s", "work", "1").await })
    };
    let turn = app.next_turn().await?;
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("slow", "s")),
            name: "tick".into(),
            due: "50ms".into(),
            ..Default::default()
        })
        .await?;
    poll_until(WAIT, "the firing to queue behind the held turn", || async {
        let s = scrape(addr).await?;
        Ok((s.sum("troupe_mailbox_depth", &[("actor_type", "slow")]) == 1.0).then_some(()))
    })
    .await?;
    // Not a wait for anything: the busy turn runs on past the due time.
    tokio::time::sleep(BUSY).await;
    app.reply(turn.call_id, "1")?;
    within(WAIT, "the held call", held)
        .await??
        .map_err(anyhow::Error::new)?;
    let firing = app.next_turn().await?;
    assert_eq!(firing.name, "tick");
    app.reply(firing.call_id, "null")?;

    let labels = [("actor_type", "slow"), ("kind", "reminder")];
    let after = poll_until(WAIT, "the firing to be counted", || async {
        let s = scrape(addr).await?;
        Ok((s.sum("troupe_reminders_fired_total", &labels) >= 1.0).then_some(s))
    })
    .await?;
    let late = |name: &str, extra: &[(&str, &str)]| {
        let labels: Vec<(&str, &str)> = labels.iter().chain(extra).copied().collect();
        delta(&before, &after, name, &labels)
    };
    assert_eq!(
        late("troupe_reminder_lateness_seconds_count", &[]),
        1.0,
        "{}",
        after.text
    );
    assert!(
        late("troupe_reminder_lateness_seconds_sum", &[]) >= BUSY.as_secs_f64(),
        "{}",
        after.text
    );
    assert_eq!(
        late("troupe_reminder_lateness_seconds_bucket", &[("le", "0.25")]),
        0.0,
        "started at least {BUSY:?} late: {}",
        after.text
    );
    Ok(())
}
