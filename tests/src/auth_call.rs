//! Calling any RPC of the daemon with a chosen token and nothing else, to
//! see whether its guard lets the call in: the auth and token-use tests'.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::{within, RawCodec};

/// Calls `path` with one empty message (any RPC shape accepts that), and
/// reads the first answer; the status it ends with, or Ok.
pub async fn call(
    channel: &Channel,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<Result<(), Status>> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.context("the channel is not ready")?;
    let mut request = tonic::Request::new(tokio_stream::once(Bytes::new()));
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
    }
    let path = PathAndQuery::try_from(path)?;
    let answer = within(Duration::from_secs(10), path.as_str(), async {
        let mut stream = grpc
            .streaming(request, path.clone(), RawCodec)
            .await?
            .into_inner();
        stream.message().await.map(|_| ())
    })
    .await?;
    Ok(answer)
}

pub fn refused(answer: &Result<(), Status>) -> bool {
    matches!(answer, Err(status) if matches!(status.code(), Code::Unauthenticated | Code::PermissionDenied))
}
