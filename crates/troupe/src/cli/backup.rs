//! `troupe backup FILE`, a running daemon's sled store over the admin API,
//! and `troupe restore FILE --data-dir DIR`, which writes one into an empty
//! directory with no daemon involved. FILE `-` is standard output or input,
//! for pipes.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;
use troupe_proto::v1 as pb;
use troupe_storage_sled::BackupError;

use super::render::{bytes, duration};
use super::{connect, emit, emit_json, fail, Exit, Output, Target};

/// The file name that means standard output (`backup`) or input (`restore`).
const STDIO: &str = "-";

pub async fn backup(target: &Target, file: PathBuf) -> anyhow::Result<()> {
    if file.as_os_str() == STDIO {
        return backup_to_stdout(target).await;
    }
    if file.exists() {
        return Err(fail(
            Exit::Usage,
            format!(
                "{} exists; a backup never overwrites a file: give a new name, or move that \
                 one away first",
                file.display()
            ),
        ));
    }
    // Written under another name and renamed once whole, so that FILE is
    // only ever a complete backup.
    let mut partial_name = file.clone().into_os_string();
    partial_name.push(".partial");
    let partial_path = PathBuf::from(partial_name);
    let mut out = std::fs::File::create_new(&partial_path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "; an earlier backup that did not finish left it: remove it and run the command again"
        } else {
            ""
        };
        fail(
            Exit::Other,
            format!("cannot create {}: {e}{hint}", partial_path.display()),
        )
    })?;
    let partial = Partial(partial_path);
    let shown = partial.0.display().to_string();
    let summary = receive(target, &mut out, &shown).await?;
    out.sync_all()
        .map_err(|e| fail(Exit::Other, format!("cannot write {shown}: {e}")))?;
    drop(out);
    std::fs::rename(&partial.0, &file).map_err(|e| {
        fail(
            Exit::Other,
            format!("cannot rename {shown} to {}: {e}", file.display()),
        )
    })?;
    partial.completed();
    let said = report(target.output, &file.display().to_string(), &summary);
    emit(&said)
}

/// The backup on standard output, for a pipe (to compression, to object
/// storage); what it holds goes to standard error.
async fn backup_to_stdout(target: &Target) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        return Err(fail(
            Exit::Usage,
            "standard output is a terminal; send the backup to a file or a pipe, e.g. \
             `troupe backup - | gzip > nightly.troupe.gz`",
        ));
    }
    let mut out = std::io::stdout().lock();
    let summary = receive(target, &mut out, "standard output").await?;
    out.flush()
        .map_err(|e| fail(Exit::Other, format!("cannot write standard output: {e}")))?;
    super::tell_user(format_args!("{}", report(target.output, STDIO, &summary)));
    Ok(())
}

/// Asks the daemon for a backup and writes it to `out` (named `shown` in
/// errors); what the backup holds.
async fn receive(
    target: &Target,
    out: &mut impl Write,
    shown: &str,
) -> anyhow::Result<pb::BackupSummary> {
    let daemon = connect(target).await?;
    let mut client = daemon.admin();
    let request = daemon.request("back up the store");
    let mut stream = client
        .backup(pb::BackupRequest {})
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    loop {
        let Some(chunk) = stream.message().await.map_err(|s| request.failed(s))? else {
            return Err(fail(
                Exit::Daemon,
                "the daemon ended the backup before its last part; take it again",
            ));
        };
        out.write_all(&chunk.data)
            .map_err(|e| fail(Exit::Other, format!("cannot write {shown}: {e}")))?;
        if let Some(summary) = chunk.summary {
            return Ok(summary);
        }
    }
}

/// What a finished backup says, as `output` asks.
fn report(output: Output, file: &str, summary: &pb::BackupSummary) -> String {
    match output {
        Output::Json => {
            let value = json!({
                "file": file,
                "store": summary.store,
                "trees": summary.trees,
                "entries": summary.entries,
                "keys": summary.entries.saturating_sub(summary.logged),
                "logged": summary.logged,
                "bytes": summary.bytes,
                "writes_paused_ms": summary.writes_paused_ms,
            });
            format!(
                "{}\n",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            )
        }
        Output::Table => format!(
            "backed up {} to {file}: {}, {}; writes paused {}\n",
            summary.store,
            records(summary.entries, summary.logged, "made while it read"),
            bytes(summary.bytes),
            duration(summary.writes_paused_ms)
        ),
    }
}

