//! `troupe dev --watch`: file changes under the watched paths, debounced,
//! with the files tools write on their own (bytecode caches, VCS metadata,
//! editor swap files, the daemon's own state) left out so that a restart
//! does not cause the next one.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use notify::event::{AccessKind, MetadataKind, ModifyKind};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// How long the files must be quiet before a change counts: an editor's
/// save or a `git checkout` is a burst of events, and one restart is wanted.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Events waiting for the debouncer; more in one burst are dropped, since
/// one is enough to restart.
const QUEUE: usize = 1024;

/// Directories whose contents tools write by themselves.
const IGNORED_DIRS: [&str; 3] = ["__pycache__", "node_modules", "target"];

/// Endings of files editors and interpreters write beside the sources.
const IGNORED_ENDINGS: [&str; 5] = [".pyc", ".swp", ".swx", "~", ".tmp"];

/// The watched paths; [`Watch::changed`] reports a change under them.
#[derive(Debug)]
pub struct Watch {
    changes: mpsc::Receiver<PathBuf>,
    // Watching ends when it is dropped.
    _watcher: RecommendedWatcher,
}

impl Watch {
    /// Starts watching `paths` (each recursively); changes under `skip`
    /// (the daemon's data directory) are not reported.
    pub fn start(paths: &[PathBuf], skip: Option<&Path>) -> anyhow::Result<Self> {
        let mut roots = Vec::with_capacity(paths.len());
        for path in paths {
            let root = path.canonicalize().with_context(|| {
                format!(
                    "--watch {}: cannot watch it; give an existing file or directory",
                    path.display()
                )
            })?;
            roots.push(root);
        }
        let skip = skip.and_then(|p| p.canonicalize().ok());
        let filter = Filter {
            roots: roots.clone(),
            skip,
        };
        let (tx, changes) = mpsc::channel(QUEUE);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                match event {
                    Ok(event) if counts(&event.kind) => {
                        if let Some(path) = event.paths.into_iter().find(|p| filter.keeps(p)) {
                            // Full: a restart is already coming.
                            let _ = tx.try_send(path);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "file watching reported an error"),
                }
            })
            .context("cannot start watching files (--watch)")?;
        for (root, given) in roots.iter().zip(paths) {
            watcher
                .watch(root, RecursiveMode::Recursive)
                .with_context(|| {
                    format!(
                        "--watch {}: cannot watch it (on Linux, raising \
                         fs.inotify.max_user_watches helps with large trees)",
                        given.display()
                    )
                })?;
            debug!(path = %root.display(), "watching for changes");
        }
        Ok(Self {
            changes,
            _watcher: watcher,
        })
    }

    /// The next change: waits for one, then for the files to be quiet for
    /// [`DEBOUNCE`]; returns the first path of the burst. Cancel-safe up to
    /// losing a burst in progress, which the caller only does when it stops.
    pub async fn changed(&mut self) -> Option<PathBuf> {
        let first = self.changes.recv().await?;
        loop {
            match tokio::time::timeout(DEBOUNCE, self.changes.recv()).await {
                Ok(Some(path)) => debug!(path = %path.display(), "more changes"),
                Ok(None) | Err(_) => return Some(first),
            }
        }
    }
}

/// Whether an event is a change to a file rather than a read of it.
fn counts(kind: &EventKind) -> bool {
    !matches!(
        kind,
        EventKind::Access(AccessKind::Any | AccessKind::Read | AccessKind::Open(_))
            | EventKind::Access(AccessKind::Close(notify::event::AccessMode::Read))
            | EventKind::Access(AccessKind::Close(notify::event::AccessMode::Execute))
            | EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime))
    )
}

/// Which changed paths restart the app.
#[derive(Debug, Clone)]
struct Filter {
    roots: Vec<PathBuf>,
    skip: Option<PathBuf>,
}

impl Filter {
    fn keeps(&self, path: &Path) -> bool {
        if self.skip.as_ref().is_some_and(|s| path.starts_with(s)) {
            return false;
        }
        // Only what lies below the watched root is judged: a project under
        // a hidden directory is still watched.
        let Some(below) = self.roots.iter().find_map(|r| path.strip_prefix(r).ok()) else {
            return true;
        };
        let hidden_or_tool_dir = below.components().any(|c| match c {
            Component::Normal(name) => {
                let name = name.to_string_lossy();
                name.starts_with('.') || IGNORED_DIRS.contains(&&*name)
            }
            _ => false,
        });
        let name = below.to_string_lossy();
        !hidden_or_tool_dir && !IGNORED_ENDINGS.iter().any(|e| name.ends_with(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_files_and_the_data_dir_do_not_restart_the_app() {
        let filter = Filter {
            roots: vec![PathBuf::from("/home/u/.projects/app")],
            skip: Some(PathBuf::from("/home/u/.projects/app/data")),
        };
        let keeps = |p: &str| filter.keeps(Path::new(p));
        assert!(keeps("/home/u/.projects/app/app.py"));
        assert!(keeps("/home/u/.projects/app/pkg/cart.py"));
        assert!(!keeps("/home/u/.projects/app/data/db"));
        assert!(!keeps(
            "/home/u/.projects/app/pkg/__pycache__/cart.cpython-312.pyc"
        ));
        assert!(!keeps("/home/u/.projects/app/.git/index"));
        assert!(!keeps("/home/u/.projects/app/.app.py.swp"));
        assert!(!keeps("/home/u/.projects/app/app.py~"));
        assert!(!keeps("/home/u/.projects/app/node_modules/x/index.js"));
    }

    #[test]
    fn reads_are_not_changes() {
        use notify::event::{AccessMode, CreateKind, DataChange};
        assert!(!counts(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!counts(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(counts(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(counts(&EventKind::Create(CreateKind::File)));
        assert!(counts(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
    }
}
