//! The sandbox as `serve` starts it: the session manager, from the checked sandbox settings.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use toolgate_app::capabilities::Sandbox;
use toolgate_checkpoints::{ObjectCheckpoints, S3Access};
use toolgate_sandbox_manager::{Keeping, ManagerConfig, SandboxManager, ZygoteConfig};

use crate::config::{CheckpointLocation, CheckpointsConfig, SandboxConfig};

/// Starts the session manager, its checkpoints sealed by `vault`, as `app`'s sandbox.
pub async fn start(
    sandbox: SandboxConfig,
    vault: Arc<toolgate_vault::Vault>,
) -> Result<(Sandbox, Arc<SandboxManager>)> {
    let limits = sandbox.limits.clone();
    let manager = start_manager(sandbox, vault).await?;
    // app sees the sessions through the seam only; serve keeps the manager to shut it down
    let sessions: Arc<dyn toolgate_sandbox::SandboxSessions> = manager.clone();
    Ok((Sandbox::new(sessions, limits), manager))
}

/// The sandbox of a front end whose sessions run on execution nodes, placed through `store`;
/// the nodes' leases are kept until `shutdown`.
pub fn on_nodes(
    nodes: crate::config::NodesConfig,
    store: &Arc<dyn toolgate_store::Store>,
    shutdown: &CancellationToken,
) -> Result<Sandbox> {
    let placement: Arc<dyn toolgate_store::Placement> = store.clone();
    let fleet = toolgate_node::Fleet::new(
        &nodes.urls,
        &nodes.token,
        nodes.tls.as_ref(),
        placement,
        nodes.lease,
    )?;
    tokio::spawn(Arc::clone(&fleet).keep(shutdown.clone()));
    let sessions = toolgate_node::RemoteSessions::new(fleet, nodes.idle_ttl);
    tracing::info!(nodes = ?nodes.urls, "sessions run on execution nodes");
    Ok(Sandbox::new(Arc::new(sessions), nodes.limits))
}

/// Starts the session manager, its checkpoints sealed by `vault`.
pub async fn start_manager(
    sandbox: SandboxConfig,
    vault: Arc<toolgate_vault::Vault>,
) -> Result<Arc<SandboxManager>> {
    if sandbox.harden_lib.is_none() {
        tracing::warn!(
            "sandbox confinement is off: session code runs with the server's privileges \
             (development only)"
        );
    }
    let mut zygote = ZygoteConfig::new(sandbox.runtime, sandbox.script);
    zygote.harden_lib = sandbox.harden_lib;
    let mut config = ManagerConfig::new(zygote, sandbox.root);
    // warm sessions are prepared with the operator's limits, so that every call can take one
    config.warm_limits = sandbox.limits.for_call(None)?;
    config.idle_ttl = sandbox.idle_ttl;
    config.max_sessions_per_account = sandbox.max_sessions_per_account;
    (config.warm_sessions, config.warm_sessions_max) = sandbox.warm_sessions;
    config.budget = sandbox.budget;
    config.uid_base = sandbox.first_uid;
    config.egress = sandbox.network.map(toolgate_egress_proxy::EgressProxy::new);
    if let Some(checkpoints) = sandbox.checkpoints {
        config.keeping = Some(keeping(checkpoints, vault).await?);
    }
    tracing::info!(
        memory_mib = config.budget.memory_bytes >> 20,
        processes = config.budget.pids,
        account_memory_mib = config.budget.account_memory_bytes >> 20,
        "sessions' budget"
    );
    Ok(Arc::new(
        SandboxManager::start(config)
            .await
            .context("the sandbox could not start")?,
    ))
}

/// The checkpoint store and when sessions are written to it.
async fn keeping(
    checkpoints: CheckpointsConfig,
    vault: Arc<toolgate_vault::Vault>,
) -> Result<Keeping> {
    let store = match checkpoints.location {
        CheckpointLocation::Directory(dir) => ObjectCheckpoints::open_directory(dir, vault).await,
        CheckpointLocation::S3 {
            bucket,
            prefix,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
        } => {
            let access = S3Access {
                endpoint,
                region: Some(region),
                access_key_id,
                secret_access_key: toolgate_vault::Zeroizing::new(
                    secret_access_key.expose().to_owned(),
                ),
            };
            ObjectCheckpoints::open_bucket(&bucket, &prefix, &access, vault).await
        }
    }
    .context("the checkpoint store (checkpoint_url) could not be opened")?;
    tracing::info!(store = ?store, "sessions are checkpointed");
    let mut keeping = Keeping::new(Arc::new(store));
    keeping.hibernate_after = checkpoints.hibernate_after;
    keeping.checkpoint_every = checkpoints.checkpoint_every;
    keeping.retention = checkpoints.retention;
    keeping.account_quota_bytes = checkpoints.account_quota_bytes;
    Ok(keeping)
}
