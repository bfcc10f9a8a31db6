//! The shared store (`--store postgres://...`): actor state and reminders in
//! PostgreSQL, so several daemons serve the same actors. Each batch is one
//! transaction; every operation is bounded in time; writes are fenced by
//! owner epochs (`troupe_actor_epochs`), checked in the same transaction.
//!
//! - `store`: the database handle (pool, migrations, bounds, error text).
//! - `state`: `StateStore` (actor state, claims, fenced batches).
//! - `reminders`: `ReminderStore`.
//! - `inbox`: actor inboxes and dead letters, written in the state batch's
//!   transaction.
//! - `records`: call records (idempotency keys' answers), likewise.
//! - `purge`: an actor's erasure (all but its reminders and epoch), fenced,
//!   in one transaction.
//! - `export`: a page of actors read out whole, for a copy of the store.
//! - `sessions`: the connections daemons hold, for the offline tools.
//! - `snapshot`: the database as of one instant, for a copy out of it.
//! - `size`: what troupe's tables take, for status output and metrics.
//! - `batch_sql`: a flush batch (state, fencing, inbox, records) as one
//!   statement.

mod batch_sql;
mod export;
mod inbox;
mod purge;
mod records;
mod reminders;
mod sessions;
mod size;
mod snapshot;
mod state;
mod store;
mod stored_actors;

pub use store::PostgresStore;

#[cfg(test)]
mod tests;
