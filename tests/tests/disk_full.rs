//! A full disk under the sled store, and space coming back: while the file
//! system is full, `durable` calls fail with UNAVAILABLE naming "No space
//! left on device"; once space returns they succeed again within 5 s in the
//! same daemon process, the flush backlog stops `failing`, and what was kept
//! dirty meanwhile reaches the disk. A value big enough for sled to keep
//! in a file of its own (over ~128 KiB) recovers the same way. A backup
//! that would not fit beside the store is refused before it writes.
//!
//! The data directory is on a 24 MiB tmpfs mounted in a private mount
//! namespace that a helper process (`unshare`) holds, so the test never
//! fills a real disk and leaves no mount behind. The daemon and the test
//! reach that tmpfs from outside the namespace through `/proc/PID/root`.
//! Where the namespace or the mount cannot be made (not root, no `unshare`)
//! the test prints why and passes as skipped.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use troupe_tests::store::{pair_of, type_with_mode};
use troupe_tests::*;

/// The issue's bound: durable calls succeed again this soon after space
/// returns.
const RECOVERY: Duration = Duration::from_secs(5);

/// The tmpfs size: small enough to fill in a moment.
const TMPFS_MIB: u64 = 24;

/// Run by `sh -c` inside the new namespace: mount the tmpfs over `$0`, say
/// so, then wait for stdin to close (the test dropping the helper or dying),
/// keeping the namespace alive until then.
const MOUNT_AND_WAIT: &str =
    r#"mount -t tmpfs -o size="$1" tmpfs "$0" && echo mounted && exec cat >/dev/null"#;

/// A tmpfs in a mount namespace of its own, alive as long as this value.
struct PrivateTmpfs {
    /// The `unshare`d helper that holds the namespace (killed on drop).
    helper: Child,
    /// The mount point as the helper sees it; an empty directory outside.
    _mount_point: tempfile::TempDir,
    /// The tmpfs as any process outside the namespace reaches it.
    root: PathBuf,
}

