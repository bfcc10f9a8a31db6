//! A link's stream as a `PeerLink.Open` call on an HTTP/2 connection of its
//! own, with the windows the config names: the layout of a plain gRPC
//! client, kept as the baseline the framed protocol is measured against
//! (`--peer-protocol grpc`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tonic::transport::Endpoint;
use troupe_proto::v1 as pb;

use super::{RequestFrames, Shared};
use crate::link::config::Window;
use crate::root_cause;

impl Shared {
    fn endpoint(&self) -> Result<Endpoint, String> {
        let config = &self.config;
        let endpoint = Endpoint::from_shared(self.uri())
            .map_err(|e| format!("bad peer address: {e}"))?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true);
        // No HTTP/2 keep-alive: hyper gives a connection up when a PING's
        // ACK is late, even while the connection delivers the megabytes
        // queued ahead of that ACK (a big answer on a narrow path), and fails
        // what was in flight with it. The link's own pings (`ping`)
        // count anything read instead, as on framed links.
        Ok(match config.window {
            Window::Default => endpoint,
            Window::Auto => endpoint.http2_adaptive_window(true),
            Window::Fixed(bytes) => endpoint
                .initial_stream_window_size(bytes)
                .initial_connection_window_size(bytes),
        })
    }

    /// Dials and serves one stream until it breaks; the reason, and whether
    /// the stream was up at all.
    pub(super) async fn session_grpc(self: &Arc<Self>) -> Result<(), (String, bool)> {
        let down = |reason: String| (reason, false);
        let endpoint = self.endpoint().map_err(down)?;
        let connected = match &self.config.tls {
            Some(tls) => endpoint.connect_with_connector(tls.clone()).await,
            None => {
                endpoint
                    .connect_with_connector(troupe_coalesce::Connector)
                    .await
            }
        };
        let channel = connected.map_err(|e| down(root_cause(&e)))?;
        let limit = self.config.max_message_bytes;
        let mut client = pb::peer_link_client::PeerLinkClient::new(channel)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        let frames = RequestFrames {
            shared: self.clone(),
            session: self.next_session(),
            // The token travels as metadata here, not in the hello.
            hello: Some(self.hello(String::new())),
        };
        let mut open = tonic::Request::new(frames);
        if let Some(value) = self.config.authorization.as_ref().and_then(|a| a.current()) {
            open.metadata_mut().insert("authorization", value);
        }
        let incoming = tokio::time::timeout(self.config.connect_timeout, client.open(open))
            .await
            .map_err(|_| down("the peer did not open the stream in time".into()))?
            .map_err(|status| down(format!("{}: {}", status.code(), status.message())))?
            .into_inner();
        self.up();
        self.counters.connected_grpc.fetch_add(1, Ordering::Relaxed);
        // The peer ending the call (a drain) ends `read` once it has taken
        // the replies sent before, so only what it never answered fails.
        let ended = tokio::select! {
            r = self.read(incoming) => r,
            r = self.ping() => r,
        };
        self.counters.connected.fetch_sub(1, Ordering::Relaxed);
        self.counters.connected_grpc.fetch_sub(1, Ordering::Relaxed);
        ended.map_err(|reason| (reason, true))
    }
}
