//! A caller's deadline (`grpc-timeout`) runs from the moment its request
//! reached the daemon, and when it passes the caller hears
//! DEADLINE_EXCEEDED from the daemon, naming the actor: never tonic's own
//! cut-off, CANCELLED ("Timeout expired"), which a client cannot tell from
//! a call it cancelled itself.

use std::convert::Infallible;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;
use tokio_stream::wrappers::ReceiverStream;
use troupe_tests::*;

const TY: &str = "slow";

/// The gRPC status and message of a finished response: from its headers
/// when it has no body (trailers-only), else from its trailers.
fn grpc_status(
    headers: &hyper::HeaderMap,
    trailers: Option<&hyper::HeaderMap>,
) -> anyhow::Result<(String, String)> {
    let map = if headers.contains_key("grpc-status") {
        headers
    } else {
        trailers.ok_or_else(|| anyhow::anyhow!("no trailers and no grpc-status"))?
    };
    let text = |name: &str| -> anyhow::Result<String> {
        Ok(map
            .get(name)
            .map(|v| v.to_str())
            .transpose()?
            .unwrap_or_default()
            .to_owned())
    };
    Ok((text("grpc-status")?, text("grpc-message")?))
}

/// A request whose body is slow to come (a client on a congested link, or
/// one whose process stalled after it sent the headers) still has only its
/// deadline from when it arrived. Before, the daemon started its own timer
/// once the body was read, so tonic's cut-off at the full deadline came
/// first and the caller got CANCELLED.
#[tokio::test]
async fn a_deadline_runs_from_arrival_and_ends_in_deadline_exceeded() -> anyhow::Result<()> {
    const DEADLINE: Duration = Duration::from_secs(1);
    /// How late the body follows the headers: most of the deadline.
    const BODY_LATE: Duration = Duration::from_millis(700);

    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let channel = daemon.channel().await?;
    let (mut app, _) = RawApp::register_as(
        channel,
        register_message("deadline-test", vec![type_spec(TY)]),
    )
    .await?;

    let tcp = TcpStream::connect(daemon.addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let (body_tx, body_rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
    let request = hyper::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/troupe.v1.ActorClient/Invoke",
            daemon.addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", format!("{}m", DEADLINE.as_millis()))
        .body(StreamBody::new(ReceiverStream::new(body_rx)))?;
    let response = tokio::spawn(sender.send_request(request));

    // Not a wait for an event: the slowness of the body is the scenario.
    tokio::time::sleep(BODY_LATE).await;
    let message = pb::InvokeRequest {
        actor: Some(actor(TY, "a")),
        method: "work".into(),
        payload: Some(json_payload("[]")),
        ..Default::default()
    }
    .encode_to_vec();
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(u32::try_from(message.len())?);
    framed.put_slice(&message);
    body_tx.send(Ok(Frame::data(framed.freeze()))).await?;
    drop(body_tx);

    // The turn reaches the app, which never answers it.
    let turn = app.next_turn().await?;
    assert_eq!(turn.name, "work");
    let response = within(WAIT, "the answer", response).await???;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?;
    let (code, message) = grpc_status(&parts.headers, body.trailers())?;
    assert_eq!(
        code,
        (tonic::Code::DeadlineExceeded as i32).to_string(),
        "{message}"
    );
    assert!(message.contains(&format!("{TY}/a")), "{message}");
    Ok(())
}
