//! Keeping an app attached: the `AppHost.Attach` stream opened again, after
//! a jittered backoff, whenever it ends or cannot be opened, until the layer
//! stops it or the daemon refuses the app for good.
//!
//! [`AppSession::start`] runs the loop on the runtime. Before each attempt it
//! asks the layer for that attempt's [`Credentials`] (token files and TLS
//! files are read again, so a rotated Secret or a renewed certificate is
//! picked up), builds a channel from them, and registers ([`crate::app`]).
//! Everything that happens reaches the layer as a [`SessionEvent`]: each
//! registration with its generation number, the daemon's messages tagged
//! with theirs, each outage with whether it is the first since the app was
//! last registered (the layer logs that one loudly, the retries quietly), and
//! one [`SessionEvent::Ended`] last. Answers carry the generation they belong
//! to ([`AppSession::send`]): one for a stream that is gone is dropped, never
//! written on the next stream (the daemon failed that work when the stream
//! ended).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Code;
use troupe_backoff::Backoff;
use troupe_proto::v1::{AppMessage, DaemonMessage, Register, Registered};

use crate::app::AppSender;
use crate::connect::{ConnectOptions, TlsOptions};
use crate::JITTER;
use crate::{CallError, ConnectError};

mod attempt;

use attempt::Run;

/// Refusals of the registration that a retry cannot fix: the session ends
/// with them instead of looping. UNAUTHENTICATED among them: a missing or
/// wrong token stays wrong until someone fixes it. (FAILED_PRECONDITION is
/// also how the daemon refuses another app API version, naming its own in a
/// trailer the layer reads.)
pub const FATAL_CODES: [Code; 6] = [
    Code::Unauthenticated,
    Code::InvalidArgument,
    Code::AlreadyExists,
    Code::FailedPrecondition,
    Code::PermissionDenied,
    Code::Unimplemented,
];

/// What one attempt connects with, as the layer read it just now.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Metadata of the stream's request (and of the calls made on its
    /// channel): the app token, if any.
    pub metadata: Vec<(String, String)>,
    /// TLS from the PEM files as they are now; `None` is plaintext.
    pub tls: Option<TlsOptions>,
}

/// What the session needs from its language layer.
pub trait SessionLayer: Send + Sync + 'static {
    /// Why the layer could not give credentials: what its users see (an
    /// unreadable token file, a TLS file that holds no PEM).
    type Error: Send + 'static;

    /// The credentials of the next attempt; called once before each.
    fn credentials(&self) -> impl Future<Output = Result<Credentials, Self::Error>> + Send;

    /// Called from a runtime thread, in order; must not block.
    fn on_event(&self, event: SessionEvent<Self::Error>);
}

/// Why a stream was lost (or never opened); the session tries again.
#[derive(Debug, Clone)]
pub enum Outage {
    /// The daemon closed a registered stream cleanly: it is stopping or
    /// restarting.
    Closed,
    /// A status ended a registered stream.
    Ended(CallError),
    /// A status other than a [`FATAL_CODES`] one ended the attempt before
    /// `Registered` (a daemon that is not there is UNAVAILABLE).
    Refused(CallError),
    /// The attempt ended otherwise before `Registered`: closed early, or a
    /// first message that was not `Registered`.
    Failed(String),
}

/// Why the session is over for good.
#[derive(Debug)]
pub enum SessionEnd<E> {
    /// [`AppSession::stop`] (or dropping the session).
    Stopped,
    /// The daemon refused the registration with one of [`FATAL_CODES`].
    Refused(CallError),
    /// The layer could not give the attempt's credentials.
    Credentials(E),
    /// The credentials' TLS options were refused by the TLS stack, or the
    /// address is not one.
    Connect(ConnectError),
}

/// What the session hands the layer.
#[derive(Debug)]
pub enum SessionEvent<E> {
    /// The daemon registered the app; `generation` counts registrations from
    /// 1 and tags this stream's messages and answers.
    Registered {
        generation: u64,
        registered: Registered,
    },
    /// The messages of one frame of stream `generation`, batches flattened.
    Messages {
        generation: u64,
        messages: Vec<DaemonMessage>,
    },
    /// The stream ended, or an attempt failed; the next one starts after
    /// `retry_in`. `first`: the first outage since the app was last
    /// registered (or since the start), the one worth a warning.
    Lost {
        outage: Outage,
        first: bool,
        retry_in: Duration,
    },
    /// The last event.
    Ended(SessionEnd<E>),
}

/// How long to wait between attempts.
#[derive(Debug, Clone, Copy)]
pub struct ReconnectPolicy {
    /// The first pause, and the one after a stream that had registered.
    pub initial_delay: Duration,
    /// Pauses double up to this.
    pub max_delay: Duration,
}

impl Default for ReconnectPolicy {
    /// As the SDKs' `max_reconnect_delay` / `maxReconnectDelay` default.
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(2),
        }
    }
}

/// The stream answers go to now, with its generation.
#[derive(Debug, Default)]
struct Current {
    generation: u64,
    sender: Option<AppSender>,
    channel: Option<Channel>,
}

/// A running session; dropping it stops it.
#[derive(Debug)]
pub struct AppSession {
    current: Arc<Mutex<Current>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

fn lock(current: &Mutex<Current>) -> MutexGuard<'_, Current> {
    // Nothing panics while holding it; a poisoned lock still holds valid data.
    current.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AppSession {
    /// Starts the loop on the current tokio runtime (must be called inside
    /// one). `options` gives the address and receive limit; each attempt's
    /// TLS comes from its credentials.
    pub fn start<L: SessionLayer>(
        options: ConnectOptions,
        register: Register,
        policy: ReconnectPolicy,
        layer: Arc<L>,
    ) -> Self {
        let current = Arc::new(Mutex::new(Current::default()));
        let (stop, stopped) = watch::channel(false);
        let run = Run {
            options,
            register,
            backoff: Backoff::new(policy.initial_delay, policy.max_delay, JITTER),
            current: current.clone(),
            stopped,
        };
        let shared = current.clone();
        let task = tokio::spawn(async move {
            let end = run.run(&layer).await;
            // The last attempt's channel goes with the session, and its
            // connection with it once the turns' clients are closed too.
            *lock(&shared) = Current::default();
            layer.on_event(SessionEvent::Ended(end));
        });
        Self {
            current,
            stop,
            task,
        }
    }

    /// Queues an answer of stream `generation`; false (and dropped) when that
    /// stream is gone. Never blocks.
    pub fn send(&self, generation: u64, msg: AppMessage) -> bool {
        let current = lock(&self.current);
        match &current.sender {
            Some(sender) if current.generation == generation => sender.send(msg),
            _ => false,
        }
    }

    /// The channel of the latest attempt, for calls made from turns (which
    /// share the app's connection and its receive limit); `None` before the
    /// first attempt.
    pub fn channel(&self) -> Option<Channel> {
        lock(&self.current).channel.clone()
    }

    /// Ends the session at once: the stream, an attempt under way, or the
    /// pause between two. Its `Ended(Stopped)` event follows.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Whether the loop is over (its `Ended` event was handed on).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for AppSession {
    fn drop(&mut self) {
        self.stop();
    }
}
