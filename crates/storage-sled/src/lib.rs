//! The embedded store, the default under `--data-dir`: actor state,
//! inboxes, call records and reminders in one sled database. A flush writes
//! each actor's keys atomically and ends in one fsync (`actor_write`);
//! reminder batches likewise write each reminder atomically
//! (`reminders::write`); an actor's purge removes all of it but its
//! reminders in one batch (`purge`). The database is re-opened after an
//! I/O error (`db`), so a store that failed (a full disk) recovers by
//! itself once the file system does. A backup reads it whole as of one
//! instant while writes go on, logging those made during the read, and a
//! restore writes one into an empty directory (`backup`).
//!
//! Owner epochs (fencing) are accepted and not checked: sled locks its
//! directory, so one daemon holds the database, and the daemon refuses to
//! join a cluster on it (state would not follow actors between daemons).
//! There is never another owner to fence.

mod actor_write;
mod backup;
mod db;
mod inbox;
mod keys;
mod purge;
mod records;
mod reminders;
mod state;
mod stored_actors;

pub use backup::{restore, BackupError, BackupSummary, TakenBackup};
pub use db::ReopenError;
pub use reminders::SledReminders;
pub use state::{SledStore, DEFAULT_CACHE_BYTES};
