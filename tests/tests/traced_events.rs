//! A watched event carries the trace context of the turn that published it
//! (`ActorEvent.traceparent`): with trace export on, the daemon's
//! `troupe.turn` span (the one `Turn.traceparent` named); off, the caller's
//! headers as they came; nothing from an untraced turn. In the actor's
//! stream and its type's, and in the CLI's JSON.

use tokio::task::JoinHandle;
use troupe_tests::otlp::{
    invoke_traced, parse_traceparent, traceparent, Collector, CLIENT_SPAN, CLIENT_TRACE,
};
use troupe_tests::{actor, next_event, pb, within, Client, Daemon, Events, RawApp, WAIT};

fn svc() -> Vec<pb::ActorTypeSpec> {
    vec![pb::ActorTypeSpec {
        name: "svc".into(),
        ..Default::default()
    }]
}

/// Watches `svc/id` alone and the type `svc`.
async fn watch_both(client: &mut Client, id: &str) -> anyhow::Result<[Events; 2]> {
    let one = client
        .0
        .watch(pb::WatchRequest {
            actor: Some(actor("svc", id)),
            after: String::new(),
        })
        .await?
        .into_inner();
    let all = client.watch_type("svc", "").await?;
    Ok([one, all])
}

/// Plays the turn the call in `call` started: it publishes `event`.
async fn publish_from(
    app: &mut RawApp,
    call: JoinHandle<Result<pb::InvokeResponse, tonic::Status>>,
    event: &str,
) -> anyhow::Result<pb::Turn> {
    let turn = app.next_turn().await?;
    app.reply_publishing(turn.call_id, "null", &[event])?;
    within(WAIT, "the call", call).await???;
    Ok(turn)
}

#[tokio::test]
async fn with_export_an_event_carries_the_span_of_the_turn_that_published_it() -> anyhow::Result<()>
{
    let collector = Collector::start().await?;
    let dir = tempfile::tempdir()?;
    let endpoint = collector.endpoint();
    let daemon = Daemon::start(dir.path(), &["--otlp-endpoint", &endpoint]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let mut client = daemon.client().await?;
    let streams = watch_both(&mut client, "e").await?;

    let sent = traceparent(CLIENT_TRACE, CLIENT_SPAN);
    let call = invoke_traced(&client, "svc", "e", &sent, "vendor=opaque")?;
    let turn = publish_from(&mut app, call, "1").await?;
    let (trace, turn_span) = parse_traceparent(&turn.traceparent)?;
    assert_eq!(trace, CLIENT_TRACE);
    assert_ne!(
        turn_span, CLIENT_SPAN,
        "the turn runs under the daemon's span"
    );
    for mut events in streams {
        let event = next_event(&mut events, WAIT).await?;
        assert_eq!(event.traceparent, turn.traceparent, "{event:?}");
        assert_eq!(event.tracestate, "vendor=opaque");
    }
    Ok(())
}

#[tokio::test]
async fn without_export_an_event_carries_the_callers_context_and_an_untraced_one_none(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let mut client = daemon.client().await?;
    let mut streams = watch_both(&mut client, "p").await?;

    let sent = traceparent(CLIENT_TRACE, CLIENT_SPAN);
    for (event, (traceparent, tracestate)) in [
        ("1", ("", "")),
        ("2", (sent.as_str(), "a=1,b=2")),
        ("3", ("", "")),
    ] {
        let call = invoke_traced(&client, "svc", "p", traceparent, tracestate)?;
        publish_from(&mut app, call, event).await?;
    }
    let mut first_cursor = String::new();
    for events in &mut streams {
        let seen = [
            next_event(events, WAIT).await?,
            next_event(events, WAIT).await?,
            next_event(events, WAIT).await?,
        ];
        let contexts: Vec<(&str, &str)> = seen
            .iter()
            .map(|e| (e.traceparent.as_str(), e.tracestate.as_str()))
            .collect();
        assert_eq!(contexts, [("", ""), (sent.as_str(), "a=1,b=2"), ("", "")]);
        if first_cursor.is_empty() {
            first_cursor.clone_from(&seen[0].cursor);
        }
    }

    // A script reads the context from the CLI's JSON; an untraced event
    // has no such key.
    let args = [
        "actors",
        "watch",
        "svc",
        "p",
        "--after",
        &first_cursor,
        "--count",
        "2",
        "-o",
        "json",
    ];
    let (json, _) = troupe_tests::cli_against(&daemon, &args, 0).await?;
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 2, "{json}");
    assert_eq!(lines[0]["traceparent"], serde_json::json!(sent), "{json}");
    assert_eq!(lines[0]["tracestate"], serde_json::json!("a=1,b=2"));
    assert!(lines[1].get("traceparent").is_none(), "{json}");
    Ok(())
}
