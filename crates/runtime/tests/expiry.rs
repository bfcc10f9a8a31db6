//! State keys that expire, on the test clock: a key set with a ttl reads as
//! absent from its time on (in turns, which are told, and in state reads),
//! a change keeps its expiry and a zero ttl ends it, an idle actor's
//! expired keys leave the store when its `$expire` reminder fires, and an
//! activation never hands the app a key that expired while it was away.

mod common;

use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, Runtime, StateChange, TurnOutcome, TypeSpec,
    EXPIRES_KEY, EXPIRE_NAME,
};
use troupe_storage::{MemoryReminders, MemoryStore, ReminderStore, StateStore};

const HOUR: Duration = Duration::from_secs(3_600);
const MINUTE: Duration = Duration::from_secs(60);

/// What "session"'s methods do: `login` sets `token` for an hour and
/// `name` for good; `refresh` changes `token` without a ttl; `persist`
/// ends `token`'s expiry; `set_own_times` writes the daemon's key; `short`
/// asks for half a second; every turn answers the keys it was told expired
/// and whether its state holds `token`.
fn session_turn(req: troupe_runtime::TurnRequest) -> TurnOutcome {
    let changes = match &*req.name {
        "login" => vec![
            StateChange::set_expiring("token", "\"t1\"", HOUR),
            StateChange::set("name", "\"ada\""),
        ],
        "refresh" => vec![StateChange::set("token", "\"t2\"")],
        "persist" => vec![StateChange {
            ttl_ms: Some(0),
            ..StateChange::set("token", "\"t3\"")
        }],
        "set_own_times" => vec![StateChange::set(EXPIRES_KEY, "{}")],
        "short" => vec![StateChange::set_expiring(
            "token",
            "\"t4\"",
            Duration::from_millis(500),
        )],
        _ => Vec::new(),
    };
    let answer = format!(
        "{{\"told\":{:?},\"has_token\":{}}}",
        req.expired_keys,
        req.state.get("token").is_some()
    );
    TurnOutcome {
        result: Ok(Payload::json(answer)),
        changes,
    }
}

