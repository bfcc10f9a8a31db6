//! The command line: every subcommand and its flags, as clap parses them,
//! and the shell completion scripts generated from that definition.

use clap::{Parser, Subcommand};

use crate::{certs_cmd, cli, config, dev_cmd, injector, placement_cmd};

#[derive(Debug, Parser)]
#[command(
    name = "troupe",
    version,
    about = "Virtual actors next to your app",
    after_help = cli::AFTER_HELP
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the daemon.
    Serve(Box<config::ServeArgs>),
    /// Run a daemon and your app together, for development:
    /// `troupe dev -- python app.py`.
    Dev(Box<dev_cmd::DevArgs>),
    /// Call a method on an actor and print its result.
    Invoke {
        #[command(flatten)]
        to: cli::MethodRef,
        #[command(flatten)]
        call: cli::CallArgs,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Send a method call to an actor without waiting for it to run (a
    /// one-way tell); --durable stores it first.
    Tell {
        #[command(flatten)]
        to: cli::MethodRef,
        #[command(flatten)]
        call: cli::CallArgs,
        #[command(flatten)]
        delivery: cli::TellDelivery,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Read an actor's state, or repair keys of it.
    State {
        #[command(subcommand)]
        command: cli::StateCommand,
    },
    /// Inspect actors: list, describe, deactivate.
    Actors {
        #[command(subcommand)]
        command: ActorsCommand,
    },
    /// Durable tells that failed every attempt: list, show, re-drive, drop.
    DeadLetters {
        #[command(subcommand)]
        command: cli::DeadLettersCommand,
    },
    /// Inspect, set and delete durable reminders and alarms.
    Reminders {
        #[command(subcommand)]
        command: RemindersCommand,
    },
    /// Copy a running daemon's sled store to FILE: a backup as of one
    /// instant, taken while the daemon serves (writes go on meanwhile).
    Backup {
        /// The file to write; it must not exist yet. `-`: standard output,
        /// for a pipe (what it holds goes to standard error).
        file: std::path::PathBuf,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Write a backup (`troupe backup`) into an empty directory, for
    /// `troupe serve --data-dir DIR`. Needs no daemon.
    Restore {
        /// The backup file; `-`: standard input.
        file: std::path::PathBuf,
        /// The data directory to create; if it exists, it must be empty.
        #[arg(long, value_name = "DIR")]
        data_dir: std::path::PathBuf,
        /// Output: `table` for people, `json` for scripts.
        #[arg(short = 'o', long, default_value = "table")]
        output: cli::Output,
    },
    /// Work on a store with no daemon running on it: copy one into another.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Show the daemon: version, store, registered types, load, flush backlog.
    Status {
        /// Also list what needs attention (a failing store, a lapsed lease,
        /// load shedding, dead letters, a certificate near its end...) and
        /// exit 7 when there is anything.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Inspect the cluster: members, placement table, replicas.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Run the placement service (cluster membership, replicated with Raft).
    Placement {
        #[command(subcommand)]
        command: placement_cmd::PlacementCommand,
    },
    /// Run the Kubernetes admission webhook that adds the daemon as a
    /// sidecar to pods annotated `troupe.dev/enabled: "true"`.
    Injector(Box<injector::InjectorArgs>),
    /// Make development TLS certificates (a CA, and certificates it issues).
    Certs {
        #[command(subcommand)]
        command: certs_cmd::CertsCommand,
    },
    /// Print a shell completion script: `source <(troupe completion bash)`,
    /// or save it where the shell loads completions from (docs/cli.md).
    Completion {
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// The shells `troupe completion` writes scripts for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script for `shell`, generated from the command
/// line's own definition so it never lags a new flag.
pub(crate) fn completion(shell: Shell) -> anyhow::Result<()> {
    use clap::CommandFactory;
    use clap_complete::{generate, Shell as S};
    let shell = match shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
    };
    let mut script = Vec::new();
    generate(shell, &mut Cli::command(), "troupe", &mut script);
    cli::emit_bytes(&script)
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Members, table version and pending change, placement leader and
    /// replicas, heartbeat ages and active actors per daemon.
    Status {
        /// Also list what needs attention (no placement leader, a member
        /// that does not answer, and what each member's `status --check`
        /// finds) and exit 7 when there is anything.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        target: cli::ClusterTarget,
    },
    /// Active actors of every member daemon, with the node each lives on.
    Actors {
        #[arg(long = "type", value_name = "TYPE")]
        actor_type: Option<String>,
        #[command(flatten)]
        target: cli::ClusterTarget,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum RemindersCommand {
    /// List reminders and alarms with their next due time, schedule and
    /// attempts.
    List {
        /// Only those of actors of this type.
        #[arg(long = "type", value_name = "TYPE")]
        actor_type: Option<String>,
        /// Only those of this actor (with --type).
        #[arg(long = "id", value_name = "ID", requires = "actor_type")]
        actor_id: Option<String>,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Delete a reminder, or with --alarm the actor's alarm: it fires no
    /// more. One that is not there exits 4, naming those there are.
    Delete {
        #[command(flatten)]
        which: cli::Scheduled,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Set a reminder (every --every, on a --cron calendar, or once), or with
    /// --alarm the actor's alarm, and print it as `list` shows it. A
    /// reminder of that name is replaced.
    Set {
        #[command(flatten)]
        set: cli::ReminderSet,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Hold a reminder's firings, keeping its schedule, payload and counts,
    /// until `resume`; setting it again (as apps do) keeps it paused. Prints
    /// it as `list` shows it. One that is not there exits 4. With --all:
    /// every reminder of a type, an actor or a name.
    Pause {
        #[command(flatten)]
        which: cli::Paused,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Let a paused reminder fire again from the time it was due; if that
    /// passed, its missed-firings rule applies (once now, or with
    /// --skip-missed the next scheduled time). With --all: every paused
    /// reminder of a type, an actor or a name.
    Resume {
        #[command(flatten)]
        which: cli::Paused,
        #[command(flatten)]
        target: cli::Target,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Copy everything in one store (state, durable tells, dead letters,
    /// call records, reminders and alarms) into another, empty one: sled to
    /// PostgreSQL when one daemon becomes a cluster, or back. Stop the
    /// daemons on both first: a database daemons are connected to is
    /// refused.
    Copy {
        /// The store to copy: a daemon's --data-dir (sled) or a
        /// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE URL.
        #[arg(long, value_name = "DIR|URL")]
        from: String,
        /// The store to fill, in the same forms; it must hold nothing (a
        /// directory that does not exist yet is made).
        #[arg(long, value_name = "DIR|URL")]
        to: String,
        /// Copy from a PostgreSQL store that daemons still use: the copy
        /// holds the database as of its start, without what they write
        /// after it or hold unflushed (write-behind state). For a look at
        /// live data or a backup of the database, not a move.
        #[arg(long)]
        live_source: bool,
        /// Output: `table` for people, `json` for scripts.
        #[arg(short = 'o', long, default_value = "table")]
        output: cli::Output,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ActorsCommand {
    /// List active actors, or with --stored those of a type with stored state.
    List {
        #[arg(long = "type", value_name = "TYPE")]
        actor_type: Option<String>,
        /// List the actors of --type that have stored state, active or not.
        #[arg(long, requires = "actor_type")]
        stored: bool,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Describe one actor: where it lives, its activation, state and schedule.
    Get {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Print the events an actor publishes as they come (one line each;
    /// `-o json`: one JSON object per line), from now or after --after.
    /// Without ID, those of every actor of the type, on every daemon.
    /// Watching does not activate the actor.
    Watch {
        #[command(flatten)]
        args: cli::WatchArgs,
        #[command(flatten)]
        target: cli::Target,
    },
    /// End an actor's activation now (its state is flushed first).
    Deactivate {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Erase everything stored for an actor: state, inbox, dead letters,
    /// call records, reminders and alarm (its activation ends first; calls
    /// that arrive meanwhile wait, then find it empty). Needs --yes.
    Purge {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        /// Confirm: there is no undo but a backup.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        target: cli::Target,
    },
}

#[cfg(test)]
mod tests {
    /// Every subcommand's arguments, global ones included, fit together
    /// (clap checks this only when a command is parsed, so a clash between
    /// a global flag and one command's argument would otherwise surface as
    /// a panic in that command alone).
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// A daemon in a container or a unit file is configured through its
    /// environment: every `serve` flag reads TROUPE_ and its name
    /// (`--idle-timeout`: TROUPE_IDLE_TIMEOUT), as docs/cli.md says. The
    /// OTLP endpoint keeps OpenTelemetry's own variable.
    #[test]
    fn every_serve_flag_has_its_environment_variable() {
        use clap::CommandFactory;
        let cli = super::Cli::command();
        let serve = cli.find_subcommand("serve");
        assert!(serve.is_some(), "no serve subcommand");
        let flags = serve.into_iter().flat_map(|s| s.get_arguments());
        let mut checked = 0;
        for arg in flags.filter(|a| a.get_id() != "help") {
            let long = arg.get_long().unwrap_or_default();
            let wanted = match long {
                "otlp-endpoint" => "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                _ => format!("TROUPE_{}", long.to_uppercase().replace('-', "_")),
            };
            let env = arg.get_env().and_then(|e| e.to_str());
            assert_eq!(env, Some(wanted.as_str()), "serve --{long}");
            checked += 1;
        }
        assert!(checked > 30, "only {checked} serve flags seen");
    }
}
