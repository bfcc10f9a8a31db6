//! The `troupe` binary: the daemon (`troupe serve`) and the client commands
//! that inspect and call it. It composes runtime, placement, transport and
//! storage; nothing depends on it.

mod admin_api;
mod app_api;
mod auth;
mod call_deadline;
mod cert_metrics;
mod certs_cmd;
mod cli;
mod client_api;
mod config;
mod convert;
mod daemon_metrics;
mod dev_cmd;
mod duration;
mod failpoint;
mod forwarder;
mod health_listen;
mod https;
mod injector;
mod link_api;
mod link_metrics;
mod membership;
mod memory_watch;
mod metrics_http;
mod placement_cmd;
mod placement_metrics;
mod process_stats;
mod readiness;
mod server;
mod shell_word;
mod store_metrics;
mod telemetry;
mod unix_listen;

use std::process::ExitCode;

/// jemalloc, with a background thread that gives freed memory back to the
/// system within about a second: glibc's malloc (and mimalloc, whose
/// per-thread heaps keep what their thread freed) held on to the memory of
/// 200k actors long after they idled out. `bench/idle_out.sh` measures it.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read at start: purge freed pages after 1 s, in
/// the background (`MALLOC_CONF` in the environment still overrides them).
/// `oversize_threshold:0` keeps allocations of 8 MiB and more (large
/// payloads and the buffers that carry them) under that same decay: by
/// default jemalloc gives them back at once, and a daemon echoing 8 MiB
/// calls at 100 MB/s then spent a third of its CPU faulting fresh pages in
/// (`bench/transport.sh`, 8 MiB x 16: both daemons 1.2 -> 0.7 cores, link
/// 77 -> 85 %).
// jemalloc reads this symbol by name (its documented way of configuring
// itself before the first allocation); nothing else defines it.
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals, unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,oversize_threshold:0\0";

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "troupe",
    version,
    about = "Virtual actors next to your app",
    after_help = cli::AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script for `shell`, generated from the command
/// line's own definition so it never lags a new flag.
fn completion(shell: Shell) -> anyhow::Result<()> {
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
enum ClusterCommand {
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
enum RemindersCommand {
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
enum StoreCommand {
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
enum ActorsCommand {
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
    /// Watching does not activate the actor.
    Watch {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        /// Resume after this event's cursor (from an earlier watch's
        /// output): the events since that the daemon still holds come first.
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// Stop after this many events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` is resolved before the async runtime exists: its settings
    // size that runtime.
    let serve = match &cli.command {
        Command::Serve(args) => match args.resolve() {
            Ok(config) => Some(config),
            Err(e) => {
                cli::tell_user(format_args!("error: {e:#}\n"));
                return cli::exit_code(&e);
            }
        },
        _ => None,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(config) = &serve {
        builder.worker_threads(config.threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            cli::tell_user(format_args!("error: cannot start the async runtime: {e}\n"));
            return ExitCode::FAILURE;
        }
    };
    let (default_filter, (format, export)) = match &cli.command {
        Command::Serve(args) => ("info", args.logging()),
        // A server too: its membership changes and elections belong in its log.
        Command::Placement { command } => ("info", (command.log_format(), None)),
        Command::Injector(args) => ("info", (args.log_format(), None)),
        _ => ("warn", Default::default()),
    };
    // Inside the runtime: trace export keeps its channel and batch task there.
    let logging = {
        let _entered = runtime.enter();
        telemetry::init(default_filter, format, export.as_ref())
    };
    if let Err(e) = logging {
        cli::tell_user(format_args!("error: {e:#}\n"));
        return ExitCode::FAILURE;
    }
    match runtime.block_on(run(cli.command, serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cli::tell_user(format_args!("error: {e:#}\n"));
            cli::exit_code(&e)
        }
    }
}

async fn run(command: Command, serve: Option<config::ServeConfig>) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => match serve {
            Some(config) => server::serve(config).await,
            None => server::serve(args.resolve()?).await,
        },
        Command::Dev(args) => dev_cmd::run(*args).await,
        Command::Invoke { to, call, target } => cli::invoke(&target, to, call).await,
        Command::Backup { file, target } => cli::backup(&target, file).await,
        Command::Restore {
            file,
            data_dir,
            output,
        } => cli::restore(file, data_dir, output).await,
        Command::Store {
            command:
                StoreCommand::Copy {
                    from,
                    to,
                    live_source,
                    output,
                },
        } => cli::store_copy(from, to, live_source, output).await,
        Command::Tell {
            to,
            call,
            delivery,
            target,
        } => cli::tell(&target, to, call, delivery).await,
        Command::State { command } => cli::state(command).await,
        Command::Actors { command } => match command {
            ActorsCommand::List {
                actor_type,
                stored,
                target,
            } => cli::actors_list(&target, actor_type, stored).await,
            ActorsCommand::Get {
                actor_type,
                id,
                target,
            } => cli::actors_get(&target, actor_type, id).await,
            ActorsCommand::Watch {
                actor_type,
                id,
                after,
                count,
                target,
            } => cli::actors_watch(&target, actor_type, id, after, count).await,
            ActorsCommand::Deactivate {
                actor_type,
                id,
                target,
            } => cli::actors_deactivate(&target, actor_type, id).await,
            ActorsCommand::Purge {
                actor_type,
                id,
                yes,
                target,
            } => cli::actors_purge(&target, actor_type, id, yes).await,
        },
        Command::DeadLetters { command } => cli::dead_letters(command).await,
        Command::Status { check, target } => cli::status(&target, check).await,
        Command::Cluster { command } => match command {
            ClusterCommand::Status { check, target } => cli::cluster_status(&target, check).await,
            ClusterCommand::Actors { actor_type, target } => {
                cli::cluster_actors(&target, actor_type).await
            }
        },
        Command::Placement { command } => placement_cmd::run(command).await,
        Command::Injector(args) => injector::run(*args).await,
        Command::Certs { command } => certs_cmd::run(command),
        Command::Completion { shell } => completion(shell),
        Command::Reminders {
            command:
                RemindersCommand::List {
                    actor_type,
                    actor_id,
                    target,
                },
        } => cli::reminders_list(&target, actor_type, actor_id).await,
        Command::Reminders {
            command: RemindersCommand::Delete { which, target },
        } => cli::reminders_delete(&target, which).await,
        Command::Reminders {
            command: RemindersCommand::Set { set, target },
        } => cli::reminders_set(&target, set).await,
        Command::Reminders {
            command: RemindersCommand::Pause { which, target },
        } => cli::reminders_pause(&target, which, true).await,
        Command::Reminders {
            command: RemindersCommand::Resume { which, target },
        } => cli::reminders_pause(&target, which, false).await,
    }
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