impl PrivateTmpfs {
    /// Mounts a `mib` MiB tmpfs in a new mount namespace; `Ok(Err(why))`
    /// when this machine cannot.
    async fn mount(mib: u64) -> anyhow::Result<Result<Self, String>> {
        let mount_point = tempfile::tempdir()?;
        let spawned = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(MOUNT_AND_WAIT)
            .arg(mount_point.path())
            .arg(format!("{mib}m"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut helper = match spawned {
            Ok(child) => child,
            Err(e) => return Ok(Err(format!("cannot run unshare: {e}"))),
        };
        let stdout = helper.stdout.take().context("no stdout pipe")?;
        let mut line = String::new();
        within(
            WAIT,
            "the tmpfs helper to mount",
            BufReader::new(stdout).read_line(&mut line),
        )
        .await??;
        if line.trim() != "mounted" {
            let mut stderr = String::new();
            if let Some(mut pipe) = helper.stderr.take() {
                within(
                    WAIT,
                    "the tmpfs helper's error",
                    pipe.read_to_string(&mut stderr),
                )
                .await??;
            }
            return Ok(Err(format!(
                "cannot mount a tmpfs in a private mount namespace (needs root and \
                 unshare): {}",
                stderr.trim()
            )));
        }
        let pid = helper.id().context("the tmpfs helper exited")?;
        let inside = mount_point
            .path()
            .strip_prefix("/")
            .context("a temporary directory that is not absolute")?;
        let root = PathBuf::from(format!("/proc/{pid}/root")).join(inside);
        // Before anything fills it: the path must be the tmpfs, not the
        // disk under the empty mount point.
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
        let mounted = mountinfo.lines().any(|l| {
            l.contains(&format!(" {} ", mount_point.path().display())) && l.contains(" - tmpfs ")
        });
        if !mounted {
            bail!(
                "the helper said it mounted, but its mount table has no tmpfs on {}:\n{mountinfo}",
                mount_point.path().display()
            );
        }
        Ok(Ok(Self {
            helper,
            _mount_point: mount_point,
            root,
        }))
    }
}

impl Drop for PrivateTmpfs {
    fn drop(&mut self) {
        // The namespace, and with it the mount, goes with its last process.
        let _ = self.helper.start_kill();
    }
}

/// Writes `path` until the file system is full; the bytes written. Bounded
/// by the tmpfs size, so a path that is not that tmpfs fails the test
/// instead of filling a real disk.
async fn fill(path: PathBuf) -> anyhow::Result<u64> {
    tokio::task::spawn_blocking(move || {
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let chunk = vec![0xa5u8; 1 << 20];
        let mut written = 0u64;
        while written <= (TMPFS_MIB + 8) << 20 {
            match file.write_all(&chunk) {
                Ok(()) => written += chunk.len() as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => return Ok(written),
                Err(e) => return Err(e).with_context(|| format!("filling {}", path.display())),
            }
        }
        bail!(
            "{} took more than {TMPFS_MIB} MiB without filling up: not the test's tmpfs",
            path.display()
        )
    })
    .await?
}

async fn flush_backlog(daemon: &Daemon) -> anyhow::Result<pb::FlushBacklog> {
    let mut admin = daemon.admin().await?;
    within(WAIT, "Status", admin.status(pb::StatusRequest {}))
        .await??
        .into_inner()
        .flush
        .context("Status without a flush backlog")
}

/// A `put_raw` payload: a JSON string of 64 KiB starting with `n`, so each
/// write needs fresh space and the stored value says which write it was.
fn big_value(n: usize) -> String {
    value_of(n, 64 << 10)
}

fn value_of(n: usize, bytes: usize) -> String {
    format!("\"{n:04}{}\"", "x".repeat(bytes))
}

fn is_no_space(message: &str) -> bool {
    message.contains("No space left on device")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_calls_fail_while_the_disk_is_full_and_succeed_within_5s_once_space_returns(
) -> anyhow::Result<()> {
    let tmpfs = match PrivateTmpfs::mount(TMPFS_MIB).await? {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            println!("skipped: {why}");
            return Ok(());
        }
    };
    let data_dir = tmpfs.root.join("data");
    let filler = tmpfs.root.join("filler");
    let mut daemon = Daemon::start(&data_dir, &[]).await?;
    let _app = TestApp::attach(
        daemon.addr,
        vec![type_with_mode("dur", pb::StateMode::Durable)],
    )
    .await?;
    let mut client = daemon.client().await?;
    // Activate while there is space: an activation loads state.
    client.invoke("dur", "d-0", "incr_pair", "{}").await?;
    client
        .invoke("dur", "big", "put_raw", &big_value(0))
        .await?;

    let filled = fill(filler.clone()).await?;
    // sled may still fit a write into a page it already has; fresh 64 KiB
    // values need new pages, which the full tmpfs refuses.
    let mut last_big = 0;
    let full = loop {
        last_big += 1;
        if last_big > 64 {
            bail!("64 durable writes of 64 KiB succeeded on a full {TMPFS_MIB} MiB tmpfs");
        }
        let written = within(
            WAIT,
            "a durable write on a full disk",
            client.invoke_raw("dur", "big", "put_raw", big_value(last_big)),
        )
        .await?;
        if let Err(status) = written {
            break status;
        }
    };
    let full = expect_code::<()>(Err(full), tonic::Code::Unavailable)?;
    assert!(
        is_no_space(full.message()),
        "UNAVAILABLE does not name the full disk: {}",
        full.message()
    );
    // And it stays so while the disk is full.
    let again = within(
        WAIT,
        "a durable call on a full disk",
        client.invoke_raw("dur", "d-0", "incr_pair", "{}"),
    )
    .await?;
    let again = expect_code(again, tonic::Code::Unavailable)?;
    assert!(
        is_no_space(again.message()),
        "UNAVAILABLE does not name the full disk: {}",
        again.message()
    );
    let backlog = flush_backlog(&daemon).await?;
    assert!(
        backlog.failing && is_no_space(&backlog.last_error),
        "the flush backlog does not report the full disk: {backlog:?}"
    );

    // Space returns; the daemon is not restarted.
    std::fs::remove_file(&filler)?;
    let freed = Instant::now();
    let confirmed = poll_until(RECOVERY, "a durable call to succeed again", || {
        let mut client = client.clone();
        async move {
            match client.invoke_raw("dur", "d-0", "incr_pair", "{}").await {
                Ok(bytes) => Ok(Some(serde_json::from_slice::<i64>(&bytes)?)),
                Err(status) if status.code() == tonic::Code::Unavailable => Ok(None),
                Err(status) => Err(status.into()),
            }
        }
    })
    .await
    .with_context(|| format!("daemon log:\n{}", daemon.log()))?;
    println!(
        "filled {} MiB; durable calls succeeded again {:?} after space returned",
        filled >> 20,
        freed.elapsed()
    );
    let backlog = flush_backlog(&daemon).await?;
    assert!(
        !backlog.failing && backlog.last_error.is_empty(),
        "the flush backlog still fails after a durable call succeeded: {backlog:?}"
    );
    poll_until(WAIT, "no dirty actors", || async {
        Ok((flush_backlog(&daemon).await?.dirty_actors == 0).then_some(()))
    })
    .await?;

    // What the store confirmed is on the tmpfs, readable by a new daemon:
    // the re-opened database is whole, and the writes refused while full
    // (kept dirty) were written after.
    daemon.kill9().await?;
    let daemon = Daemon::start(&data_dir, &[]).await?;
    let mut client = daemon.client().await?;
    let (d0, _) = client.state("dur", "d-0").await?;
    assert_eq!(pair_of(&d0)?, (confirmed, confirmed));
    let (big, _) = client.state("dur", "big").await?;
    let stored = big.get("raw").context("big has no stored value")?;
    assert_eq!(
        stored.as_ref(),
        big_value(last_big).as_bytes(),
        "big does not hold its last write (refused while full, kept dirty)"
    );
    Ok(())
}

/// sled 0.34 writes a value over ~128 KiB to a blob file of its own; a blob
/// write failing on a full disk used to wedge the database until the daemon
/// restarted (every later flush waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_sled_keeps_in_a_blob_fails_on_a_full_disk_and_is_written_once_space_returns(
) -> anyhow::Result<()> {
    const BLOB: usize = 256 << 10;
    let tmpfs = match PrivateTmpfs::mount(TMPFS_MIB).await? {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            println!("skipped: {why}");
            return Ok(());
        }
    };
    let data_dir = tmpfs.root.join("data");
    let filler = tmpfs.root.join("filler");
    let mut daemon = Daemon::start(&data_dir, &[]).await?;
    let _app = TestApp::attach(
        daemon.addr,
        vec![type_with_mode("dur", pb::StateMode::Durable)],
    )
    .await?;
    let mut client = daemon.client().await?;
    client
        .invoke("dur", "blob", "put_raw", &value_of(0, BLOB))
        .await?;

