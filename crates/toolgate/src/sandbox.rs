//! The sandbox as `serve` starts it: where the runtime, the zygote script and the confinement
//! library are, the operator's limits, and the session manager.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use toolgate_app::capabilities::Sandbox;
use toolgate_sandbox::LimitSettings;
use toolgate_sandbox_manager::{Budget, ManagerConfig, SessionManager, ZygoteConfig};

use crate::config::Settings;

/// The confinement library's file name, as cargo builds it.
const HARDEN_LIB: &str = "libtoolgate_sandbox_harden.so";

/// The sandbox settings that need nothing but their own values, checked before `serve` opens
/// anything: the switch, the limits, the idle expiry and the session cap. `false`: off.
pub fn check(settings: &Settings) -> Result<bool> {
    match settings.sandbox.as_deref().unwrap_or("on") {
        "on" => {}
        "off" => return Ok(false),
        other => bail!("sandbox must be `on` or `off`, got {other:?}"),
    }
    limits(settings)?;
    if settings.sandbox_idle_minutes == Some(0) {
        bail!("sandbox_idle_minutes must be at least 1");
    }
    if settings.sandbox_max_sessions == Some(0) {
        bail!("sandbox_max_sessions must be at least 1");
    }
    Ok(true)
}

/// Starts the session manager, or `None` when the operator turned the sandbox off.
pub async fn start(settings: &Settings) -> Result<Option<(Sandbox, Arc<SessionManager>)>> {
    if !check(settings)? {
        return Ok(None);
    }
    let limits = limits(settings)?;
    let runtime = locate(settings.sandbox_runtime.as_deref(), ".deps/python-runtime")
        .context("no Python runtime for the sandbox: build one with `scripts/python-runtime.sh .deps/python-runtime`, name it with --sandbox-runtime, or pass --sandbox off")?;
    let script = locate(
        settings.sandbox_zygote.as_deref(),
        "runtime/toolgate_zygote.py",
    )
    .context("no zygote script (runtime/toolgate_zygote.py): name it with --sandbox-zygote")?;
    let mut zygote = ZygoteConfig::new(runtime, script);
    zygote.harden_lib = harden_lib(settings)?;
    let root = settings
        .sandbox_root
        .clone()
        .unwrap_or_else(|| settings.data_dir().join("sessions"));
    let root =
        std::path::absolute(&root).with_context(|| format!("sandbox_root {}", root.display()))?;
    if zygote.harden_lib.is_some() {
        check_root(&root)?;
    }
    let mut config = ManagerConfig::new(zygote, root);
    // warm sessions are prepared with the operator's limits, so that every call can take one
    config.warm_limits = limits.for_call(None)?;
    // both checked (at least 1) by `check`, before anything was opened
    config.idle_ttl = Duration::from_secs(settings.sandbox_idle_minutes.unwrap_or(20) * 60);
    config.max_sessions_per_account = settings.sandbox_max_sessions.unwrap_or(10);
    config.budget = budget(settings);
    tracing::info!(
        memory_mib = config.budget.memory_bytes >> 20,
        processes = config.budget.pids,
        account_memory_mib = config.budget.account_memory_bytes >> 20,
        "sessions' budget"
    );
    let manager = Arc::new(
        SessionManager::start(config)
            .await
            .context("the sandbox could not start")?,
    );
    // app sees the sessions through the seam only; serve keeps the manager to shut it down
    let sessions: Arc<dyn toolgate_sandbox::Sessions> = manager.clone();
    Ok(Some((Sandbox::new(sessions, limits), manager)))
}

/// The budget of all sessions together: the operator's, else a share of this host.
fn budget(settings: &Settings) -> Budget {
    let host = Budget::default();
    let mib = |value: Option<u64>, default: u64| value.map_or(default, |mib| mib << 20);
    let memory = mib(settings.sandbox_budget_memory_mib, host.memory_bytes);
    Budget {
        memory_bytes: memory,
        pids: settings.sandbox_budget_processes.unwrap_or(host.pids),
        // at least two accounts fit whatever one does
        account_memory_bytes: mib(settings.sandbox_account_memory_mib, memory / 2),
    }
}

/// The operator's limits, checked.
fn limits(settings: &Settings) -> Result<LimitSettings> {
    const MIB: u64 = 1024 * 1024;
    let defaults = LimitSettings::default();
    let max_timeout = settings
        .sandbox_max_timeout_s
        .unwrap_or(defaults.max_timeout.as_secs());
    let default_timeout = settings
        .sandbox_default_timeout_s
        .unwrap_or(defaults.default_timeout.as_secs());
    if max_timeout == 0 || default_timeout == 0 || default_timeout > max_timeout {
        bail!(
            "sandbox_default_timeout_s ({default_timeout}) must be between 1 and \
             sandbox_max_timeout_s ({max_timeout})"
        );
    }
    let memory = settings
        .sandbox_memory_mib
        .unwrap_or(defaults.memory_bytes / MIB);
    let workspace = settings
        .sandbox_workspace_mib
        .unwrap_or(defaults.workspace_bytes / MIB);
    let processes = settings.sandbox_max_processes.unwrap_or(defaults.max_pids);
    if memory < 64 || workspace < 1 || processes < 8 {
        bail!(
            "sandbox limits too small: memory at least 64 MiB, workspace at least 1 MiB, \
             processes at least 8"
        );
    }
    Ok(LimitSettings {
        default_timeout: Duration::from_secs(default_timeout),
        max_timeout: Duration::from_secs(max_timeout),
        memory_bytes: memory.saturating_mul(MIB),
        max_pids: processes,
        output_bytes: defaults.output_bytes,
        workspace_bytes: workspace.saturating_mul(MIB),
    })
}

