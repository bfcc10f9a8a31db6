//! A TCP proxy the link tests put between two daemons: it can pause (a peer
//! or network that stops reading) and cut (a connection reset).

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A TCP proxy in front of `upstream`.
pub struct Proxy {
    pub address: SocketAddr,
    paused: watch::Sender<bool>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Result<Self, std::io::Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (paused, watch) = watch::channel(false);
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let accepted = connections.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let mut set = accepted.lock();
                set.spawn(pump(cr, sw, watch.clone()));
                set.spawn(pump(sr, cw, watch.clone()));
            }
        });
        Ok(Self {
            address,
            paused,
            connections,
        })
    }

    /// Stops (or resumes) moving bytes: to the sender, the peer stopped
    /// reading.
    pub fn pause(&self, on: bool) {
        let _ = self.paused.send(on);
    }

    /// Resets every connection through the proxy.
    pub fn cut(&self) {
        self.connections.lock().abort_all();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Checked after the read: bytes sent once the proxy is paused are
        // held, even by a pump that was already waiting to read them.
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
