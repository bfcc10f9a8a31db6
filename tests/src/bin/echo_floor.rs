//! The floor for `bench/ghz.sh`: a bare tonic server of the same
//! `troupe.v1.ActorClient` API whose Invoke answers the request's payload
//! and nothing else — no runtime, no app, no state. No gRPC sidecar can
//! answer with less work, so the daemon's CPU per call is read as a ratio
//! to this one's, under the same load generator on the same cores.
//!
//! `echo_floor [ADDR]` (default 127.0.0.1:0) prints `echo listening on ADDR`
//! once it serves, with gRPC reflection for ghz. Every other RPC is
//! UNIMPLEMENTED.

use std::net::SocketAddr;

use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;

#[derive(Debug, Default)]
struct Echo;

fn none<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("the echo floor answers Invoke only"))
}

#[tonic::async_trait]
impl pb::actor_client_server::ActorClient for Echo {
    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        Ok(Response::new(pb::InvokeResponse {
            payload: request.into_inner().payload,
        }))
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|e| format!("echo_floor: {a:?} is not HOST:PORT ({e})"))?,
        None => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    println!("echo listening on {local}");
    tonic::transport::Server::builder()
        .add_service(reflection)
        .add_service(pb::actor_client_server::ActorClientServer::new(Echo))
        // As the daemon: no Nagle delay on replies (the builder's own
        // setting does not reach connections from a listener of ours).
        .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
        .await?;
    Ok(())
}
