//! The fixture every run starts from: a daemon with the counter app
//! attached, and the state the matrix must leave alone, written and read
//! back.

use std::collections::HashMap;

use bytes::Bytes;
use troupe_tests::*;

use crate::requests::{keep, reminder_ref, set_alarm, set_reminder, AdminStub, Apis};
use crate::{DAEMON_ARGS, LIMIT};

#[derive(Debug, PartialEq)]
pub struct Stored {
    keep: HashMap<String, Bytes>,
    blob: HashMap<String, Bytes>,
    reminders: Vec<pb::Reminder>,
    alarm: pb::Reminder,
    ids: Vec<String>,
}

pub async fn read_back(client: &mut Client, admin: &mut AdminStub) -> anyhow::Result<Stored> {
    within(WAIT, "reading the stored state back", async {
        let (kept, _) = client.state("counter", "keep").await?;
        let (blob, _) = client.state("counter", "blob").await?;
        let mut reminders = Vec::new();
        for name in ["keep", "other"] {
            reminders.push(
                client
                    .0
                    .get_reminder(reminder_ref(name))
                    .await?
                    .into_inner(),
            );
        }
        let alarm = client
            .0
            .get_alarm(pb::AlarmRef { actor: keep() })
            .await?
            .into_inner();
        let ids = admin
            .list_stored_actors(pb::ListStoredActorsRequest {
                r#type: "counter".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .ids;
        Ok(Stored {
            keep: kept,
            blob,
            reminders,
            alarm,
            ids,
        })
    })
    .await?
}

/// The counter app's type: durable, so a reply means the state is stored.
pub fn counter_type() -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        state_mode: pb::StateMode::Durable as i32,
        ..type_spec("counter")
    }
}

/// Writes what the matrix must leave alone: a count of 7, a value of
/// exactly --max-payload-bytes, two reminders and an alarm.
async fn write_state(client: &mut Client) -> anyhow::Result<()> {
    within(WAIT, "writing the state", async {
        assert_eq!(client.incr("counter", "keep", 7).await?, 7);
        let blob = client
            .invoke_raw("counter", "blob", "put_raw", vec![b'b'; LIMIT])
            .await?;
        assert_eq!(blob.len(), LIMIT, "a state value at the limit");
        // Active, for the timer cases that must pass.
        client.invoke("counter", "scratch", "get", "{}").await?;
        client.0.set_reminder(set_reminder()).await?;
        client
            .0
            .set_reminder(pb::SetReminderRequest {
                name: "other".into(),
                due: "2000h".into(),
                period: String::new(),
                ..set_reminder()
            })
            .await?;
        client
            .0
            .set_alarm(pb::SetAlarmRequest {
                at: "3000h".into(),
                ..set_alarm()
            })
            .await?;
        Ok(())
    })
    .await?
}

/// A daemon with the counter app attached and the state the cases must
/// leave alone written.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub daemon: Daemon,
    pub app: TestApp,
    pub client: Client,
    pub apis: Apis,
    pub before: Stored,
}

impl Fixture {
    pub async fn start() -> anyhow::Result<Fixture> {
        let dir = tempfile::tempdir()?;
        let daemon = Daemon::start(dir.path(), DAEMON_ARGS).await?;
        let app = TestApp::attach(daemon.addr, vec![counter_type()]).await?;
        let mut client = daemon.client().await?;
        let mut apis = Apis::connect(&daemon).await?;
        write_state(&mut client).await?;
        let before = read_back(&mut client, &mut apis.admin).await?;
        anyhow::ensure!(before.ids == ["blob", "keep"], "stored: {:?}", before.ids);
        Ok(Fixture {
            dir,
            daemon,
            app,
            client,
            apis,
            before,
        })
    }
}