    fill(filler.clone()).await?;
    let refused = within(
        WAIT,
        "a durable blob write on a full disk",
        client.invoke_raw("dur", "blob", "put_raw", value_of(1, BLOB)),
    )
    .await?;
    let refused = expect_code(refused, tonic::Code::Unavailable)?;
    assert!(
        is_no_space(refused.message()),
        "UNAVAILABLE does not name the full disk: {}",
        refused.message()
    );

    std::fs::remove_file(&filler)?;
    let freed = Instant::now();
    poll_until(RECOVERY, "a durable blob write to succeed again", || {
        let mut client = client.clone();
        async move {
            // Bounded: a wedged store never answers.
            let put = tokio::time::timeout(
                Duration::from_secs(2),
                client.invoke_raw("dur", "blob", "put_raw", value_of(2, BLOB)),
            )
            .await;
            match put {
                Ok(Ok(_)) => Ok(Some(())),
                Ok(Err(status)) if status.code() == tonic::Code::Unavailable => Ok(None),
                Ok(Err(status)) => Err(status.into()),
                Err(_) => Ok(None),
            }
        }
    })
    .await
    .with_context(|| format!("daemon log:\n{}", daemon.log()))?;
    println!(
        "a {} KiB durable write succeeded again {:?} after space returned",
        BLOB >> 10,
        freed.elapsed()
    );

    daemon.kill9().await?;
    let daemon = Daemon::start(&data_dir, &[]).await?;
    let mut client = daemon.client().await?;
    let (blob, _) = client.state("dur", "blob").await?;
    let stored = blob.get("raw").context("blob has no stored value")?;
    assert_eq!(stored.as_ref(), value_of(2, BLOB).as_bytes());
    Ok(())
}

/// A backup (`troupe backup`) copies the store into the data directory's
/// file system before streaming it; one that would not fit there is refused
/// before anything is written, so it can never fill the disk under the
/// store, and it goes through once there is room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_that_would_not_fit_is_refused_and_the_store_keeps_writing() -> anyhow::Result<()>
{
    let tmpfs = match PrivateTmpfs::mount(TMPFS_MIB).await? {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            println!("skipped: {why}");
            return Ok(());
        }
    };
    let data_dir = tmpfs.root.join("data");
    let filler = tmpfs.root.join("filler");
    let daemon = Daemon::start(&data_dir, &[]).await?;
    let _app = TestApp::attach(
        daemon.addr,
        vec![type_with_mode("dur", pb::StateMode::Durable)],
    )
    .await?;
    let mut client = daemon.client().await?;
    // A few MiB of state, so that the copy needs that much room.
    for n in 0..48 {
        client
            .invoke("dur", &format!("v{n}"), "put_raw", &big_value(n))
            .await?;
    }
    let filled = fill(filler.clone()).await?;
    // Leave room for the store's own writes, not for a copy of it.
    let room = 2u64 << 20;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)?
        .set_len(filled.saturating_sub(room))?;

    let refused = within(
        WAIT,
        "a backup on a nearly full disk",
        daemon.admin().await?.backup(pb::BackupRequest {}),
    )
    .await?
    .map(|_| ());
    let refused = expect_code(refused, tonic::Code::ResourceExhausted)?;
    assert!(
        refused
            .message()
            .contains("not enough free space for a backup"),
        "{}",
        refused.message()
    );
    // The store was not touched: a durable write still fits.
    client.invoke("dur", "after", "incr_pair", "{}").await?;

    std::fs::remove_file(&filler)?;
    let out = tempfile::tempdir()?;
    let file = out.path().join("backup");
    let (status, stdout, stderr) = run_cli(&[
        "backup",
        &file.display().to_string(),
        "--addr",
        &daemon.addr.to_string(),
    ])
    .await?;
    assert!(status.success(), "{status}: {stdout}{stderr}");
    Ok(())
}