/// A backup's records for people: the keys it read, and apart from them
/// the changes logged while it read (which a restore replays over those
/// keys, so they are not more keys).
fn records(entries: u64, logged: u64, changes: &str) -> String {
    let keys = entries.saturating_sub(logged);
    match logged {
        0 => format!("{keys} keys"),
        1 => format!("{keys} keys and 1 change {changes}"),
        n => format!("{keys} keys and {n} changes {changes}"),
    }
}

/// A partly written backup, removed unless it was completed.
struct Partial(PathBuf);

impl Partial {
    /// Renamed into place: nothing to remove.
    fn completed(mut self) {
        self.0 = PathBuf::new();
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

pub async fn restore(file: PathBuf, data_dir: PathBuf, output: Output) -> anyhow::Result<()> {
    let from_stdin = file.as_os_str() == STDIO;
    let (from, into) = (file.clone(), data_dir.clone());
    let summary = tokio::task::spawn_blocking(move || {
        if !from_stdin {
            return troupe_storage_sled::restore(&from, &into);
        }
        // A restore reads its file twice (to check it, then to write it):
        // standard input is kept in a file beside the data directory first.
        let beside = into
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let spool =
            tempfile::NamedTempFile::new_in(beside).map_err(|source| BackupError::File {
                doing: "make a file for standard input in",
                path: beside.to_owned(),
                source,
            })?;
        let mut writer = spool.as_file();
        std::io::copy(&mut std::io::stdin().lock(), &mut writer).map_err(|source| {
            BackupError::File {
                doing: "read standard input into",
                path: spool.path().to_owned(),
                source,
            }
        })?;
        troupe_storage_sled::restore(spool.path(), &into).map_err(|e| spool_named(e, spool.path()))
    })
    .await?
    .map_err(|e| restore_failed(&file, e))?;
    let shown = if from_stdin {
        "standard input".to_owned()
    } else {
        file.display().to_string()
    };
    match output {
        Output::Json => emit_json(&json!({
            "file": if from_stdin { STDIO.to_owned() } else { shown.clone() },
            "data_dir": data_dir.display().to_string(),
            "trees": summary.trees,
            "entries": summary.entries,
            "keys": summary.entries.saturating_sub(summary.logged),
            "logged": summary.logged,
            "bytes": summary.bytes,
        })),
        Output::Table => emit(&format!(
            "restored {shown} into {}: {}; start the daemon with --data-dir {}\n",
            data_dir.display(),
            records(summary.entries, summary.logged, "replayed"),
            data_dir.display()
        )),
    }
}

/// `e` naming standard input where it names the file that held it: the
/// user gave `-`, and the file is gone once the restore ends.
fn spool_named(e: BackupError, spool: &Path) -> BackupError {
    let named = |path: PathBuf| {
        if path == spool {
            PathBuf::from("standard input")
        } else {
            path
        }
    };
    match e {
        BackupError::Corrupt { path, reason } => BackupError::Corrupt {
            path: named(path),
            reason,
        },
        BackupError::Version { path, found } => BackupError::Version {
            path: named(path),
            found,
        },
        BackupError::File {
            doing,
            path,
            source,
        } => BackupError::File {
            doing,
            path: named(path),
            source,
        },
        other => other,
    }
}

fn restore_failed(file: &Path, e: BackupError) -> anyhow::Error {
    let exit = match &e {
        BackupError::Corrupt { .. }
        | BackupError::Version { .. }
        | BackupError::NotEmpty { .. } => Exit::Usage,
        BackupError::File { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Exit::NotFound
        }
        _ => Exit::Other,
    };
    fail(exit, format!("restore {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::records;

    #[test]
    fn logged_changes_are_not_counted_as_keys() {
        assert_eq!(records(10, 0, "replayed"), "10 keys");
        assert_eq!(records(10, 1, "replayed"), "9 keys and 1 change replayed");
        assert_eq!(
            records(10, 4, "made while it read"),
            "6 keys and 4 changes made while it read"
        );
        // A daemon's summary is input: a count it got wrong must not panic.
        assert_eq!(records(1, 3, "replayed"), "0 keys and 3 changes replayed");
    }
}
