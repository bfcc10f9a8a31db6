//! A TCP proxy the link tests put between two daemons: it can pause (a peer
//! or network that stops reading), cut (a connection reset) and slow the
//! answers down (a narrow path back).

// Each test file compiles this module for itself and uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A TCP proxy in front of `upstream`.
pub struct Proxy {
    pub address: SocketAddr,
    paused: watch::Sender<bool>,
    /// Bytes per second upstream's answers may flow at (0: unlimited).
    answer_rate: watch::Sender<u64>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Result<Self, std::io::Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (paused, watch) = watch::channel(false);
        let (answer_rate, rate) = watch::channel(0);
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
                set.spawn(pump(cr, sw, watch.clone(), None));
                set.spawn(pump(sr, cw, watch.clone(), Some(rate.clone())));
            }
        });
        Ok(Self {
            address,
            paused,
            answer_rate,
            connections,
        })
    }

    /// Stops (or resumes) moving bytes: to the sender, the peer stopped
    /// reading.
    pub fn pause(&self, on: bool) {
        let _ = self.paused.send(on);
    }

    /// Lets upstream's answers through at most `bytes_per_second`.
    pub fn slow_answers(&self, bytes_per_second: u64) {
        let _ = self.answer_rate.send(bytes_per_second);
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
    rate: Option<watch::Receiver<u64>>,
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
        // Pacing, not waiting for an event: the rate is the path's width.
        let per_second = rate.as_ref().map_or(0, |r| *r.borrow());
        if let Some(nanos) = (n as u64)
            .saturating_mul(1_000_000_000)
            .checked_div(per_second)
        {
            tokio::time::sleep(Duration::from_nanos(nanos)).await;
        }
    }
}
