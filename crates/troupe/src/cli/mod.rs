//! Client commands of the `troupe` binary: talk to a running daemon.
//!
//! `docs/cli.md` is the reference for users: every command's table and JSON
//! output and the exit codes. Each command fetches, renders into a string,
//! then prints once, so rendering stays free of I/O and a closed pipe
//! (`troupe actors list | head`) is not an error.

mod actors;
mod actors_get;
mod actors_watch;
mod backup;
mod calls;
mod cluster;
mod cluster_actors;
mod dead_letters;
mod dead_letters_bulk;
mod failure;
mod json_arg;
mod links;
mod purge;
mod reminders;
mod reminders_pause;
mod reminders_set;
pub(crate) mod render;
mod state;
mod state_edit;
mod state_get;
mod state_in_editor;
mod status;
mod store_copy;
mod tls;
mod type_hint;

use std::fmt;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::auth::BearerToken;

pub use actors::{actors_deactivate, actors_list};
pub use actors_get::actors_get;
pub use actors_watch::{actors_watch, WatchArgs};
pub use backup::{backup, restore};
pub use calls::{invoke, tell, CallArgs, MethodRef, TellDelivery};
pub use cluster::{cluster_status, ClusterTarget};
pub use cluster_actors::cluster_actors;
pub use dead_letters::run as dead_letters;
pub use dead_letters::DeadLettersCommand;
pub use purge::actors_purge;
pub use reminders::{reminders_delete, reminders_list, Scheduled};
pub use reminders_pause::{reminders_pause, Paused};
pub use reminders_set::{reminders_set, ReminderSet};
pub use state::{run as state, StateCommand};
pub use status::status;
pub use store_copy::store_copy;

/// Shown after `troupe --help`; docs/cli.md says the same at more length.
pub const AFTER_HELP: &str = "\
Client commands talk to the daemon at --addr (or TROUPE_ADDR, default 127.0.0.1:7420),
sending the token in TROUPE_API_TOKEN when the daemon requires one.
Add -o json for output scripts can parse; docs/cli.md describes every field.

Exit codes:
  0  success
  1  any other error (e.g. writing the output failed)
  2  bad input: wrong arguments, --data that is not JSON, INVALID_ARGUMENT from the daemon,
     or an actor refusing the call's arguments (they do not fit the method)
  3  the daemon is unreachable (not running, wrong --addr, connection lost)
  4  not found: unknown actor type or method, no such actor, state key, reminder or
     dead letter
  5  the actor raised an error (invoke)
  6  the daemon refused or failed the request (UNAVAILABLE, RESOURCE_EXHAUSTED,
     no answer within --timeout, ...)
  7  status --check or cluster status --check found a problem (listed in its output)";

/// How long a client command waits to connect before calling the daemon
/// unreachable: long enough for a busy host, short enough for a person.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the daemon is, for client commands.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Daemon address (host:port or http://host:port).
    #[arg(long, env = "TROUPE_ADDR", default_value = crate::config::DEFAULT_LISTEN, global = true)]
    pub addr: String,
    /// Output: `table` for people, `json` for scripts.
    #[arg(short = 'o', long, default_value = "table", global = true)]
    pub output: Output,
    #[command(flatten)]
    pub tls: tls::TlsClient,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// The exit codes scripts can rely on (see [`AFTER_HELP`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Other = 1,
    Usage = 2,
    Unreachable = 3,
    NotFound = 4,
    ActorError = 5,
    Daemon = 6,
    Problems = 7,
}

/// An error of a client command, carrying its exit code. The message is
/// complete: what went wrong and, where it helps, what to do.
#[derive(Debug)]
pub struct CliError {
    exit: Exit,
    message: String,
}

