//! The sandbox's settings, checked: the switch, the operator's limits, the idle expiry and the
//! session cap, where the runtime, the zygote script and the confinement library are, and the
//! sessions root. Only looked at, never created: the manager makes what it needs at start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toolgate_sandbox::LimitSettings;
use toolgate_sandbox_manager::Budget;

use super::{ConfigError, Settings};

/// The confinement library's file name, as cargo builds it.
const HARDEN_LIB: &str = "libtoolgate_sandbox_harden.so";

/// What the session manager starts with.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The operator's limits of one call.
    pub limits: LimitSettings,
    /// The Python runtime, absolute.
    pub runtime: PathBuf,
    /// The zygote script, absolute.
    pub script: PathBuf,
    /// The confinement library, absolute; `None`: confinement is off (development only).
    pub harden_lib: Option<PathBuf>,
    /// Where session workspaces live, absolute.
    pub root: PathBuf,
    /// A session without a call this long expires.
    pub idle_ttl: Duration,
    /// Live sessions per account.
    pub max_sessions_per_account: usize,
    /// Warm sessions kept ready at least, and at most under demand.
    pub warm_sessions: (usize, usize),
    /// All sessions together.
    pub budget: Budget,
    /// The first host uid of sessions.
    pub first_uid: u32,
    /// Where and when sessions are checkpointed; `None`: they live only as long as the process.
    pub checkpoints: Option<super::checkpoints::CheckpointsConfig>,
    /// Sessions' way out; `None`: they have no network.
    pub network: Option<toolgate_egress_proxy::ProxySettings>,
}

impl SandboxConfig {
    /// The sandbox's configuration, or `None` when the operator turned the sandbox off.
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>, ConfigError> {
        match settings.sandbox.as_deref().unwrap_or("on") {
            "on" => {}
            "off" => return Ok(None),
            other => {
                return Err(ConfigError::new(
                    "sandbox",
                    format!("must be `on` or `off`, got {other:?}"),
                ));
            }
        }
        let limits = limits(settings)?;
        let first_uid = first_uid(settings)?;
        if settings.sandbox_max_sessions == Some(0) {
            return Err(ConfigError::new(
                "sandbox_max_sessions",
                "must be at least 1",
            ));
        }
        let warm_sessions = warm_sessions(settings)?;
        let idle_ttl = idle_ttl(settings)?;
        let checkpoints = super::checkpoints::CheckpointsConfig::from_settings(settings, idle_ttl)?;
        let runtime = locate(settings.sandbox_runtime.as_deref(), ".deps/python-runtime").map_err(
            |missing| {
                ConfigError::new(
                    "sandbox_runtime",
                    format!(
                        "no Python runtime for the sandbox ({missing}): build one with \
                         `scripts/python-runtime.sh .deps/python-runtime`, name it with \
                         --sandbox-runtime, or pass --sandbox off"
                    ),
                )
            },
        )?;
        // a confined session holds the runtime at its real path (its mounts resolve links), so
        // the zygote runs from there: then sys.path, sys.executable and the interpreter lines of
        // the runtime's scripts (`pip`) name paths that exist in the session
        let runtime = std::fs::canonicalize(&runtime).unwrap_or(runtime);
        let script = locate(
            settings.sandbox_zygote.as_deref(),
            "runtime/toolgate_zygote.py",
        )
        .map_err(|missing| {
            ConfigError::new(
                "sandbox_zygote",
                format!("no zygote script ({missing}): name it with --sandbox-zygote"),
            )
        })?;
        let harden_lib = harden_lib(settings)?;
        let root = settings
            .sandbox_root
            .clone()
            .unwrap_or_else(|| settings.data_dir().join("sessions"));
        let root = std::path::absolute(&root).map_err(|err| {
            ConfigError::new("sandbox_root", format!("{}: {err}", root.display()))
        })?;
        if harden_lib.is_some() {
            check_root(&root)?;
        }
        Ok(Some(Self {
            limits,
            runtime,
            script,
            harden_lib,
            root,
            idle_ttl,
            max_sessions_per_account: settings.sandbox_max_sessions.unwrap_or(10),
            warm_sessions,
            budget: budget(settings),
            first_uid,
            checkpoints,
            network: settings.proxy_settings()?,
        }))
    }
}

