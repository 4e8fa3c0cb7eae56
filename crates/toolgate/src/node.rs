//! `toolgate node`: an execution node. It owns sessions (the zygote, confinement, cgroups,
//! mounts: the part of the service that needs root) and serves them to front ends holding the
//! node token, over HTTP/2 on `listen`; never meant to face the public.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use toolgate_node::NodeServer;

use crate::config::NodeConfig;

/// Runs the node until SIGTERM or Ctrl-C; then its sessions end as `serve`'s do (checkpointed
/// first when checkpoints are on, so the next call restores them).
pub async fn run(config: NodeConfig) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr().context("the bound address")?;
    crate::serve::raise_open_file_limit();
    let vault = crate::vault::open_existing(config.vault)?;
    let manager = crate::sandbox::start_manager(config.sandbox, vault).await?;
    let sessions: Arc<dyn toolgate_sandbox::SandboxSessions> = manager.clone();
    let server = NodeServer::new(sessions, config.token);
    let shutdown = CancellationToken::new();
    tracing::info!(listen = %bound, "toolgate node serving");
    crate::serve::announce(bound, &format!("http://{bound}"));
    let signal = shutdown.clone();
    tokio::spawn(async move {
        crate::serve::wait_for_signal().await;
        tracing::info!("node shutting down: no new runs, sessions checkpointed and ended");
        signal.cancel();
    });
    server.serve(listener, shutdown).await;
    manager.shutdown().await;
    Ok(())
}
