//! The store against bad URLs, and against a real server when
//! `TROUPE_TEST_POSTGRES` names one.

use std::future::Future;
use std::str::FromStr;

use bytes::Bytes;
use tokio_postgres::config::Host;
use tokio_postgres::NoTls;
use troupe_storage::StateStore;

use crate::store::describe_config;
use crate::PostgresStore;

#[test]
fn descriptions_never_show_the_password() -> Result<(), Box<dyn std::error::Error>> {
    let config = tokio_postgres::Config::from_str("postgres://app:s3cret@db.local:6543/state")?;
    assert_eq!(
        describe_config(&config),
        "postgres://app@db.local:6543/state"
    );
    let config =
        tokio_postgres::Config::from_str("host=h1 port=5433 user=u password=s3cret dbname=d")?;
    assert_eq!(describe_config(&config), "postgres://u@h1:5433/d");
    assert_eq!(
        PostgresStore::redact("postgresql://app:s3cret@db.local/state"),
        "postgres://app@db.local:5432/state"
    );
    assert_eq!(
        PostgresStore::redact("postgres://app:s3cret@db.local:bad/state"),
        "postgres://***@db.local:bad/state"
    );
    Ok(())
}

#[tokio::test]
async fn a_refused_connection_names_the_server_and_what_to_check() {
    // Port 1 on loopback: nothing listens there.
    let result = PostgresStore::connect("postgres://app:s3cret@127.0.0.1:1/state").await;
    let Err(e) = result else {
        panic!("connecting to a closed port succeeded");
    };
    let text = e.to_string();
    assert!(text.contains("postgres://app@127.0.0.1:1/state"), "{text}");
    assert!(text.contains("check that the server is running"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test]
async fn a_bad_url_is_refused_clearly() {
    let Err(e) = PostgresStore::connect("postgres://app:s3cret@db:notaport/x").await else {
        panic!("a bad port was accepted");
    };
    let text = e.to_string();
    assert!(text.contains("invalid PostgreSQL connection"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// Against a real server: `TROUPE_TEST_POSTGRES` (a connection URL).
/// Skipped with a message when it is unset, failed when
/// `TROUPE_REQUIRE_POSTGRES=1`.
mod live {
    use super::*;
    use troupe_storage::conformance::{postgres_url, write};

    mod snapshot;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A fresh database per test, dropped at the end (best effort).
    struct TempDb {
        admin: tokio_postgres::Client,
        name: String,
        url: String,
    }

    impl TempDb {
        async fn create(base: &str) -> Result<TempDb, Box<dyn std::error::Error>> {
            let (admin, conn) = tokio_postgres::connect(base, NoTls).await?;
            tokio::spawn(conn);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos();
            let name = format!("troupe_unit_{}_{nanos}", std::process::id());
            admin
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await?;
            let mut config = tokio_postgres::Config::from_str(base)?;
            config.dbname(&name);
            let url = format!(
                "{} dbname={name}",
                key_value_form(&config).ok_or("unsupported base URL")?
            );
            Ok(TempDb { admin, name, url })
        }

        async fn drop_db(self) {
            let _ = self
                .admin
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await;
        }
    }

    /// The config as libpq key=value text (password included: tests only).
    fn key_value_form(config: &tokio_postgres::Config) -> Option<String> {
        let host = match config.get_hosts().first()? {
            Host::Tcp(h) => h.clone(),
            #[cfg(unix)]
            Host::Unix(p) => p.display().to_string(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let mut out = format!("host={host} port={port}");
        if let Some(user) = config.get_user() {
            out.push_str(&format!(" user={user}"));
        }
        if let Some(pw) = config.get_password() {
            out.push_str(&format!(" password={}", String::from_utf8_lossy(pw)));
        }
        Some(out)
    }

    #[tokio::test]
    async fn batches_are_atomic_upserts_and_deletes_that_survive_reconnect() -> TestResult {
        let Some(base) = postgres_url("PostgresStore batches")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        {
            let store = PostgresStore::connect(&db.url).await?;
            store
                .write_batch(&[
                    write("counter", "a", &[("n", Some("1")), ("gone", Some("x"))]),
                    write("counter", "ab", &[("n", Some("2"))]),
                    write("counterx", "a", &[("n", Some("3"))]),
                    write("counter", "bin", &[("raw", Some("\u{0}\u{1}\u{ff}"))]),
                ])
                .await?;
            store
                .write_batch(&[
                    write("counter", "a", &[("gone", None), ("n", Some("10"))]),
                    // A key named twice in one batch: the last change wins.
                    write("counter", "ab", &[("n", Some("20"))]),
                    write("counter", "ab", &[("n", Some("21"))]),
                    // Deleting what does not exist is fine.
                    write("counter", "zz", &[("nothing", None)]),
                ])
                .await?;
            store.write_batch(&[]).await?;
        }
        let store = PostgresStore::connect(&db.url).await?;
        assert_eq!(
            store.load("counter", "a").await?,
            vec![("n".to_string(), Bytes::from_static(b"10"))]
        );
        assert_eq!(
            store.load("counter", "ab").await?,
            vec![("n".to_string(), Bytes::from_static(b"21"))]
        );
        assert_eq!(
            store.load("counter", "bin").await?,
            vec![("raw".to_string(), Bytes::from("\u{0}\u{1}\u{ff}"))]
        );
        assert!(store.load("counter", "nobody").await?.is_empty());
        assert_eq!(
            store.list_actors("counter", None, 10).await?,
            vec!["a", "ab", "bin"]
        );
        assert_eq!(
            store.list_actors("counter", Some("a"), 10).await?,
            vec!["ab", "bin"]
        );
        assert_eq!(store.list_actors("counter", None, 1).await?, vec!["a"]);
        assert_eq!(store.list_actors("counterx", None, 10).await?, vec!["a"]);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn a_failing_batch_changes_nothing() -> TestResult {
        let Some(base) = postgres_url("PostgresStore atomicity")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        store
            .write_batch(&[write("t", "a", &[("k", Some("before"))])])
            .await?;
        // A NUL in a text column makes PostgreSQL refuse the statement
        // after the first row: nothing of the batch may be applied.
        let bad = store
            .write_batch(&[
                write("t", "a", &[("k", Some("after"))]),
                write("t", "b\u{0}", &[("k", Some("x"))]),
            ])
            .await;
        assert!(bad.is_err(), "a batch with a NUL in an id was accepted");
        assert_eq!(
            store.load("t", "a").await?,
            vec![("k".to_string(), Bytes::from_static(b"before"))]
        );
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn writes_are_fenced_by_owner_epochs() -> TestResult {
        let Some(base) = postgres_url("PostgresStore fencing")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        troupe_storage::conformance::fencing(&store, &store).await?;
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn inboxes_keep_the_store_contract() -> TestResult {
        let Some(base) = postgres_url("PostgresStore inboxes")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        troupe_storage::conformance::inbox(&store).await?;
        troupe_storage::conformance::inbox_fencing(&store).await?;
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn call_records_keep_the_store_contract() -> TestResult {
        let Some(base) = postgres_url("PostgresStore call records")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        troupe_storage::conformance::records(&store).await?;
        troupe_storage::conformance::records_fencing(&store).await?;
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn purges_keep_the_store_contract() -> TestResult {
        let Some(base) = postgres_url("PostgresStore purges")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        troupe_storage::conformance::purge(&store).await?;
        troupe_storage::conformance::purge_fencing(&store).await?;
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn postgres_stores_copy_whole() -> TestResult {
        let Some(base) = postgres_url("PostgresStore copies")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        troupe_storage::conformance::copy(troupe_storage::Stores {
            state: &store,
            reminders: &store,
        })
        .await?;
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    /// The offline tools see the daemons connected to a database, by the
    /// name a daemon gives its connections (the URL's, else `troupe`), and
    /// not their own connections.
    #[tokio::test]
    async fn a_tool_counts_the_daemons_connected_and_not_itself() -> TestResult {
        let Some(base) = postgres_url("PostgresStore daemon connections")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let tool = PostgresStore::connect_as_tool(&db.url, "troupe store copy").await?;
        assert_eq!(tool.daemon_connections().await?, 0);
        let daemon = PostgresStore::connect(&db.url).await?;
        assert!(tool.daemon_connections().await? >= 1);
        drop(daemon);
        // A closed connection's backend leaves pg_stat_activity as it exits.
        until_no_daemons(&tool).await?;

        // The URL is libpq's key=value form here.
        let named = format!("{} application_name=orders", db.url);
        let tool = PostgresStore::connect_as_tool(&named, "troupe store copy").await?;
        let daemon = PostgresStore::connect(&named).await?;
        assert!(tool.daemon_connections().await? >= 1);
        drop(daemon);
        until_no_daemons(&tool).await?;
        drop(tool);
        db.drop_db().await;
        Ok(())
    }

    async fn until_no_daemons(tool: &PostgresStore) -> TestResult {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while tool.daemon_connections().await? != 0 {
            if tokio::time::Instant::now() > deadline {
                return Err("a dropped store's connections stayed for 10 s".into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The size of troupe's tables, for status output: there, and growing
    /// with what is written.
    #[tokio::test]
    async fn the_tables_size_grows_with_the_state() -> TestResult {
        let Some(base) = postgres_url("PostgresStore size")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        let before = store.size_on_disk().await.ok_or("no size")?;
        // Values that do not compress: TOAST would shrink repeated bytes.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let value: String = (0..8_192)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from(b'a' + (seed % 26) as u8)
            })
            .collect();
        for batch in 0..32 {
            let keys: Vec<(String, Option<&str>)> = (0..16)
                .map(|i| (format!("k{batch}-{i}"), Some(value.as_str())))
                .collect();
            let keys: Vec<(&str, Option<&str>)> =
                keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            store.write_batch(&[write("t", "big", &keys)]).await?;
        }
        let after = store.size_on_disk().await.ok_or("no size")?;
        // 4 MiB of values, less what the first pages had room for.
        assert!(after >= before + (2 << 20), "{before} -> {after}");
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    /// A fenced purge waits for a write of the actor that holds its epoch,
    /// then removes what that write stored: it deletes in a snapshot taken
    /// after its claim, not in one from before the write committed.
    #[tokio::test]
    async fn a_purge_removes_what_the_write_it_waited_for_stored() -> TestResult {
        let Some(base) = postgres_url("PostgresStore purge behind a write")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        let (mut writer, conn) = tokio_postgres::connect(&db.url, NoTls).await?;
        tokio::spawn(conn);
        // A write as a fenced batch makes it: the epoch row locked first.
        let tx = writer.transaction().await?;
        tx.execute(crate::state::CLAIM, &[&"t", &"a", &5i64])
            .await?;
        tx.execute(
            "INSERT INTO troupe_state (actor_type, actor_id, key, value) VALUES ('t', 'a', 'k', 'v')",
            &[],
        )
        .await?;
        let purging = tokio::spawn({
            let store = store.clone();
            async move { store.purge_actor("t", "a", Some(5)).await }
        });
        // The server says when the purge waits for the write's row lock.
        let (watcher, conn) = tokio_postgres::connect(&db.url, NoTls).await?;
        tokio::spawn(conn);
        let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                       WHERE NOT l.granted AND a.datname = current_database()";
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let row = watcher.query_one(waiting, &[]).await?;
                if row.try_get::<_, i64>(0)? > 0 {
                    return Ok::<(), tokio_postgres::Error>(());
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .map_err(|_| "the purge never waited for the write's lock")??;
        assert!(
            !purging.is_finished(),
            "the purge did not wait for the write"
        );
        tx.commit().await?;
        let purged = purging.await??;
        assert_eq!(purged.state_keys, 1, "{purged:?}");
        assert!(store.load("t", "a").await?.is_empty());
        drop(store);
        drop(writer);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn reminders_keep_the_store_contract() -> TestResult {
        let Some(base) = postgres_url("PostgresStore reminders")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        let store = PostgresStore::connect(&db.url).await?;
        troupe_storage::conformance::reminders(&store).await?;
        drop(store);
        db.drop_db().await;
        Ok(())
    }

    #[tokio::test]
    async fn migrations_are_idempotent_concurrent_and_refuse_a_newer_schema() -> TestResult {
        let Some(base) = postgres_url("PostgresStore migrations")? else {
            return Ok(());
        };
        let db = TempDb::create(&base).await?;
        // Several daemons starting at once against an empty database.
        let starts = (0..4).map(|_| {
            let url = db.url.clone();
            async move { PostgresStore::connect(&url).await.map(drop) }
        });
        let results = join_all(starts).await;
        assert_eq!(results.len(), 4);
        for result in results {
            result?;
        }
        let (client, conn) = tokio_postgres::connect(&db.url, NoTls).await?;
        tokio::spawn(conn);
        let versions: Vec<i32> = client
            .query(
                "SELECT version FROM troupe_schema_version ORDER BY version",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            versions,
            vec![1, 2, 3, 4, 5],
            "each migration is recorded once"
        );
        client
            .batch_execute("INSERT INTO troupe_schema_version (version) VALUES (999)")
            .await?;
        let Err(e) = PostgresStore::connect(&db.url).await else {
            panic!("a database from a newer troupe was accepted");
        };
        assert!(e.to_string().contains("newer than this troupe"), "{e}");
        drop(client);
        db.drop_db().await;
        Ok(())
    }

    /// Runs the futures at once, on separate tasks.
    async fn join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handles: Vec<_> = futs.map(tokio::spawn).collect();
        let mut out = Vec::new();
        for h in handles {
            if let Ok(v) = h.await {
                out.push(v);
            }
        }
        out
    }
}
