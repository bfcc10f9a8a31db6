//! The documented rule for a type registered by a second app
//! (docs/security.md, "Several apps, one type"): both host it. New
//! activations go to the apps in turn, and an actor live in one app stays
//! there: a second registration never takes over live actors or their state.

use troupe_tests::*;

fn turns_of(app: &TestApp, id: &str) -> usize {
    app.events()
        .turns_run
        .iter()
        .filter(|((ty, actor), _)| ty == "counter" && actor == id)
        .count()
}

#[tokio::test]
async fn a_second_app_shares_the_type_and_takes_over_no_live_actor() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let first = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    for _ in 0..5 {
        client.incr("counter", "live", 1).await?;
    }

    let second = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut count = 0;
    for _ in 0..20 {
        count = client.incr("counter", "live", 1).await?;
    }
    // The actor kept its app and its in-memory count.
    assert_eq!(count, 25);
    assert_eq!(
        turns_of(&second, "live"),
        0,
        "the second app took the actor"
    );
    assert_eq!(turns_of(&first, "live"), 25);

    // New actors go to both apps.
    for i in 0..10 {
        client.incr("counter", &format!("new-{i}"), 1).await?;
    }
    let on_second = (0..10)
        .filter(|i| turns_of(&second, &format!("new-{i}")) > 0)
        .count();
    assert!(
        (1..10).contains(&on_second),
        "new activations did not alternate: {on_second} of 10 on the second app"
    );

    // Both registrations show.
    let status = daemon.status().await?;
    let counter = status
        .types
        .iter()
        .find(|t| t.name == "counter")
        .ok_or_else(|| anyhow::anyhow!("counter missing from status"))?;
    assert_eq!(counter.apps.len(), 2, "{counter:?}");
    Ok(())
}
