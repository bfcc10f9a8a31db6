//! The floor for `bench/ghz.sh`: a bare tonic server of the same
//! `troupe.v1.ActorClient` API whose Invoke answers the request's payload
//! and nothing else — no runtime, no app, no state. No gRPC sidecar can
//! answer with less work, so the daemon's CPU per call is read as a ratio
//! to this one's, under the same load generator on the same cores.
//!
//! A sidecar also asks its app: `--relay TARGET` makes Invoke pass each
//! request on to another `echo_floor` at TARGET over one bidirectional
//! stream (`relay.rs`) and answer with its reply. That is the least a
//! sidecar whose app lives in another process can do per call, the
//! reference for a sequential caller, who waits for both hops.
//!
//! `echo_floor [ADDR] [--relay TARGET]` (ADDR default 127.0.0.1:0) prints
//! `echo listening on ADDR` once it serves, with gRPC reflection for ghz,
//! and `PeerLink.Open` as the far end of a relay. Every other RPC is
//! UNIMPLEMENTED.

use std::net::SocketAddr;

use tonic::transport::server::TcpIncoming;
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;

mod relay;

use relay::{Relay, StreamEcho};

#[derive(Debug, Default)]
struct Echo {
    /// The echo each Invoke is passed on to, when relaying.
    relay: Option<Relay>,
}

fn none<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("the echo floor answers Invoke only"))
}

#[tonic::async_trait]
impl pb::actor_client_server::ActorClient for Echo {
    type WatchStream = tokio_stream::Empty<Result<pb::ActorEvent, Status>>;

    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        none()
    }

    type WatchTypeStream = tokio_stream::Empty<Result<pb::ActorEvent, Status>>;

    async fn watch_type(
        &self,
        _: Request<pb::WatchTypeRequest>,
    ) -> Result<Response<Self::WatchTypeStream>, Status> {
        none()
    }

    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        match &self.relay {
            Some(relay) => relay.invoke(request.into_inner()).await.map(Response::new),
            None => Ok(Response::new(pb::InvokeResponse {
                payload: request.into_inner().payload,
            })),
        }
    }
    async fn tell(
        &self,
        _: Request<pb::TellRequest>,
    ) -> Result<Response<pb::TellResponse>, Status> {
        none()
    }
    async fn get_state(
        &self,
        _: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::GetStateResponse>, Status> {
        none()
    }
    async fn set_reminder(
        &self,
        _: Request<pb::SetReminderRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        none()
    }
    async fn get_reminder(
        &self,
        _: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        none()
    }
    async fn delete_reminder(
        &self,
        _: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        none()
    }
    async fn pause_reminder(
        &self,
        _: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        none()
    }
    async fn resume_reminder(
        &self,
        _: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        none()
    }
    async fn list_reminders(
        &self,
        _: Request<pb::ListRemindersRequest>,
    ) -> Result<Response<pb::ListRemindersResponse>, Status> {
        none()
    }
    async fn set_alarm(
        &self,
        _: Request<pb::SetAlarmRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        none()
    }
    async fn get_alarm(&self, _: Request<pb::AlarmRef>) -> Result<Response<pb::Reminder>, Status> {
        none()
    }
    async fn delete_alarm(
        &self,
        _: Request<pb::AlarmRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        none()
    }
    async fn set_timer(
        &self,
        _: Request<pb::SetTimerRequest>,
    ) -> Result<Response<pb::SetTimerResponse>, Status> {
        none()
    }
    async fn delete_timer(
        &self,
        _: Request<pb::TimerRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        none()
    }
}

const USAGE: &str = "usage: echo_floor [ADDR] [--relay TARGET]";

/// The address to serve on and the echo to relay to, if any.
fn parse_args() -> Result<(SocketAddr, Option<String>), String> {
    let mut addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut relay = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--relay" {
            let target = args.next().ok_or_else(|| {
                format!("--relay needs the HOST:PORT of another echo_floor; {USAGE}")
            })?;
            relay = Some(target);
        } else {
            addr = arg
                .parse()
                .map_err(|e| format!("echo_floor: {arg:?} is not HOST:PORT ({e}); {USAGE}"))?;
        }
    }
    Ok((addr, relay))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (addr, relay) = parse_args()?;
    let relay = match relay {
        Some(target) => {
            let channel = Endpoint::from_shared(format!("http://{target}"))?
                .tcp_nodelay(true)
                .connect()
                .await
                .map_err(|e| {
                    format!("echo_floor: cannot reach the echo to relay to at {target}: {e}")
                })?;
            Some(Relay::open(channel).await?)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    println!("echo listening on {local}");
    tonic::transport::Server::builder()
        .add_service(reflection)
        .add_service(
            pb::peer_link_server::PeerLinkServer::new(StreamEcho)
                .max_decoding_message_size(usize::MAX),
        )
        .add_service(pb::actor_client_server::ActorClientServer::new(Echo {
            relay,
        }))
        // As the daemon: no Nagle delay on replies (the builder's own
        // setting does not reach connections from a listener of ours).
        .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
        .await?;
    Ok(())
}
