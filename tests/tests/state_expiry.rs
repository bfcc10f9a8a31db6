//! State keys that expire, with the real daemon and app on the test clock:
//! `troupe state get` shows when a key expires, the key reads as absent
//! from then on, the app is told at its next turn (its count starts over),
//! and an idle actor's `$expire` reminder erases the key from the store.

use troupe_tests::{cli_against, daemon_with_app, type_spec};

const FOR_AN_HOUR: &str = r#"{"kwargs": {"by": 5, "ttl_ms": 3600000}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_for_an_hour_is_shown_then_gone() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    assert_eq!(
        client
            .invoke("counter", "c1", "incr_for", FOR_AN_HOUR)
            .await?,
        5
    );

    let (json, _) =
        cli_against(&daemon, &["state", "get", "counter", "c1", "-o", "json"], 0).await?;
    let json: serde_json::Value = serde_json::from_str(&json)?;
    assert!(
        json["expires_unix_ms"]["count"].as_u64().is_some(),
        "{json}"
    );
    assert!(
        json["expires"]["count"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{json}"
    );
    assert!(json["state"].get("$expires").is_none(), "{json}");
    let (table, _) = cli_against(&daemon, &["state", "get", "counter", "c1"], 0).await?;
    assert!(table.contains("EXPIRES"), "{table}");

    daemon.advance_clock("59m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, Some(5));
    daemon.advance_clock("2m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, None);
    let (gone, _) = cli_against(&daemon, &["state", "get", "counter", "c1"], 0).await?;
    assert!(gone.contains("has no state"), "{gone}");
    // Told as the turn starts, the app counts from nothing again.
    assert_eq!(client.incr("counter", "c1", 1).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_actor_s_expired_key_leaves_the_store() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    assert_eq!(
        client
            .invoke("counter", "c1", "incr_for", FOR_AN_HOUR)
            .await?,
        5
    );
    cli_against(&daemon, &["actors", "deactivate", "counter", "c1"], 0).await?;
    let listed = ["reminders", "list", "--type", "counter", "--id", "c1"];
    let (before, _) = cli_against(&daemon, &listed, 0).await?;
    assert!(before.contains("$expire"), "{before}");

    daemon.advance_clock("61m").await?;
    let (after, _) = cli_against(&daemon, &listed, 0).await?;
    assert!(!after.contains("$expire"), "{after}");
    // Erased without activating it: nothing of it is left, stored or live
    // (`actors get` exits 4 for an actor it knows nothing of).
    let (_, unknown) = cli_against(&daemon, &["actors", "get", "counter", "c1"], 4).await?;
    assert!(unknown.contains("no stored state"), "{unknown}");
    assert_eq!(client.stored_count("counter", "c1").await?, None);
    Ok(())
}

/// An operator gives a key an expiry, or ends one, with `troupe state set
/// --ttl`: the actor held unloaded, its `$expire` reminder erases the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sets_and_ends_an_expiry() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let set = |id: &'static str, ttl: &'static str| {
        [
            "state", "set", "counter", id, "count", "--data", "9", "--ttl", ttl,
        ]
    };
    cli_against(&daemon, &set("c1", "1h"), 0).await?;
    assert_eq!(
        client
            .invoke("counter", "c2", "incr_for", FOR_AN_HOUR)
            .await?,
        5
    );
    cli_against(&daemon, &set("c2", "0"), 0).await?;
    let (json, _) =
        cli_against(&daemon, &["state", "get", "counter", "c1", "-o", "json"], 0).await?;
    let json: serde_json::Value = serde_json::from_str(&json)?;
    assert!(
        json["expires_unix_ms"]["count"].as_u64().is_some(),
        "{json}"
    );

    daemon.advance_clock("61m").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, None);
    let listed = ["reminders", "list", "--type", "counter", "--id", "c1"];
    let (left, _) = cli_against(&daemon, &listed, 0).await?;
    assert!(!left.contains("$expire"), "{left}");
    assert_eq!(client.stored_count("counter", "c2").await?, Some(9));
    cli_against(
        &daemon,
        &[
            "state", "set", "counter", "c1", "count", "--data", "1", "--ttl", "10ms",
        ],
        2,
    )
    .await?;
    Ok(())
}
