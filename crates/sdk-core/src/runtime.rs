//! The one tokio runtime of an SDK's process, shared by every channel,
//! stream and call a language binding opens.

use std::sync::OnceLock;

/// The runtime, started at first use. A single worker is plenty for the
/// connections one language thread can feed, and leaves the other cores to
/// the language and the daemon; `sdk-node`'s answers rely on there being one
/// worker (see its `NativeSession::send`).
pub fn runtime() -> std::io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("troupe-sdk")
        .enable_all()
        .build()?;
    // A racing first call built one too; the loser's is dropped unused.
    Ok(RUNTIME.get_or_init(|| rt))
}
