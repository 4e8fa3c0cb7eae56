//! Helpers shared by the integration tests: where the runtime and the zygote script are.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};
use tempfile::TempDir;

use toolgate_sandbox::{LimitSettings, Limits};
use toolgate_sandbox_manager::{ManagerConfig, RunOutcome, SandboxManager, ZygoteConfig};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn zygote_config(preload: Option<Vec<String>>) -> ZygoteConfig {
    let runtime = std::env::var_os("TOOLGATE_PYTHON_RUNTIME")
        .map_or_else(|| repo_root().join(".deps/python-runtime"), PathBuf::from);
    assert!(
        runtime.join("bin/python").exists(),
        "no Python runtime at {}: build one with `bash scripts/python-runtime.sh DIR` and set \
         TOOLGATE_PYTHON_RUNTIME=DIR (default .deps/python-runtime)",
        runtime.display()
    );
    let mut config = ZygoteConfig::new(runtime, repo_root().join("runtime/toolgate_zygote.py"));
    config.preload = preload;
    config
}

/// Most tests need no data stack: preloading nothing starts the zygote in ~0.1 s.
pub async fn manager(root: &Path, tweak: impl FnOnce(&mut ManagerConfig)) -> SandboxManager {
    let mut config = ManagerConfig::new(zygote_config(Some(vec![])), root);
    tweak(&mut config);
    SandboxManager::start(config).await.unwrap()
}

pub fn limits(seconds: u64) -> Limits {
    LimitSettings::default().for_call(Some(seconds)).unwrap()
}

/// Polls until `cond` holds (background clean-up), failing after five seconds.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn process_gone(pid: i32) -> bool {
    // a zombie still has a /proc entry: "gone" means reaped by the zygote
    !Path::new(&format!("/proc/{pid}")).exists()
}

const LIBRARY: &str = "libtoolgate_sandbox_harden.so";

/// The confinement library: `TOOLGATE_HARDEN_LIB`, else `target/debug` .
pub fn harden_lib() -> PathBuf {
    if let Some(lib) = std::env::var_os("TOOLGATE_HARDEN_LIB") {
        let lib = PathBuf::from(lib);
        assert!(
            lib.is_file(),
            "TOOLGATE_HARDEN_LIB={} is not a file: build it with \
             `cargo build -p toolgate-sandbox-harden`",
            lib.display()
        );
        return lib;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), PathBuf::from);
    let mut candidates = vec![
        target.join("debug").join(LIBRARY),
        target.join("debug/deps").join(LIBRARY),
    ];
    if let Some(deps) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
    {
        if let Some(profile) = deps.parent() {
            candidates.push(profile.join(LIBRARY));
        }
        candidates.push(deps.join(LIBRARY));
    }
    candidates
        .iter()
        .find(|lib| lib.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no hardening library ({LIBRARY}) in {candidates:?} and TOOLGATE_HARDEN_LIB is \
                 not set: build it with `cargo build -p toolgate-sandbox-harden`"
            )
        })
}

/// A directory outside `/tmp` (each session has its own empty `/tmp`) whose ancestors the
/// sessions' uids may search.
pub fn outside_tmp() -> TempDir {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    dir
}

/// What a confined session's own `/tmp` holds before it writes anything: nothing, or, when the
/// runtime lives beneath `/tmp` (a checkout there), the first directory on the way to it, bound
/// back into every session's `/tmp`.
pub fn tmp_skeleton() -> Vec<String> {
    let runtime = zygote_config(None).runtime;
    let runtime = runtime.canonicalize().unwrap_or(runtime);
    runtime
        .strip_prefix("/tmp")
        .ok()
        .and_then(|below| below.components().next())
        .map(|first| vec![first.as_os_str().to_string_lossy().into_owned()])
        .unwrap_or_default()
}

/// The text of a call's last value (empty without one).
pub fn text(call: &RunOutcome) -> &str {
    call.outcome
        .result
        .as_ref()
        .map_or("", |value| value.text_plain.as_str())
}

/// The type of the exception a call raised (empty without one).
pub fn error_type(call: &RunOutcome) -> &str {
    call.outcome
        .error
        .as_ref()
        .map_or("", |e| e.error_type.as_str())
}

/// Runs `code` in session `id`, failing the test if the call or the code fails.
pub async fn exec_ok(m: &SandboxManager, account: &str, id: &str, code: &str) -> RunOutcome {
    let call = m
        .exec(account, Some(id), code, &limits(60), &[], None)
        .await
        .unwrap();
    assert!(
        call.outcome.error.is_none(),
        "{code:?} failed: {:?}\nstderr: {}",
        call.outcome.error,
        call.outcome.stderr
    );
    call
}
