//! `Admin.Backup`: the sled store copied out while the daemon serves.
//!
//! The copy is written to a file in the data directory first, while the
//! store's writes go on (`troupe_storage_sled::backup`), and streamed from
//! there: a slow reader at the other end then holds up nothing but its own
//! stream, never the store's writes. The file has no name (`O_TMPFILE`), so
//! it goes when the stream ends, and with the process should it die.

use std::io::{Read, Seek};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::Runtime;
use troupe_storage_sled::{BackupError, SledStore};

use crate::convert::errors::status_of;
use crate::store_metrics::StoreMetrics;

/// Bytes per streamed message: well under the 4 MiB a gRPC client accepts
/// by default.
const CHUNK: usize = 1 << 20;

pub(super) type BackupStream = ReceiverStream<Result<pb::BackupChunk, Status>>;

pub(super) async fn backup(
    runtime: &Runtime,
    sled: Option<&SledStore>,
    metrics: &StoreMetrics,
) -> Result<BackupStream, Status> {
    let taken = take(runtime, sled).await;
    match &taken {
        Ok((summary, _)) => metrics.backed_up(
            Duration::from_millis(summary.writes_paused_ms),
            summary.bytes,
        ),
        Err(_) => metrics.backup_failed(),
    }
    let (summary, mut file) = taken?;
    let (tx, rx) = mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = send_file(&mut file, summary, &tx) {
            let _ = tx.blocking_send(Err(Status::internal(format!(
                "cannot read the backup back: {e}"
            ))));
        }
    });
    Ok(ReceiverStream::new(rx))
}

/// The backup in a nameless file, and what it holds.
async fn take(
    runtime: &Runtime,
    sled: Option<&SledStore>,
) -> Result<(pb::BackupSummary, std::fs::File), Status> {
    let store = runtime.status().store;
    let Some(sled) = sled.cloned() else {
        let how = if store.starts_with("postgres") {
            "back it up with pg_dump, or with `troupe store copy --from URL --to DIR \
             --live-source`, which copies the database as of one instant into a sled directory \
             (`store copy` puts it back); both copy it while daemons serve"
        } else {
            "state lives in memory and ends with the process; there is nothing to back up"
        };
        return Err(Status::failed_precondition(format!(
            "this daemon's store is {store}, not sled: {how}"
        )));
    };
    // Write-behind state acknowledged before this call goes in too.
    runtime.flush().await.map_err(status_of)?;
    let (summary, paused, file) = tokio::task::spawn_blocking(move || {
        let file = tempfile::tempfile_in(sled.dir()).map_err(|e| {
            Status::internal(format!(
                "cannot create the backup's file in the data directory: {e}"
            ))
        })?;
        let taken = sled.backup_into(file, sled.dir()).map_err(backup_status)?;
        Ok::<_, Status>((taken.summary, taken.writes_held, taken.file))
    })
    .await
    .map_err(|e| Status::internal(format!("the backup task failed: {e}")))??;
    let summary = pb::BackupSummary {
        store,
        trees: summary.trees,
        entries: summary.entries,
        logged: summary.logged,
        bytes: summary.bytes,
        writes_paused_ms: troupe_runtime::input::millis(paused),
    };
    Ok((summary, file))
}

/// Streams `file` from its start, `summary` on the last message. A client
/// that went away ends it.
fn send_file(
    file: &mut std::fs::File,
    summary: pb::BackupSummary,
    tx: &mpsc::Sender<Result<pb::BackupChunk, Status>>,
) -> std::io::Result<()> {
    file.rewind()?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = file.read(&mut buf)?;
        let last = n == 0;
        let chunk = pb::BackupChunk {
            data: buf.get(..n).unwrap_or_default().to_vec().into(),
            summary: last.then(|| summary.clone()),
        };
        if tx.blocking_send(Ok(chunk)).is_err() || last {
            return Ok(());
        }
    }
}

fn backup_status(e: BackupError) -> Status {
    match e {
        BackupError::NoSpace { .. } => Status::resource_exhausted(e.to_string()),
        e => Status::internal(format!("the backup failed: {e}")),
    }
}
