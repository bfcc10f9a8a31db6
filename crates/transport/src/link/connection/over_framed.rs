//! A link's stream as frames written straight on a TCP (or TLS) connection
//! of its own (`frames_io`): the magic and a hello carrying the token, the
//! listener's hello back (or its refusal), then frames both ways. The
//! default protocol. A peer that closes the connection instead of answering
//! the hello predates framed links (its HTTP/2 server refused the magic as a
//! preface): the same attempt then opens a `PeerLink.Open` call, so daemons
//! of both kinds mix during a rolling upgrade.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tonic::codegen::http::Uri;
use tonic::codegen::Service;
use tracing::{debug, info};
use troupe_proto::v1 as pb;

use super::{RequestFrames, Shared};
use crate::link::frames_io::{encode_frame, write_frames, FrameReader, MAGIC};
use crate::root_cause;

type Refusal = (String, bool);

fn down(reason: String) -> Refusal {
    (reason, false)
}

/// How a framed attempt ended: it failed (before its stream opened or
/// after, as the flag says), or the peer does not speak the protocol.
enum FramedEnd {
    Failed(Refusal),
    /// The peer does not speak the framed protocol; why it seems so.
    Unspoken(String),
}

impl From<Refusal> for FramedEnd {
    fn from(refusal: Refusal) -> Self {
        Self::Failed(refusal)
    }
}

impl Shared {
    /// Dials and serves one stream until it breaks; the reason, and whether
    /// the stream was up at all.
    pub(super) async fn session_framed(self: &Arc<Self>) -> Result<(), Refusal> {
        let uri: Uri = self
            .uri()
            .parse()
            .map_err(|e| down(format!("bad peer address: {e}")))?;
        let limit = self.config.connect_timeout;
        let timed_out = || down(format!("connecting timed out after {limit:?}"));
        let ended = match &self.config.tls {
            Some(tls) => {
                let io = tokio::time::timeout(limit, tls.clone().call(uri))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| down(root_cause(&e)))?
                    .into_inner();
                self.run_framed(io).await
            }
            None => {
                // Without Coalesced: the writer batches frames itself.
                let tcp = tokio::time::timeout(limit, troupe_coalesce::dial(&uri))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| down(e.to_string()))?;
                self.run_framed(tcp).await
            }
        };
        match ended {
            Ok(()) => Ok(()),
            Err(FramedEnd::Failed(refusal)) => Err(refusal),
            Err(FramedEnd::Unspoken(why)) => {
                if self
                    .counters
                    .peer_predates_framed
                    .swap(true, Ordering::Relaxed)
                {
                    debug!(peer = %self.address, channel = self.channel, %why, "the peer does not answer framed links; opening a PeerLink call instead");
                } else {
                    info!(peer = %self.address, channel = self.channel, %why, "the peer does not answer framed links (a daemon older than this one?): this channel's connections to it open PeerLink calls instead");
                }
                self.session_grpc().await
            }
        }
    }

    async fn run_framed<IO>(self: &Arc<Self>, io: IO) -> Result<(), FramedEnd>
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (read_half, mut write_half) = tokio::io::split(io);
        let authorization = self
            .config
            .authorization
            .as_ref()
            .and_then(|a| a.current())
            .and_then(|value| value.to_str().ok().map(str::to_owned))
            .unwrap_or_default();
        let mut opening = BytesMut::new();
        opening.extend_from_slice(&MAGIC);
        encode_frame(&self.hello(authorization), &mut opening);
        let mut reader = FrameReader::new(read_half, self.config.frame_limit());
        let sent = tokio::time::timeout(self.config.connect_timeout, async {
            write_half.write_all(&opening).await?;
            write_half.flush().await
        });
        let answer = async {
            sent.await
                .map_err(|_| down("the peer did not open the stream in time".into()))?
                .map_err(|e| down(e.to_string()))?;
            let answer = tokio::time::timeout(self.config.connect_timeout, reader.read_frame());
            match answer.await {
                Err(_) => Err(down("the peer did not open the stream in time".into()).into()),
                // An HTTP/2 server closes on a preface it does not know,
                // perhaps after a GOAWAY that reads as no frame of ours.
                Ok(Ok(None)) => Err(FramedEnd::Unspoken("it closed the connection".into())),
                Ok(Err(error)) => Err(FramedEnd::Unspoken(error.to_string())),
                Ok(Ok(Some(frame))) => Ok(frame),
            }
        };
        match answer.await? {
            pb::LinkFrame {
                refused: Some(status),
                ..
            } => {
                return Err(down(format!(
                    "{}: {}",
                    tonic::Code::from_i32(status.code),
                    status.message
                ))
                .into())
            }
            pb::LinkFrame { hello: Some(_), .. } => {}
            _ => {
                return Err(
                    down("the peer answered the link's hello with another frame".into()).into(),
                )
            }
        }
        let frames = RequestFrames {
            shared: self.clone(),
            session: self.next_session(),
            hello: None,
        };
        self.up();
        // The peer ending the connection (a drain) ends `read` once it has
        // taken the replies sent before, so only what it never answered fails.
        let ended = tokio::select! {
            r = self.read(reader) => r,
            r = self.ping() => r,
            r = write_frames(write_half, frames) => match r {
                Ok(()) => Err("the link was replaced".to_owned()),
                Err(e) => Err(format!("writing to the peer failed: {e}")),
            },
        };
        self.counters.connected.fetch_sub(1, Ordering::Relaxed);
        ended.map_err(|reason| FramedEnd::Failed((reason, true)))
    }
}