fn runtime(
    store: Arc<dyn StateStore>,
    reminders: Arc<dyn ReminderStore>,
) -> Result<Runtime, CallError> {
    let rt = common::on_test_clock_over(store, reminders)?;
    let host = FnHost::new("session-app", |_actor: &ActorId, req| session_turn(req));
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "session".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

fn session() -> ActorId {
    ActorId::new("session", "s1")
}

async fn call(rt: &Runtime, method: &str) -> Result<String, CallError> {
    let answer = rt
        .invoke(Call::new(session(), method, Payload::json("null")))
        .await?;
    Ok(String::from_utf8_lossy(&answer.data).into_owned())
}

async fn keys(rt: &Runtime) -> Result<Vec<String>, CallError> {
    let (entries, _) = rt.get_state(&session(), &[]).await?;
    Ok(entries.into_iter().map(|(k, _)| k).collect())
}

/// The keys the store holds for the session, the daemon's included.
async fn stored_keys(store: &MemoryStore) -> Result<Vec<String>, CallError> {
    let stored = store
        .load("session", "s1")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    Ok(stored.into_iter().map(|(k, _)| k).collect())
}

/// The keys `troupe actors get` shows.
async fn described_keys(rt: &Runtime) -> Result<Vec<String>, CallError> {
    let details = rt.describe_actor(&session()).await?;
    Ok(details
        .map(|d| d.state_entries.into_iter().map(|(k, _, _)| k).collect())
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reads_as_absent_from_its_time_and_the_next_turn_is_told() -> Result<(), CallError> {
    let rt = runtime(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
    )?;
    call(&rt, "login").await?;
    assert_eq!(
        keys(&rt).await?,
        ["name", "token"],
        "the daemon's times key is hidden"
    );

    rt.advance_clock(HOUR - MINUTE).await?;
    assert_eq!(call(&rt, "look").await?, r#"{"told":[],"has_token":true}"#);

    assert_eq!(described_keys(&rt).await?, ["name", "token"]);

    rt.advance_clock(2 * MINUTE).await?;
    // Read before any turn forgot it.
    assert_eq!(keys(&rt).await?, ["name"]);
    assert_eq!(described_keys(&rt).await?, ["name"]);
    assert_eq!(
        call(&rt, "look").await?,
        r#"{"told":["token"],"has_token":false}"#
    );
    // Told once.
    assert_eq!(call(&rt, "look").await?, r#"{"told":[],"has_token":false}"#);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_keeps_the_expiry_and_a_zero_ttl_ends_it() -> Result<(), CallError> {
    let rt = runtime(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
    )?;
    call(&rt, "login").await?;
    call(&rt, "refresh").await?;
    rt.advance_clock(HOUR + MINUTE).await?;
    assert_eq!(keys(&rt).await?, ["name"], "a change ended the expiry");

    call(&rt, "login").await?;
    call(&rt, "persist").await?;
    rt.advance_clock(2 * HOUR).await?;
    assert_eq!(keys(&rt).await?, ["name", "token"], "a zero ttl kept it");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_actor_s_expired_keys_leave_the_store() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), Arc::new(MemoryReminders::new()))?;
    let logged_in = rt.schedule_now_ms();
    call(&rt, "login").await?;
    assert!(rt.deactivate_actor(&session()).await?);
    let Some(reminder) = rt.get_reminder(&session(), EXPIRE_NAME).await? else {
        return Err(CallError::Internal(format!("no {EXPIRE_NAME} reminder")));
    };
    let due = reminder.next_due_unix_ms;
    assert!(
        (logged_in + 3_600_000..logged_in + 3_660_000).contains(&due),
        "due {due}, set at {logged_in}"
    );

    rt.advance_clock(HOUR + MINUTE).await?;
    let stored = stored_keys(&store).await?;
    assert_eq!(stored, ["name"], "the token and the times stayed stored");
    let left = rt
        .list_reminders(Some("session"), Some("s1"), None, 10)
        .await?;
    assert!(left.is_empty(), "{left:?}");
    assert!(!rt.deactivate_actor(&session()).await?, "it was activated");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_never_hands_over_a_key_that_expired_while_away() -> Result<(), CallError> {
    let rt = runtime(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
    )?;
    call(&rt, "login").await?;
    assert!(rt.deactivate_actor(&session()).await?);
    // Held stored: its erasure is paused.
    let paused = rt.pause_reminder(&session(), EXPIRE_NAME).await?;
    assert!(paused.is_some_and(|p| p.paused));
    rt.advance_clock(HOUR + MINUTE).await?;
    assert_eq!(keys(&rt).await?, ["name"]);
    // Not told: this activation's app never had it.
    assert_eq!(call(&rt, "look").await?, r#"{"told":[],"has_token":false}"#);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_times_key_and_a_sub_second_ttl_are_refused() -> Result<(), CallError> {
    let rt = runtime(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
    )?;
    for method in ["set_own_times", "short"] {
        match call(&rt, method).await {
            Err(CallError::InvalidArgument(_)) => {}
            other => {
                return Err(CallError::Internal(format!(
                    "{method}: expected INVALID_ARGUMENT, got {other:?}"
                )))
            }
        }
    }
    assert!(keys(&rt).await?.is_empty());
    Ok(())
}

/// The reminder follows the keys while the actor is active, so the store
/// forgets them whichever daemon holds the actor when it goes idle; one
/// that fires while the actor is active comes back later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_actor_s_reminder_waits_until_it_goes_idle() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(store.clone(), Arc::new(MemoryReminders::new()))?;
    call(&rt, "login").await?;
    rt.advance_clock(Duration::ZERO).await?;
    let Some(set) = rt.get_reminder(&session(), EXPIRE_NAME).await? else {
        return Err(CallError::Internal(format!(
            "no {EXPIRE_NAME} while active"
        )));
    };
    // Active through its time, no turn forgets the key.
    rt.advance_clock(HOUR + MINUTE).await?;
    let Some(again) = rt.get_reminder(&session(), EXPIRE_NAME).await? else {
        return Err(CallError::Internal(format!(
            "{EXPIRE_NAME} went while active"
        )));
    };
    assert!(
        again.next_due_unix_ms > set.next_due_unix_ms,
        "{again:?}, first {set:?}"
    );
    assert!(rt.deactivate_actor(&session()).await?);
    rt.advance_clock(MINUTE).await?;
    let stored = stored_keys(&store).await?;
    assert_eq!(stored, ["name"]);
    Ok(())
}
