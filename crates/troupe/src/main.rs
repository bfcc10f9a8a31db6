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
mod command_line;
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
mod serve_end;
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

use clap::Parser;

use command_line::{
    completion, ActorsCommand, Cli, ClusterCommand, Command, RemindersCommand, StoreCommand,
};

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
            ActorsCommand::Watch { args, target } => cli::actors_watch(&target, args).await,
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
