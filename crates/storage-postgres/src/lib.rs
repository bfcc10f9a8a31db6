//! The shared store (`--store postgres://...`): actor state and reminders in
//! PostgreSQL, so several daemons serve the same actors. Each batch is one
//! statement in one transaction; every operation is bounded in time.

mod reminders;
mod state;

pub use state::PostgresStore;
