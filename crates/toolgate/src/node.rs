//! `toolgate node`: an execution node. It owns sessions (the zygote, confinement, cgroups,
//! mounts: the part of the service that needs root) and serves them to front ends holding the
//! node token, over HTTP/2 on `listen`; never meant to face the public.

use std::sync::{Arc, RwLock};

use anyhow::{Context, Result};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use toolgate_node::{NodeControl, NodeLoad, NodeServer};
use toolgate_sandbox::{
    RunOutcome, RunRequest, SandboxSessionInfo, SandboxSessions, SandboxSessionsError,
    WorkspaceRead,
};
use toolgate_sandbox_manager::SandboxManager;

use crate::config::{NodeConfig, SandboxConfig};

/// Runs the node until SIGTERM or Ctrl-C; then its sessions end as `serve`'s do (checkpointed
/// first when checkpoints are on, so the next call restores them elsewhere).
pub async fn run(config: NodeConfig) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr().context("the bound address")?;
    crate::serve::raise_open_file_limit();
    let vault = crate::vault::open_existing(config.vault)?;
    let sessions = Arc::new(NodeSessions {
        manager: RwLock::new(
            crate::sandbox::start_manager(config.sandbox.clone(), Arc::clone(&vault)).await?,
        ),
        sandbox: config.sandbox,
        vault,
    });
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let server = NodeServer::new(sessions.clone(), config.token, config.tls, sessions.clone());
    let shutdown = CancellationToken::new();
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(listen = %bound, scheme, workers, "toolgate node serving");
    crate::serve::announce(bound, &format!("{scheme}://{bound}"));
    let signal = shutdown.clone();
    tokio::spawn(async move {
        crate::serve::wait_for_signal().await;
        tracing::info!("node shutting down: sessions checkpointed and ended");
        signal.cancel();
    });
    server.serve(listener, shutdown).await;
    sessions.current().shutdown().await;
    Ok(())
}

/// The node's sessions: one manager at a time. Fencing replaces it with a fresh one and shuts
/// the old one down without writing anything out, so runs placed anew never meet a session of
/// the incarnation that lapsed.
struct NodeSessions {
    manager: RwLock<Arc<SandboxManager>>,
    sandbox: SandboxConfig,
    vault: Arc<toolgate_vault::Vault>,
}

impl NodeSessions {
    fn current(&self) -> Arc<SandboxManager> {
        Arc::clone(
            &self
                .manager
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

#[async_trait]
impl NodeControl for NodeSessions {
    fn load(&self) -> NodeLoad {
        let load = self.current().load();
        NodeLoad {
            sessions: u64::try_from(load.sessions).unwrap_or(u64::MAX),
            memory_bytes: load.memory_bytes,
        }
    }

    async fn fence(&self) {
        let fresh = match crate::sandbox::start_manager(
            self.sandbox.clone(),
            Arc::clone(&self.vault),
        )
        .await
        {
            Ok(fresh) => fresh,
            Err(error) => {
                // no manager to swap in: the old one is shut all the same, and the node
                // refuses runs until it is restarted
                tracing::error!(
                    error = format!("{error:#}"),
                    "node: no fresh sandbox after a fence"
                );
                self.current().shutdown_abandoning().await;
                return;
            }
        };
        let old = std::mem::replace(
            &mut *self
                .manager
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            fresh,
        );
        old.shutdown_abandoning().await;
    }

    async fn drain(&self) -> u64 {
        u64::try_from(self.current().hibernate_all().await).unwrap_or(u64::MAX)
    }
}

/// `toolgate node --drain`: tells the node listening at `listen` (this host's, by default) to
/// take no new sessions and hibernate the rest, waits for it, and prints
/// `{"drained": true, "hibernated": N}`.
pub async fn drain(target: crate::config::DrainTarget) -> Result<()> {
    let link = toolgate_node::NodeLink::new(&target.url, target.token, target.tls)?;
    let drained = link
        .drain()
        .await
        .with_context(|| format!("the node at {} could not be drained", target.url))?;
    println!(
        "{}",
        serde_json::json!({"drained": true, "hibernated": drained.hibernated})
    );
    Ok(())
}

#[async_trait]
impl SandboxSessions for NodeSessions {
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        SandboxSessions::run(&*self.current(), request).await
    }

    async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        SandboxSessions::read_file(&*self.current(), account, session_id, path, max_bytes).await
    }

    async fn close(&self, account: &str, session_id: &str) -> bool {
        SandboxSessions::close(&*self.current(), account, session_id).await
    }

    fn idle_ttl(&self) -> std::time::Duration {
        self.sandbox.idle_ttl
    }

    async fn list(&self, account: &str) -> Vec<SandboxSessionInfo> {
        SandboxSessions::list(&*self.current(), account).await
    }
}