/// An error with its exit code, as commands return it.
pub(crate) fn fail(exit: Exit, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(CliError {
        exit,
        message: message.into(),
    })
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The process exit code for an error of any command: a client command's
/// own code, 1 for everything else (including `troupe serve`).
pub fn exit_code(error: &anyhow::Error) -> ExitCode {
    ExitCode::from(exit_of(error) as u8)
}

/// The exit code `error` carries: a client command's own, else `Other`.
pub(super) fn exit_of(error: &anyhow::Error) -> Exit {
    error
        .chain()
        .find_map(|e| e.downcast_ref::<CliError>())
        .map_or(Exit::Other, |e| e.exit)
}

/// A daemon's `--listen-unix` socket (`--addr unix:/path`), which serves
/// without TLS.
async fn connect_unix(target: &Target, addr: &str, path: &str) -> anyhow::Result<Daemon> {
    if target.tls.tls_ca.is_some() {
        return Err(fail(
            Exit::Usage,
            format!(
                "--addr {addr} is a daemon's Unix socket, which serves without TLS: drop the TLS \
                 options (or TROUPE_TLS_CA) or give its host:port"
            ),
        ));
    }
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_with_connector(troupe_coalesce::UnixConnector::new(path))
        .await
        .map_err(|e| {
            fail(
                Exit::Unreachable,
                format!(
                    "cannot reach the troupe daemon at {addr} ({}): is `troupe serve \
                     --listen-unix {path}` running, and may this user open the socket?",
                    root_cause(&e)
                ),
            )
        })?;
    Ok(Daemon {
        channel: InterceptedService::new(channel, api_token()?),
        addr: addr.to_owned(),
    })
}

/// A connection to a daemon that sends the API token with every call.
type Authed = InterceptedService<Channel, BearerToken>;

/// A connection to the daemon, remembering its address for messages.
#[derive(Debug, Clone)]
struct Daemon {
    channel: Authed,
    addr: String,
}

/// The largest answer a command reads: a state, result or edit carries
/// values up to the daemon's --max-payload-bytes, which may be raised well
/// past gRPC's default 4 MiB.
const RESPONSE_LIMIT: usize = 1024 * 1024 * 1024;

/// The daemon's admin API, as every command calls it.
type Admin = troupe_proto::v1::admin_client::AdminClient<Authed>;

impl Daemon {
    fn admin(&self) -> Admin {
        troupe_proto::v1::admin_client::AdminClient::new(self.channel.clone())
            .max_decoding_message_size(RESPONSE_LIMIT)
    }

    fn actor_client(&self) -> troupe_proto::v1::actor_client_client::ActorClientClient<Authed> {
        troupe_proto::v1::actor_client_client::ActorClientClient::new(self.channel.clone())
            .max_decoding_message_size(RESPONSE_LIMIT)
    }
}

/// The token in TROUPE_API_TOKEN (the first, if it lists several), to send.
fn api_token() -> anyhow::Result<BearerToken> {
    BearerToken::api_from_env().map_err(|e| fail(Exit::Usage, e.to_string()))
}

async fn connect(target: &Target) -> anyhow::Result<Daemon> {
    let addr = target.addr.trim();
    if let Some(path) = troupe_coalesce::unix_socket_path(addr) {
        return connect_unix(target, addr, path).await;
    }
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    let endpoint = Endpoint::from_shared(uri).map_err(|e| {
        fail(
            Exit::Usage,
            format!(
                "--addr {addr:?} is not a daemon address ({e}); give host:port, e.g. {}",
                crate::config::DEFAULT_LISTEN
            ),
        )
    })?;
    let host_port = addr.rsplit("://").next().unwrap_or(addr);
    let connector = target.tls.to_daemon()?;
    if connector.is_none() && tls::speaks_tls(host_port).await {
        return Err(fail(
            Exit::Unreachable,
            format!(
                "the troupe daemon at {addr} has TLS on and this command does not: give the CA \
                 its certificate chains to with --tls-ca or TROUPE_TLS_CA"
            ),
        ));
    }
    let channel = tls::connect(
        endpoint.connect_timeout(CONNECT_TIMEOUT),
        connector.as_ref(),
    )
    .await
    .map_err(|e| {
        fail(
            Exit::Unreachable,
            format!(
                "cannot reach the troupe daemon at {addr} ({})\n  {}",
                root_cause(&e),
                unreachable_hint(addr)
            ),
        )
    })?;
    Ok(Daemon {
        channel: InterceptedService::new(channel, api_token()?),
        addr: addr.to_owned(),
    })
}

/// What to do when nothing answers at `addr`, as commands that work when
/// pasted: an address without a port went to port 80 (the URL default), so
/// the likely fix is the port, not starting a daemon there.
fn unreachable_hint(addr: &str) -> String {
    let host_port = addr
        .rsplit("://")
        .next()
        .unwrap_or(addr)
        .trim_end_matches('/');
    let port = host_port
        .rsplit_once(':')
        .filter(|(host, _)| !host.ends_with(':') && (!host.starts_with('[') || host.ends_with(']')))
        .and_then(|(_, port)| port.parse::<u16>().ok());
    // `--listen` takes an IP address, not a name.
    let listen = |port: u16| match host_port.parse::<std::net::SocketAddr>() {
        Ok(a) => a.to_string(),
        Err(_) => format!("127.0.0.1:{port}"),
    };
    match port {
        Some(port) => format!(
            "start it with `troupe serve --listen {}`, or point --addr / TROUPE_ADDR at the \
             address a running daemon printed (\"troupe listening on ...\")",
            listen(port)
        ),
        None => {
            let with_port = format!("{host_port}:{DEFAULT_PORT}");
            format!(
                "{addr:?} has no port, so port 80 was tried; a daemon listens on {DEFAULT_PORT} \
                 unless told otherwise: use --addr {with_port} (or TROUPE_ADDR={with_port}), \
                 and start one there with `troupe serve --listen 127.0.0.1:{DEFAULT_PORT}`"
            )
        }
    }
}

/// The port of [`crate::config::DEFAULT_LISTEN`].
const DEFAULT_PORT: u16 = 7420;

/// The innermost cause: "Connection refused (os error 111)" says more than
/// tonic's "transport error" wrapped around it.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

/// Prints a command's whole output. A reader that went away early (a pipe
/// into `head`) has what it wanted: that is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    emit_bytes(text.as_bytes())
}

