//! One session's loop: each attempt (credentials, channel, registration,
//! the stream until it ends) and the pause after it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use troupe_backoff::Backoff;
use troupe_proto::v1::Register;

use super::{lock, Current, Outage, SessionEnd, SessionEvent, SessionLayer, FATAL_CODES};
use crate::app::{self, AppEvent, Attached};
use crate::connect::{self, ConnectOptions};
use crate::{AttachError, CallError};

pub(super) struct Run {
    pub(super) options: ConnectOptions,
    pub(super) register: Register,
    pub(super) backoff: Backoff,
    pub(super) current: Arc<Mutex<Current>>,
    pub(super) stopped: watch::Receiver<bool>,
}

/// How one attempt ended.
enum Attempt<E> {
    Lost { outage: Outage, registered: bool },
    Over(SessionEnd<E>),
}

impl Run {
    pub(super) async fn run<L: SessionLayer>(mut self, layer: &Arc<L>) -> SessionEnd<L::Error> {
        let mut generation = 0u64;
        // Set by an outage, cleared by a registration: only the first outage
        // after the app was registered is worth a warning.
        let mut quiet = false;
        loop {
            let (outage, registered) = match self.attempt(layer, &mut generation).await {
                Attempt::Over(end) => return end,
                Attempt::Lost { outage, registered } => (outage, registered),
            };
            if registered {
                self.backoff.reset();
                quiet = false;
            }
            let retry_in = self.backoff.next_pause();
            tracing::debug!(
                ?outage,
                retry_in_ms = retry_in.as_millis(),
                "app stream lost; re-connecting"
            );
            layer.on_event(SessionEvent::Lost {
                outage,
                first: !quiet,
                retry_in,
            });
            quiet = true;
            if !self.pause(retry_in).await {
                return SessionEnd::Stopped;
            }
        }
    }

    /// Waits `pause`; false when stopped meanwhile.
    async fn pause(&mut self, pause: Duration) -> bool {
        tokio::select! {
            _ = stopped(&mut self.stopped) => false,
            () = tokio::time::sleep(pause) => true,
        }
    }

    async fn attempt<L: SessionLayer>(
        &mut self,
        layer: &Arc<L>,
        generation: &mut u64,
    ) -> Attempt<L::Error> {
        let credentials = tokio::select! {
            _ = stopped(&mut self.stopped) => return Attempt::Over(SessionEnd::Stopped),
            got = layer.credentials() => match got {
                Ok(credentials) => credentials,
                Err(e) => return Attempt::Over(SessionEnd::Credentials(e)),
            },
        };
        let options = ConnectOptions {
            tls: credentials.tls,
            ..self.options.clone()
        };
        let channel = match connect::channel(&options) {
            Ok(channel) => channel,
            Err(e) => return Attempt::Over(SessionEnd::Connect(e)),
        };
        lock(&self.current).channel = Some(channel.clone());
        let registering = app::register(
            channel,
            &options,
            &credentials.metadata,
            self.register.clone(),
        );
        let registration = tokio::select! {
            _ = stopped(&mut self.stopped) => return Attempt::Over(SessionEnd::Stopped),
            registration = registering => registration,
        };
        let registration = match registration {
            Ok(registration) => registration,
            Err(AttachError::Refused(e)) if FATAL_CODES.contains(&e.code) => {
                tracing::debug!(code = ?e.code, message = %e.message, "registration refused for good");
                return Attempt::Over(SessionEnd::Refused(e));
            }
            Err(AttachError::Refused(e)) => {
                return Attempt::Lost {
                    outage: Outage::Refused(e),
                    registered: false,
                }
            }
            Err(other) => {
                return Attempt::Lost {
                    outage: Outage::Failed(other.to_string()),
                    registered: false,
                }
            }
        };
        *generation = generation.saturating_add(1);
        let generation = *generation;
        // Answers of this generation are taken from before the layer can know
        // it, and its messages flow only once the layer has seen Registered.
        {
            let mut current = lock(&self.current);
            current.generation = generation;
            current.sender = Some(registration.sender());
        }
        layer.on_event(SessionEvent::Registered {
            generation,
            registered: registration.registered.clone(),
        });
        let (ended_tx, ended) = oneshot::channel();
        let attached = registration.start(reader(layer.clone(), generation, ended_tx));
        let end = tokio::select! {
            _ = stopped(&mut self.stopped) => None,
            end = ended => Some(end),
        };
        self.detach(attached);
        let outage = match end {
            None => return Attempt::Over(SessionEnd::Stopped),
            Some(Ok(Ok(()))) => Outage::Closed,
            Some(Ok(Err(e))) => Outage::Ended(e),
            // The reader went without a word: only if it panicked.
            Some(Err(_)) => Outage::Failed("the app stream's reader ended".to_owned()),
        };
        Attempt::Lost {
            outage,
            registered: true,
        }
    }

    /// Ends the stream; answers for it are dropped from now on.
    fn detach(&self, attached: Attached) {
        lock(&self.current).sender = None;
        drop(attached);
    }
}

/// The reader's callback for stream `generation`: messages to the layer,
/// the end to the loop.
fn reader<L: SessionLayer>(
    layer: Arc<L>,
    generation: u64,
    ended: oneshot::Sender<Result<(), CallError>>,
) -> impl FnMut(AppEvent) + Send + 'static {
    let mut ended = Some(ended);
    move |event| match event {
        AppEvent::Messages(messages) => layer.on_event(SessionEvent::Messages {
            generation,
            messages,
        }),
        AppEvent::Ended(end) => {
            if let Some(tx) = ended.take() {
                // The loop stopped waiting: it was stopped, nothing to tell.
                let _ = tx.send(end);
            }
        }
    }
}

/// Resolves once the session is asked to stop (or its handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error: the handle was dropped, which stops the session too.
    let _ = stop.wait_for(|stop| *stop).await;
}
