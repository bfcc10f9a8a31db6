//! The replica list: every replica's id and address, from `--peers` (fixed
//! for the process's life) or from `--peers-file` (re-read every reconcile
//! round, so the Raft membership follows a Kubernetes ConfigMap without
//! restarting any replica).
//!
//! One [`Peers`] handle is shared by everything that needs an address for a
//! replica id: the leader's reconciler (the list it moves the membership
//! toward), the Raft network (where to send a node's RPCs), forwarding to
//! the leader and ClusterStatus. Each asks for the current list when it needs
//! it, so a reload reaches all of them at once; the Raft membership's own
//! record of an address is the fallback for a replica the list lacks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// Replica id → host:port of its gRPC API.
pub type PeerMap = BTreeMap<u64, String>;

/// Why a peers list does not parse; each names the entry at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeersError {
    #[error("{entry:?} is not ID=HOST:PORT (e.g. 1=127.0.0.1:7471)")]
    NotAnEntry { entry: String },
    #[error("replica id {id:?} in {entry:?} is not a positive integer")]
    BadId { id: String, entry: String },
    #[error("address {addr:?} of replica {id} is not HOST:PORT")]
    BadAddress { id: u64, addr: String },
    #[error("replica id {id} appears twice")]
    Duplicate { id: u64 },
    #[error("the list is empty; give every replica as ID=HOST:PORT")]
    Empty,
}

/// Why a peers file could not be used. The cause is a typed field but not
/// the error's `source`: the message already says it, and a report that
/// walks the chain would say it twice.
#[derive(Debug, thiserror::Error)]
pub enum PeersFileError {
    #[error("cannot read the peers file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the peers file {} is not a peers list: {error}", path.display())]
    Parse { path: PathBuf, error: PeersError },
}

/// Parses `ID=HOST:PORT` entries separated by commas or newlines; `#` starts
/// a comment that runs to the end of its line (a ConfigMap can say what the
/// list is for).
pub fn parse(text: &str) -> Result<PeerMap, PeersError> {
    let mut peers = PeerMap::new();
    let entries = text
        .lines()
        .map(|line| line.split_once('#').map_or(line, |(before, _)| before))
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty());
    for entry in entries {
        let (id, addr) = entry
            .split_once('=')
            .ok_or_else(|| PeersError::NotAnEntry {
                entry: entry.to_owned(),
            })?;
        let id: u64 = id.trim().parse().map_err(|_| PeersError::BadId {
            id: id.trim().to_owned(),
            entry: entry.to_owned(),
        })?;
        let addr = addr.trim();
        if addr
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(PeersError::BadAddress {
                id,
                addr: addr.to_owned(),
            });
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(PeersError::Duplicate { id });
        }
    }
    if peers.is_empty() {
        return Err(PeersError::Empty);
    }
    Ok(peers)
}

/// Reads and parses a peers file.
pub fn read_file(path: &Path) -> Result<PeerMap, PeersFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| PeersFileError::Read {
        path: path.to_owned(),
        error,
    })?;
    parse(&text).map_err(|error| PeersFileError::Parse {
        path: path.to_owned(),
        error,
    })
}

/// The current replica list; cheap to clone, shared by every user.
#[derive(Debug, Clone)]
pub struct Peers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// This replica's id, to notice when the file stops listing it.
    id: u64,
    list: RwLock<Arc<PeerMap>>,
    /// `None`: `--peers`, never reloaded.
    file: Option<PathBuf>,
    /// What was last logged about the file, so a broken file or this
    /// replica's absence is logged once per change, not every round.
    reported: Mutex<Reported>,
}

#[derive(Debug, Default)]
struct Reported {
    error: Option<String>,
    absent: bool,
}

impl Peers {
    /// A list that never changes (`--peers`, or a single replica).
    pub fn fixed(id: u64, list: PeerMap) -> Self {
        Self::new(id, list, None)
    }

    /// A list read from `path`, `initial` being its contents at start; see
    /// [`Peers::reload`].
    pub fn from_file(id: u64, path: PathBuf, initial: PeerMap) -> Self {
        let peers = Self::new(id, initial, Some(path));
        peers.note_membership(&peers.current());
        peers
    }

    fn new(id: u64, list: PeerMap, file: Option<PathBuf>) -> Self {
        Peers {
            inner: Arc::new(Inner {
                id,
                list: RwLock::new(Arc::new(list)),
                file,
                reported: Mutex::new(Reported::default()),
            }),
        }
    }