/// [`emit`] for output that is already bytes.
pub fn emit_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(fail(Exit::Other, format!("cannot write the output: {e}")))
        }
        _ => Ok(()),
    }
}

/// Writes `text` to stderr for the person watching. Unlike `eprint!`, a
/// stderr nobody reads any more (`troupe dev ... 2>&1 | head`) is not a
/// panic: the work this only reports on goes on.
pub fn tell_user(text: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(text).and_then(|()| err.flush());
}

/// Prints a JSON document, pretty and newline-terminated.
fn emit_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    emit(&text)
}

/// `n` with the noun that goes with it: "1 batch", "3 batches".
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Shows an actor as people write it: `type/id`. A part longer than the
/// daemon accepts (a mistyped or pasted argument) is cut, with its length
/// said, so the error that refuses it stays a readable line.
fn actor_name(ty: &str, id: &str) -> String {
    use troupe_runtime::validate::{shortened, MAX_NAME_BYTES};
    format!(
        "{}/{}",
        shortened(ty, MAX_NAME_BYTES),
        shortened(id, MAX_NAME_BYTES)
    )
}

/// Fetches every page of a paged list: `page(token)` returns one page's
/// items and the next token (empty at the end).
async fn all_pages<T, F, Fut>(mut page: F) -> anyhow::Result<Vec<T>>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(Vec<T>, String)>>,
{
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let (items, next) = page(token.clone()).await?;
        all.extend(items);
        if next.is_empty() {
            return Ok(all);
        }
        // A daemon that hands back the token it was given would page forever.
        if next == token {
            return Err(fail(
                Exit::Daemon,
                "the daemon returned the same page twice; this is a daemon bug, please report it",
            ));
        }
        token = next;
    }
}
