//! The embedded store, the default under `--data-dir`: actor state and
//! reminders in one sled database, each batch one atomic `apply_batch` plus
//! an fsync.

mod keys;
mod reminders;
mod state;

pub use reminders::SledReminders;
pub use state::SledStore;