/// The confinement library, or `None` when the operator turned confinement off.
fn harden_lib(settings: &Settings) -> Result<Option<PathBuf>> {
    match settings
        .sandbox_confinement
        .as_deref()
        .unwrap_or("required")
    {
        "required" => {}
        "off" => {
            tracing::warn!(
                "sandbox confinement is off: session code runs with the server's privileges \
                 (development only)"
            );
            return Ok(None);
        }
        other => bail!("sandbox_confinement must be `required` or `off`, got {other:?}"),
    }
    if let Some(path) = &settings.sandbox_harden_lib {
        if !path.is_file() {
            bail!("sandbox_harden_lib {} is not a file", path.display());
        }
        // the zygote runs elsewhere and loads it by name: never relative
        return Ok(Some(std::path::absolute(path)?));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(HARDEN_LIB)))
        .filter(|path| path.is_file());
    match beside {
        Some(path) => Ok(Some(path)),
        None => bail!(
            "no confinement library ({HARDEN_LIB}) next to this binary: build it with `cargo \
             build --release -p toolgate-sandbox-harden`, name it with --sandbox-harden-lib, or \
             pass --sandbox-confinement off (development only)"
        ),
    }
}

/// Directories every confined session sees as its own empty mounts: a workspace beneath one of
/// them would be hidden from its session.
const MASKED: [&str; 5] = ["/tmp", "/dev/shm", "/run", "/var/run", "/proc"];

/// Refuses, at start rather than at the first call, a sessions root that confined sessions
/// could not reach: beneath a masked directory, or below a directory others may not search
/// (sessions run as unprivileged users of their own).
fn check_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(masked) = MASKED.iter().find(|m| root.starts_with(m)) {
        bail!(
            "sandbox_root {} lies beneath {masked}, which every confined session sees as its own              empty directory: choose a directory elsewhere (the default is <data_dir>/sessions)",
            root.display()
        );
    }
    for ancestor in root.ancestors().skip(1) {
        let Ok(metadata) = std::fs::metadata(ancestor) else {
            continue; // created later by the manager, searchable
        };
        if metadata.permissions().mode() & 0o001 == 0 {
            bail!(
                "sandbox_root {} is below {}, which other users may not search (mode {:o});                  sessions run as unprivileged users and must reach their workspace: choose                  another directory or allow search (chmod o+x)",
                root.display(),
                ancestor.display(),
                metadata.permissions().mode() & 0o7777
            );
        }
    }
    Ok(())
}

/// `given`, else `default` under the working directory, else under the checkout this binary
/// was built in (`<checkout>/target/<profile>/toolgate`).
fn locate(given: Option<&Path>, default: &str) -> Result<PathBuf> {
    if let Some(path) = given {
        if !path.exists() {
            bail!("{} does not exist", path.display());
        }
        return Ok(std::path::absolute(path)?);
    }
    let here = Path::new(default);
    if here.exists() {
        return Ok(std::path::absolute(here)?);
    }
    let checkout = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(|root| root.join(default)))
        .filter(|path| path.exists());
    checkout.with_context(|| format!("{default} not found"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn limits_default_and_refuse_nonsense() {
        let limits = limits(&Settings::default()).unwrap();
        assert_eq!(limits, LimitSettings::default());
        let inverted = Settings {
            sandbox_default_timeout_s: Some(301),
            ..Settings::default()
        };
        assert!(format!("{:#}", super::limits(&inverted).unwrap_err()).contains("between 1"));
        let tiny = Settings {
            sandbox_memory_mib: Some(1),
            ..Settings::default()
        };
        assert!(super::limits(&tiny).is_err());
    }

    #[tokio::test]
    async fn bad_switches_are_named() {
        let bad = Settings {
            sandbox: Some("maybe".into()),
            ..Settings::default()
        };
        assert!(format!("{:#}", start(&bad).await.err().unwrap()).contains("`on` or `off`"));
        let off = Settings {
            sandbox: Some("off".into()),
            ..Settings::default()
        };
        assert!(start(&off).await.unwrap().is_none());
        let missing = Settings {
            sandbox_runtime: Some("/nonexistent/runtime".into()),
            ..Settings::default()
        };
        let err = format!("{:#}", start(&missing).await.err().unwrap());
        assert!(err.contains("python-runtime.sh"), "{err}");
    }

    #[test]
    fn unreachable_session_roots_are_refused_at_start() {
        let masked = check_root(Path::new("/tmp/x/sessions")).unwrap_err();
        assert!(format!("{masked:#}").contains("beneath /tmp"), "{masked:#}");
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = check_root(&closed.join("sessions")).unwrap_err();
        assert!(format!("{err:#}").contains("may not search"), "{err:#}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        check_root(&closed.join("sessions")).unwrap();
    }
}