/// The warm pool's floor and ceiling: at most [`MAX_WARM_SESSIONS`] each, the ceiling not
/// under the floor.
fn warm_sessions(settings: &Settings) -> Result<(usize, usize), ConfigError> {
    let floor = settings.sandbox_warm_sessions.unwrap_or(2);
    let ceiling = settings.sandbox_warm_sessions_max.unwrap_or(256.max(floor));
    for (key, value) in [
        ("sandbox_warm_sessions", floor),
        ("sandbox_warm_sessions_max", ceiling),
    ] {
        if value > MAX_WARM_SESSIONS {
            return Err(ConfigError::new(
                key,
                format!("must be at most {MAX_WARM_SESSIONS}, got {value}"),
            ));
        }
    }
    if ceiling < floor {
        return Err(ConfigError::new(
            "sandbox_warm_sessions_max",
            format!("must be at least sandbox_warm_sessions ({floor}), got {ceiling}"),
        ));
    }
    Ok((floor, ceiling))
}

/// The most warm sessions a setting may ask for: each is a process and a uid.
const MAX_WARM_SESSIONS: usize = 4096;

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
/// `sandbox_first_uid`: above the system's and users' uids, with room for 65,536 after it.
fn first_uid(settings: &Settings) -> Result<u32, ConfigError> {
    let first = settings
        .sandbox_first_uid
        .unwrap_or(toolgate_sandbox_manager::DEFAULT_SANDBOX_UID);
    if !(100_000..=u32::MAX - (1 << 17)).contains(&first) {
        return Err(ConfigError::new(
            "sandbox_first_uid",
            format!(
                "must be between 100000 and {}, got {first}",
                u32::MAX - (1 << 17)
            ),
        ));
    }
    Ok(first)
}

/// `sandbox_idle_minutes`: how long a session may sit idle (at least a minute).
pub(super) fn idle_ttl(settings: &Settings) -> Result<Duration, ConfigError> {
    match settings.sandbox_idle_minutes {
        Some(0) => Err(ConfigError::new(
            "sandbox_idle_minutes",
            "must be at least 1",
        )),
        minutes => Ok(Duration::from_secs(
            minutes.unwrap_or(20).saturating_mul(60),
        )),
    }
}

pub(super) fn limits(settings: &Settings) -> Result<LimitSettings, ConfigError> {
    const MIB: u64 = 1024 * 1024;
    let defaults = LimitSettings::default();
    let max_timeout = settings
        .sandbox_max_timeout_s
        .unwrap_or(defaults.max_timeout.as_secs());
    let default_timeout = settings
        .sandbox_default_timeout_s
        .unwrap_or(defaults.default_timeout.as_secs());
    let max_task_timeout = settings
        .sandbox_max_task_s
        .unwrap_or(defaults.max_task_timeout.as_secs());
    if max_task_timeout < max_timeout || max_task_timeout > 7 * 24 * 3600 {
        return Err(ConfigError::new(
            "sandbox_max_task_s",
            format!(
                "{max_task_timeout} must be at least sandbox_max_timeout_s ({max_timeout}) and at most 604800 (a week)"
            ),
        ));
    }
    if max_timeout == 0 || default_timeout == 0 || default_timeout > max_timeout {
        return Err(ConfigError::new(
            "sandbox_default_timeout_s",
            format!(
                "{default_timeout} must be between 1 and sandbox_max_timeout_s ({max_timeout})"
            ),
        ));
    }
    let memory = settings
        .sandbox_memory_mib
        .unwrap_or(defaults.memory_bytes / MIB);
    let workspace = settings
        .sandbox_workspace_mib
        .unwrap_or(defaults.workspace_bytes / MIB);
    let processes = settings.sandbox_max_processes.unwrap_or(defaults.max_pids);
    let too_small = if memory < 64 {
        Some(("sandbox_memory_mib", "at least 64"))
    } else if workspace < 1 {
        Some(("sandbox_workspace_mib", "at least 1"))
    } else if processes < 8 {
        Some(("sandbox_max_processes", "at least 8"))
    } else {
        None
    };
    if let Some((setting, least)) = too_small {
        return Err(ConfigError::new(
            setting,
            format!("sandbox limits too small: must be {least}"),
        ));
    }
    Ok(LimitSettings {
        default_timeout: Duration::from_secs(default_timeout),
        max_timeout: Duration::from_secs(max_timeout),
        max_task_timeout: Duration::from_secs(max_task_timeout),
        memory_bytes: memory.saturating_mul(MIB),
        max_pids: processes,
        output_bytes: defaults.output_bytes,
        workspace_bytes: workspace.saturating_mul(MIB),
    })
}

