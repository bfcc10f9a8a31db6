//! `troupe backup FILE`, a running daemon's sled store over the admin API,
//! and `troupe restore FILE --data-dir DIR`, which writes one into an empty
//! directory with no daemon involved.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;
use troupe_proto::v1 as pb;
use troupe_storage_sled::BackupError;

use super::render::bytes;
use super::{connect, emit, emit_json, fail, Exit, Output, Target};

pub async fn backup(target: &Target, file: PathBuf) -> anyhow::Result<()> {
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
    let daemon = connect(target).await?;
    let mut client = pb::admin_client::AdminClient::new(daemon.channel.clone());
    let request = daemon.request("back up the store");
    let mut stream = client
        .backup(pb::BackupRequest {})
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let wrote = |e: std::io::Error| {
        fail(
            Exit::Other,
            format!("cannot write {}: {e}", partial.0.display()),
        )
    };
    let summary = loop {
        let Some(chunk) = stream.message().await.map_err(|s| request.failed(s))? else {
            return Err(fail(
                Exit::Daemon,
                "the daemon ended the backup before its last part; take it again",
            ));
        };
        out.write_all(&chunk.data).map_err(wrote)?;
        if let Some(summary) = chunk.summary {
            break summary;
        }
    };
    out.sync_all().map_err(wrote)?;
    drop(out);
    std::fs::rename(&partial.0, &file).map_err(|e| {
        fail(
            Exit::Other,
            format!(
                "cannot rename {} to {}: {e}",
                partial.0.display(),
                file.display()
            ),
        )
    })?;
    partial.completed();
    match target.output {
        Output::Json => emit_json(&json!({
            "file": file.display().to_string(),
            "store": summary.store,
            "trees": summary.trees,
            "entries": summary.entries,
            "bytes": summary.bytes,
        })),
        Output::Table => emit(&format!(
            "backed up {} to {}: {} keys, {}\n",
            summary.store,
            file.display(),
            summary.entries,
            bytes(summary.bytes)
        )),
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
    let (from, into) = (file.clone(), data_dir.clone());
    let summary = tokio::task::spawn_blocking(move || troupe_storage_sled::restore(&from, &into))
        .await?
        .map_err(|e| restore_failed(&file, e))?;
    match output {
        Output::Json => emit_json(&json!({
            "file": file.display().to_string(),
            "data_dir": data_dir.display().to_string(),
            "trees": summary.trees,
            "entries": summary.entries,
            "bytes": summary.bytes,
        })),
        Output::Table => emit(&format!(
            "restored {} into {}: {} keys; start the daemon with --data-dir {}\n",
            file.display(),
            data_dir.display(),
            summary.entries,
            data_dir.display()
        )),
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
