//! The `troupe` binary: the daemon (`troupe serve`) and the client commands
//! that inspect and call it. It composes runtime, placement, transport and
//! storage; nothing depends on it.

mod admin_api;
mod app_api;
mod cli;
mod client_api;
mod config;
mod convert;
mod schedule;
mod server;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "troupe", version, about = "Virtual actors next to your app")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon.
    Serve(config::ServeArgs),
    /// Call a method on an actor and print the result.
    Invoke {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        method: String,
        /// Arguments as JSON, e.g. '{"kwargs": {"by": 5}}'.
        #[arg(long)]
        data: Option<String>,
        #[command(flatten)]
        target: cli::Target,
    },
    /// Read actor state.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Inspect active actors.
    Actors {
        #[command(subcommand)]
        command: ActorsCommand,
    },
    /// Inspect durable reminders and alarms.
    Reminders {
        #[command(subcommand)]
        command: RemindersCommand,
    },
    /// Show the daemon's status.
    Status {
        #[command(flatten)]
        target: cli::Target,
    },
}

#[derive(Debug, Subcommand)]
enum StateCommand {
    /// Print an actor's state (all keys, or one).
    Get {
        #[arg(value_name = "TYPE")]
        actor_type: String,
        id: String,
        key: Option<String>,
        #[command(flatten)]
        target: cli::Target,
    },
}

#[derive(Debug, Subcommand)]
enum RemindersCommand {
    /// List reminders and alarms with their next due time, period and attempts.
    List {
        #[arg(long = "type", value_name = "TYPE")]
        actor_type: Option<String>,
        #[arg(long = "id", value_name = "ID", requires = "actor_type")]
        actor_id: Option<String>,
        #[command(flatten)]
        target: cli::Target,
    },
}

#[derive(Debug, Subcommand)]
enum ActorsCommand {
    /// List active actors.
    List {
        #[arg(long = "type", value_name = "TYPE")]
        actor_type: Option<String>,
        #[command(flatten)]
        target: cli::Target,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let is_serve = matches!(cli.command, Command::Serve(_));
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new(if is_serve { "info" } else { "warn" })),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => server::serve(args.resolve()?).await,
        Command::Invoke {
            actor_type,
            id,
            method,
            data,
            target,
        } => cli::invoke(&target, actor_type, id, method, data).await,
        Command::State {
            command:
                StateCommand::Get {
                    actor_type,
                    id,
                    key,
                    target,
                },
        } => cli::state_get(&target, actor_type, id, key).await,
        Command::Actors {
            command: ActorsCommand::List { actor_type, target },
        } => cli::actors_list(&target, actor_type).await,
        Command::Status { target } => cli::status(&target).await,
        Command::Reminders {
            command:
                RemindersCommand::List {
                    actor_type,
                    actor_id,
                    target,
                },
        } => cli::reminders_list(&target, actor_type, actor_id).await,
    }
}
