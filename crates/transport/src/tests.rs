//! Loopback tests: a stub `ActorClient` server that echoes what it received,
//! and a listener that counts the connections it accepted.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt as _;
use tonic::{Request, Response};

use super::*;

/// Echoes invokes as `method|hops|traceparent|timeout-present` and answers
/// the rest with a status of its own.
#[derive(Debug, Default)]
struct Echo;

fn header(request: &tonic::metadata::MetadataMap, name: &str) -> String {
    request
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[tonic::async_trait]
impl pb::actor_client_server::ActorClient for Echo {
    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let meta = request.metadata().clone();
        let r = request.into_inner();
        if r.method == "sleep" {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        if r.method == "raise" {
            let mut status = Status::unknown("boom");
            status.metadata_mut().insert(
                "troupe-error-type",
                MetadataValue::from_static("ValueError"),
            );
            return Err(status);
        }
        let text = format!(
            "{}|{}|{}|{}",
            r.method,
            header(&meta, FORWARDED_HEADER),
            header(&meta, TRACEPARENT_HEADER),
            !header(&meta, "grpc-timeout").is_empty()
        );
        Ok(Response::new(pb::InvokeResponse {
            payload: Some(pb::Payload {
                data: text.into_bytes().into(),
                content_type: 0,
            }),
        }))
    }

    async fn tell(
        &self,
        _request: Request<pb::TellRequest>,
    ) -> Result<Response<pb::TellResponse>, Status> {
        Ok(Response::new(pb::TellResponse {}))
    }

    async fn get_state(
        &self,
        request: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::GetStateResponse>, Status> {
        let hops = header(request.metadata(), FORWARDED_HEADER);
        let keys = request.into_inner().keys;
        Ok(Response::new(pb::GetStateResponse {
            entries: keys
                .into_iter()
                .map(|k| (k, hops.clone().into_bytes().into()))
                .collect(),
            active: true,
        }))
    }

    async fn set_reminder(
        &self,
        _r: Request<pb::SetReminderRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn get_reminder(
        &self,
        _r: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        Err(Status::not_found("no reminder \"r\""))
    }

    async fn delete_reminder(
        &self,
        _r: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn list_reminders(
        &self,
        _r: Request<pb::ListRemindersRequest>,
    ) -> Result<Response<pb::ListRemindersResponse>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn set_alarm(
        &self,
        _r: Request<pb::SetAlarmRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn get_alarm(&self, _r: Request<pb::AlarmRef>) -> Result<Response<pb::Reminder>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn delete_alarm(
        &self,
        _r: Request<pb::AlarmRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn set_timer(
        &self,
        _r: Request<pb::SetTimerRequest>,
    ) -> Result<Response<pb::SetTimerResponse>, Status> {
        Err(Status::unimplemented("stub"))
    }

    async fn delete_timer(
        &self,
        _r: Request<pb::TimerRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        Err(Status::unimplemented("stub"))
    }
}

/// Starts the echo server on a loopback port; returns its address and the
/// count of connections it accepted.
async fn echo_server() -> Result<(String, Arc<AtomicUsize>), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let incoming = TcpListenerStream::new(listener).map(move |conn| {
        counter.fetch_add(1, Ordering::SeqCst);
        conn
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::actor_client_server::ActorClientServer::new(Echo))
            .serve_with_incoming(incoming),
    );
    Ok((address, accepted))
}

fn invoke(method: &str) -> pb::InvokeRequest {
    pb::InvokeRequest {
        actor: Some(pb::ActorRef {
            r#type: "counter".into(),
            id: "c1".into(),
        }),
        method: method.into(),
        ..Default::default()
    }
}

fn text(response: pb::InvokeResponse) -> String {
    String::from_utf8_lossy(&response.payload.unwrap_or_default().data).into_owned()
}

#[tokio::test]
async fn one_connection_per_peer_is_reused_by_every_request(
) -> Result<(), Box<dyn std::error::Error>> {
    let (a, accepted_a) = echo_server().await?;
    let (b, accepted_b) = echo_server().await?;
    let peers = Peers::default();
    let forward = Forward {
        hops: 1,
        ..Forward::default()
    };
    for _ in 0..5 {
        peers.invoke(&a, invoke("m"), &forward).await?;
    }
    // Concurrent requests share the connection too.
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let peers = peers.clone();
            let forward = forward.clone();
            let b = b.clone();
            tokio::spawn(async move { peers.invoke(&b, invoke("m"), &forward).await })
        })
        .collect();
    for call in calls {
        call.await??;
    }
    peers.tell(&a, pb::TellRequest::default(), &forward).await?;
    assert_eq!(accepted_a.load(Ordering::SeqCst), 1);
    assert_eq!(accepted_b.load(Ordering::SeqCst), 1);
    assert_eq!(peers.len(), 2);
    peers.retain(&[a.as_str()]);
    assert_eq!(peers.len(), 1);
    Ok(())
}

#[tokio::test]
async fn headers_carry_hops_deadline_and_trace() -> Result<(), Box<dyn std::error::Error>> {
    let (a, _) = echo_server().await?;
    let peers = Peers::default();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let forward = Forward {
        hops: 2,
        timeout: Some(Duration::from_secs(5)),
        traceparent: traceparent.into(),
        tracestate: String::new(),
    };
    let answer = text(peers.invoke(&a, invoke("m"), &forward).await?);
    assert_eq!(answer, format!("m|2|{traceparent}|true"));

    // The generic path: any ActorClient RPC, with the same headers.
    let state = peers
        .forward(
            &a,
            pb::GetStateRequest {
                actor: None,
                keys: vec!["k".into()],
            },
            &forward,
            |mut c, r| async move { c.get_state(r).await },
        )
        .await?;
    assert_eq!(state.entries.get("k").map(|v| v.as_ref()), Some(&b"2"[..]));
    Ok(())
}

#[tokio::test]
async fn the_peers_own_errors_pass_through_unchanged() -> Result<(), Box<dyn std::error::Error>> {
    let (a, _) = echo_server().await?;
    let peers = Peers::default();
    let Err(e) = peers.invoke(&a, invoke("raise"), &Forward::default()).await else {
        return Err("an actor error was not passed on".into());
    };
    let TransportError::Remote { status, .. } = e else {
        return Err(format!("not the peer's answer: {e:?}").into());
    };
    assert_eq!(status.code(), Code::Unknown);
    assert_eq!(status.message(), "boom");
    assert_eq!(
        status
            .metadata()
            .get("troupe-error-type")
            .and_then(|v| v.to_str().ok()),
        Some("ValueError")
    );
    let Err(e) = peers
        .forward(
            &a,
            pb::ReminderRef::default(),
            &Forward::default(),
            |mut c, r| async move { c.get_reminder(r).await },
        )
        .await
    else {
        return Err("NOT_FOUND was not passed on".into());
    };
    assert!(matches!(&e, TransportError::Remote { status, .. } if status.code() == Code::NotFound));
    Ok(())
}

#[tokio::test]
async fn an_unreachable_peer_gives_a_clear_error() -> Result<(), Box<dyn std::error::Error>> {
    // A port nobody listens on: bind, note it, close.
    let address = {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        listener.local_addr()?.to_string()
    };
    let peers = Peers::default();
    let started = std::time::Instant::now();
    let Err(e) = peers
        .invoke(&address, invoke("m"), &Forward::default())
        .await
    else {
        return Err("a call to a closed port succeeded".into());
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&e, TransportError::Unreachable { .. }),
        "unexpected {e:?}"
    );
    let message = e.to_string();
    assert!(message.contains(&address), "{message}");
    assert!(message.contains("refused"), "{message}");

    let Err(e) = peers.channel("not an address") else {
        return Err("a bad address was accepted".into());
    };
    assert!(matches!(e, TransportError::InvalidAddress { .. }), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn a_peer_that_stops_answering_times_out() -> Result<(), Box<dyn std::error::Error>> {
    let (a, _) = echo_server().await?;
    let peers = Peers::default();
    let forward = Forward {
        timeout: Some(Duration::from_millis(300)),
        ..Forward::default()
    };
    let started = std::time::Instant::now();
    let Err(e) = peers.invoke(&a, invoke("sleep"), &forward).await else {
        return Err("a call past its deadline succeeded".into());
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(e, TransportError::Timeout { .. }), "{e:?}");
    Ok(())
}

#[test]
fn hop_counts_read_back() {
    let request = Forward {
        hops: 2,
        ..Forward::default()
    }
    .request(());
    assert_eq!(forwarded_hops(request.metadata()), 2);
    assert_eq!(forwarded_hops(&tonic::metadata::MetadataMap::new()), 0);
}
