//! `troupe state`: its subcommands, and which module serves each (`get` is
//! `state_get`, `set` and `delete` are `state_edit`, `edit` is
//! `state_in_editor`).

use super::state_edit::{state_delete, state_set, ExpectedValue, StateExpect, StateValue};
use super::state_get::state_get;
use super::state_in_editor::state_in_editor;
use super::Target;

#[derive(Debug, clap::Subcommand)]
pub enum StateCommand {
    /// Print an actor's state (all keys, or one; a missing key exits 4).
    Get {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        key: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Set one state key of an actor, as an operator's repair. The actor's
    /// activation ends first; its next one loads the new value.
    Set {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        key: String,
        #[command(flatten)]
        value: StateValue,
        #[command(flatten)]
        expect: StateExpect,
        /// The key expires this long after the edit (at least a second); 0
        /// makes it never expire. Left out, it keeps the expiry it has
        /// (docs/state.md).
        #[arg(long, value_name = "DURATION", value_parser = crate::duration::flag)]
        ttl: Option<std::time::Duration>,
        #[command(flatten)]
        target: Target,
    },
    /// Open one state key's value in $VISUAL/$EDITOR, then write it back
    /// if the key still holds what was opened.
    Edit {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        key: String,
        /// The saved key expires this long after the edit (at least a
        /// second); 0 makes it never expire. Left out, it keeps the expiry
        /// it has. Given, a value saved unchanged is written back too.
        #[arg(long, value_name = "DURATION", value_parser = crate::duration::flag)]
        ttl: Option<std::time::Duration>,
        #[command(flatten)]
        target: Target,
    },
    /// Delete state keys of an actor, all or none (a key it lacks is no
    /// error). The actor's activation ends first. --if-value/--if-base64
    /// check one key only.
    Delete {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        #[command(flatten)]
        expect: ExpectedValue,
        #[command(flatten)]
        target: Target,
    },
}

pub async fn run(command: StateCommand) -> anyhow::Result<()> {
    match command {
        StateCommand::Get {
            actor_type,
            id,
            key,
            target,
        } => state_get(&target, actor_type, id, key).await,
        StateCommand::Set {
            actor_type,
            id,
            key,
            value,
            expect,
            ttl,
            target,
        } => state_set(&target, actor_type, id, key, value, expect, ttl).await,
        StateCommand::Edit {
            actor_type,
            id,
            key,
            ttl,
            target,
        } => state_in_editor(&target, actor_type, id, key, ttl).await,
        StateCommand::Delete {
            actor_type,
            id,
            keys,
            expect,
            target,
        } => state_delete(&target, actor_type, id, keys, expect).await,
    }
}
