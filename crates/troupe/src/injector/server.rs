//! The injector's HTTPS server: `POST /mutate` answers admission reviews,
//! `GET /healthz` answers probes. TLS comes from `troupe_tls::ServerTls`
//! (certificate files re-read when they change); HTTP/1.1 and HTTP/2 are
//! both served, as the API server and kubelet's probes may use either.

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tracing::{info, warn};
use troupe_tls::ServerTls;

use crate::https::TlsListener;

use super::config::ConfigSource;
use super::review::{answer, Answer, Decision};

/// A review carries the pod (and on updates the old one); Kubernetes keeps
/// objects under 1.5 MiB, so this leaves room without inviting floods.
const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// How long a stop waits for reviews in flight.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The routes, on `config`.
pub fn router(config: Arc<ConfigSource>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(config)
}

/// Serves `listener` over TLS until `stop` completes.
pub async fn serve(
    listener: TcpListener,
    tls: &ServerTls,
    config: Arc<ConfigSource>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let listener = TlsListener::new(tls.incoming(listener), local);
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router(config)).with_graceful_shutdown(async move {
        stop.await;
        let _ = stopping.send(());
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        served = &mut server => return served,
        _ = stopped => {}
    }
    // An API server holding a keep-alive connection must not hold up exit.
    match tokio::time::timeout(STOP_TIMEOUT, server).await {
        Ok(served) => served,
        Err(_) => {
            warn!("reviews still in flight after the stop timeout; exiting anyway");
            Ok(())
        }
    }
}

async fn mutate(State(config): State<Arc<ConfigSource>>, body: Bytes) -> Response {
    match answer(&body, &config.current()) {
        Ok(Answer {
            review,
            decision,
            pod,
        }) => {
            let response = &review["response"];
            let uid = response["uid"].as_str().unwrap_or_default();
            if decision == Decision::Refused {
                let message = response["status"]["message"].as_str().unwrap_or_default();
                warn!(
                    uid,
                    pod, message, "pod refused: a bad troupe.dev annotation"
                );
            } else {
                info!(uid, pod, ?decision, "review answered");
            }
            (
                [(header::CONTENT_TYPE, "application/json")],
                review.to_string(),
            )
                .into_response()
        }
        Err(malformed) => {
            warn!(error = %malformed, "malformed admission review");
            (StatusCode::BAD_REQUEST, format!("{malformed}\n")).into_response()
        }
    }
}