/// The confinement library, or `None` when the operator turned confinement off.
fn harden_lib(settings: &Settings) -> Result<Option<PathBuf>, ConfigError> {
    match settings
        .sandbox_confinement
        .as_deref()
        .unwrap_or("required")
    {
        "required" => {}
        "off" => return Ok(None),
        other => {
            return Err(ConfigError::new(
                "sandbox_confinement",
                format!("must be `required` or `off`, got {other:?}"),
            ));
        }
    }
    if let Some(path) = &settings.sandbox_harden_lib {
        if !path.is_file() {
            return Err(ConfigError::new(
                "sandbox_harden_lib",
                format!("{} is not a file", path.display()),
            ));
        }
        // the zygote runs elsewhere and loads it by name: never relative
        return std::path::absolute(path).map(Some).map_err(|err| {
            ConfigError::new("sandbox_harden_lib", format!("{}: {err}", path.display()))
        });
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(HARDEN_LIB)))
        .filter(|path| path.is_file());
    beside.map(Some).ok_or_else(|| {
        ConfigError::new(
            "sandbox_harden_lib",
            format!(
                "no confinement library ({HARDEN_LIB}) next to this binary: build it with \
                 `cargo build --release -p toolgate-sandbox-harden`, name it with \
                 --sandbox-harden-lib, or pass --sandbox-confinement off (development only)"
            ),
        )
    })
}

/// Directories every confined session sees as its own empty mounts: a workspace beneath one of
/// them would be hidden from its session.
const MASKED: [&str; 5] = ["/tmp", "/dev/shm", "/run", "/var/run", "/proc"];

/// Refuses, at start rather than at the first call, a sessions root that confined sessions
/// could not reach: beneath a masked directory, or below a directory others may not search
/// (sessions run as unprivileged users of their own).
fn check_root(root: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(masked) = MASKED.iter().find(|m| root.starts_with(m)) {
        return Err(ConfigError::new(
            "sandbox_root",
            format!(
                "{} lies beneath {masked}, which every confined session sees as its own \
                 empty directory: choose a directory elsewhere (the default is \
                 <data_dir>/sessions)",
                root.display()
            ),
        ));
    }
    for ancestor in root.ancestors().skip(1) {
        let Ok(metadata) = std::fs::metadata(ancestor) else {
            continue; // created later by the manager, searchable
        };
        if metadata.permissions().mode() & 0o001 == 0 {
            return Err(ConfigError::new(
                "sandbox_root",
                format!(
                    "{} is below {}, which other users may not search (mode {:o}); sessions \
                     run as unprivileged users and must reach their workspace: choose another \
                     directory or allow search (chmod o+x)",
                    root.display(),
                    ancestor.display(),
                    metadata.permissions().mode() & 0o7777
                ),
            ));
        }
    }
    Ok(())
}

/// `given`, else `default` under the working directory, else under the checkout this binary
/// was built in (`<checkout>/target/<profile>/toolgate`); the error says what is missing.
fn locate(given: Option<&Path>, default: &str) -> Result<PathBuf, String> {
    let absolute =
        |path: &Path| std::path::absolute(path).map_err(|err| format!("{}: {err}", path.display()));
    if let Some(path) = given {
        if !path.exists() {
            return Err(format!("{} does not exist", path.display()));
        }
        return absolute(path);
    }
    let here = Path::new(default);
    if here.exists() {
        return absolute(here);
    }
    let checkout = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(|root| root.join(default)))
        .filter(|path| path.exists());
    checkout.ok_or_else(|| format!("{default} not found"))
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
