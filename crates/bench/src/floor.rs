//! A bare axum server that answers every POST with a small fixed body. Measured with the same
//! load generator as toolgate, it shows what the HTTP stack and the generator itself reach on
//! this machine: if toolgate's figure is far below it, the generator is not what limits it.
//! For `--ai` it is also the model provider and the search upstream ([`crate::stand_in`]).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::routing::{get, post};
use http::header;

/// The fixed answer; it names `svc_read` so the generator's check passes as it does for toolgate.
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"svc_read"}]}}"#;

/// Serves on `addr` until SIGTERM (the parent's stop) or for at most `limit`, then exits by
/// itself: a parent that died without stopping it must not leave it running.
pub fn serve(addr: SocketAddr, limit: Duration) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let router = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/u/{key}",
                post(|| async { ([(header::CONTENT_TYPE, "application/json")], BODY) }),
            )
            .route("/v1/chat/completions", post(crate::stand_in::chat))
            .route("/search", get(crate::stand_in::search))
            .route("/drip", get(crate::fairness::drip));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        axum::serve(listener, router)
            .with_graceful_shutdown(stop_signal(limit))
            .await
            .context("floor server failed")
    })
}

async fn stop_signal(limit: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                () = tokio::time::sleep(limit) => {}
            }
        }
        Err(_) => tokio::time::sleep(limit).await,
    }
}
