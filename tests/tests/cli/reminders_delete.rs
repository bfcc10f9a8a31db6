//! `troupe reminders delete`: a reminder by name, the alarm by flag or by
//! the name the list shows for it.

use serde_json::json;
use troupe_tests::{actor, pb};

use super::Fixture;

pub(crate) async fn reminders_delete(fx: &Fixture) -> anyhow::Result<()> {
    let mut client = fx.client.clone();
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "d1")),
            name: "ping".into(),
            due: "1h".into(),
            ..Default::default()
        })
        .await?;
    for _ in 0..2 {
        client
            .0
            .set_alarm(pb::SetAlarmRequest {
                actor: Some(actor("counter", "d1")),
                at: "2h".into(),
                ..Default::default()
            })
            .await?;
        let t = fx
            .run(&["reminders", "delete", "counter", "d1", "(alarm)"])
            .await?
            .ok()?;
        assert_eq!(t.out, "deleted the alarm of counter/d1\n");
    }
    let delete_ping = ["reminders", "delete", "counter", "d1", "ping"];
    let t = fx
        .run(&[&delete_ping[..], &["-o", "json"]].concat())
        .await?
        .ok()?;
    assert_eq!(
        t.json()?,
        json!({"type": "counter", "id": "d1", "name": "ping", "alarm": false, "deleted": true})
    );
    let listed = fx
        .run(&[
            "reminders",
            "list",
            "--type",
            "counter",
            "--id",
            "d1",
            "-o",
            "json",
        ])
        .await?
        .ok()?
        .json()?;
    assert_eq!(listed, json!([]), "nothing left to fire");

    // Gone already, or never there: exit 4, naming what the actor has.
    fx.run(&delete_ping).await?.exit(4)?.stderr_has(&[
        "counter/d1 has no reminder \"ping\"",
        "no reminders or alarm",
    ])?;
    fx.run(&["reminders", "delete", "counter", "c1", "nope"])
        .await?
        .exit(4)?
        .stderr_has(&[
            "counter/c1 has no reminder \"nope\"",
            "it has: (alarm), tick",
        ])?;
    fx.run(&["reminders", "delete", "counter", "d1", "--alarm"])
        .await?
        .exit(4)?
        .stderr_has(&["counter/d1 has no alarm"])?;
    fx.run(&["reminders", "delete", "counter", "d1"])
        .await?
        .exit(2)?
        .stderr_has(&["--alarm"])?;
    fx.run(&["reminders", "delete", "counter", "d1", "ping", "--alarm"])
        .await?
        .exit(2)?;
    Ok(())
}