    /// The list now.
    pub fn current(&self) -> Arc<PeerMap> {
        // Writers swap an Arc; a poisoned lock still holds a whole list.
        self.inner
            .list
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replica `id`'s address in the list now.
    pub fn address(&self, id: u64) -> Option<String> {
        self.current().get(&id).cloned()
    }

    /// The file the list follows, if any.
    pub fn file(&self) -> Option<&Path> {
        self.inner.file.as_deref()
    }

    /// Re-reads the file (a no-op for a fixed list); whether the list
    /// changed. A file that cannot be read or parsed keeps the last good
    /// list: a half-written or deleted file must not shrink the group.
    pub fn reload(&self) -> bool {
        let Some(path) = &self.inner.file else {
            return false;
        };
        let read = read_file(path);
        let mut reported = self
            .inner
            .reported
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let list = match read {
            Ok(list) => {
                if reported.error.take().is_some() {
                    tracing::info!(path = %path.display(), "placement peers file readable again");
                }
                list
            }
            Err(e) => {
                let message = e.to_string();
                if reported.error.as_ref() != Some(&message) {
                    tracing::warn!(
                        path = %path.display(),
                        error = %message,
                        kept = ?self.current(),
                        "placement peers file unusable; keeping the last good list. Fix the \
                         file (ID=HOST:PORT entries, comma- or newline-separated, # comments)"
                    );
                    reported.error = Some(message);
                }
                return false;
            }
        };
        drop(reported);
        if *self.current() == list {
            return false;
        }
        tracing::info!(path = %path.display(), peers = ?list, "placement peers file changed");
        self.note_membership(&list);
        *self.inner.list.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(list);
        true
    }

    /// Logs once when the file stops (or starts again) listing this replica.
    fn note_membership(&self, list: &PeerMap) {
        let absent = !list.contains_key(&self.inner.id);
        let mut reported = self
            .inner
            .reported
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if absent && !reported.absent {
            tracing::warn!(
                id = self.inner.id,
                path = %self.file().map(Path::display).map(|d| d.to_string()).unwrap_or_default(),
                "this placement replica is not in the peers file: it is being scaled away. It \
                 keeps serving until it is stopped; the leader removes it from the Raft group \
                 once it has stopped"
            );
        } else if !absent && reported.absent {
            tracing::info!(
                id = self.inner.id,
                "this placement replica is in the peers file again"
            );
        }
        reported.absent = absent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(u64, &str)]) -> PeerMap {
        entries.iter().map(|(i, a)| (*i, (*a).to_owned())).collect()
    }

    #[test]
    fn commas_lines_and_comments_parse_alike() {
        let expected = map(&[(1, "127.0.0.1:1"), (2, "localhost:2"), (3, "h.ns.svc:3")]);
        assert_eq!(
            parse("1=127.0.0.1:1, 2=localhost:2,3=h.ns.svc:3"),
            Ok(expected.clone())
        );
        let lines = "# the replicas\n1=127.0.0.1:1\n\n  2=localhost:2  # second\n3=h.ns.svc:3,\n";
        assert_eq!(parse(lines), Ok(expected.clone()));
        assert_eq!(
            parse("1=127.0.0.1:1\r\n2=localhost:2\r\n3=h.ns.svc:3"),
            Ok(expected)
        );
    }

    #[test]
    fn bad_lists_name_the_entry() {
        assert!(matches!(
            parse("1=127.0.0.1"),
            Err(PeersError::BadAddress { id: 1, .. })
        ));
        assert!(matches!(parse("1=:7"), Err(PeersError::BadAddress { .. })));
        assert!(matches!(
            parse("x=127.0.0.1:1"),
            Err(PeersError::BadId { .. })
        ));
        assert!(matches!(
            parse("127.0.0.1:1"),
            Err(PeersError::NotAnEntry { .. })
        ));
        assert_eq!(parse("1=a:1\n1=b:2"), Err(PeersError::Duplicate { id: 1 }));
        assert_eq!(parse(""), Err(PeersError::Empty));
        assert_eq!(parse("# nothing yet\n\n"), Err(PeersError::Empty));
    }

    #[test]
    fn a_fixed_list_never_reloads() {
        let peers = Peers::fixed(1, map(&[(1, "a:1")]));
        assert!(!peers.reload());
        assert_eq!(peers.address(1).as_deref(), Some("a:1"));
        assert_eq!(peers.file(), None);
    }

    #[test]
    fn the_file_is_followed_and_a_broken_one_keeps_the_last_good_list(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("peers");
        std::fs::write(&path, "1=a:1,2=b:2,3=c:3")?;
        let initial = read_file(&path)?;
        let peers = Peers::from_file(1, path.clone(), initial);
        assert!(!peers.reload(), "an unchanged file is no change");

        std::fs::write(&path, "1=a:1\n2=b:2\n3=c:3\n4=d:4\n5=e:5\n")?;
        assert!(peers.reload());
        assert_eq!(peers.current().len(), 5);
        assert!(!peers.reload());

        // Half-written, emptied, deleted: the 5-list stays.
        for broken in ["1=a:1\n2=b", "", "# soon\n"] {
            std::fs::write(&path, broken)?;
            assert!(!peers.reload(), "{broken:?} replaced the list");
            assert_eq!(peers.current().len(), 5, "{broken:?}");
        }
        std::fs::remove_file(&path)?;
        assert!(!peers.reload());
        assert_eq!(peers.address(5).as_deref(), Some("e:5"));

        // Back, without this replica (it is being scaled away): followed.
        std::fs::write(&path, "2=b:2,3=c:3,4=d:4")?;
        assert!(peers.reload());
        assert_eq!(peers.address(1), None);
        // An address that moved is followed too.
        std::fs::write(&path, "2=b:2,3=c:30,4=d:4")?;
        assert!(peers.reload());
        assert_eq!(peers.address(3).as_deref(), Some("c:30"));
        Ok(())
    }

    #[test]
    fn file_errors_name_the_path() {
        let path = PathBuf::from("/nonexistent/troupe/peers");
        let message = match read_file(&path) {
            Ok(list) => panic!("read {list:?}"),
            Err(e) => e.to_string(),
        };
        assert!(message.contains("/nonexistent/troupe/peers"), "{message}");
    }
}
