//! The sandbox as `serve` starts it: the session manager, from the checked sandbox settings.

use std::sync::Arc;

use anyhow::{Context, Result};
use toolgate_app::capabilities::Sandbox;
use toolgate_sandbox_manager::{ManagerConfig, SandboxManager, ZygoteConfig};

use crate::config::SandboxConfig;

/// Starts the session manager.
pub async fn start(sandbox: SandboxConfig) -> Result<(Sandbox, Arc<SandboxManager>)> {
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
    config.budget = sandbox.budget;
    tracing::info!(
        memory_mib = config.budget.memory_bytes >> 20,
        processes = config.budget.pids,
        account_memory_mib = config.budget.account_memory_bytes >> 20,
        "sessions' budget"
    );
    let manager = Arc::new(
        SandboxManager::start(config)
            .await
            .context("the sandbox could not start")?,
    );
    // app sees the sessions through the seam only; serve keeps the manager to shut it down
    let sessions: Arc<dyn toolgate_sandbox::SandboxSessions> = manager.clone();
    Ok((Sandbox::new(sessions, sandbox.limits), manager))
}
