//! Confinement, proven on real processes: each test runs real Python (`python3` from PATH, its
//! real executable resolved) in a separate process hardened by the very code the zygote's
//! children run, either through the probe binary (`toolgate-harden-probe SPEC python3 -I -c …`,
//! a one-shot zygote whose only child is the hardened session, pid 1 of its pid namespace) or
//! through the C ABI loaded with ctypes. Every "denied" assertion that could also fail for a
//! reason unrelated to the hardening has a control: the same action succeeding without it.
//!
//! The machine runs the tests as root (as the zygote does here): namespaces, id maps and mounts
//! need it. Workspaces live in `/var/tmp` on the host; a session sees its own at
//! [`INSIDE`], in a root of its own where nothing else of the host exists.
//!
//! `cargo test -p toolgate-sandbox-harden -- --nocapture` shows the timing of a hardened fork.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};
use tempfile::TempDir;

mod c_abi;
mod filesystem;
mod namespaces;
mod network;
mod process;
mod syscalls;
mod workload;

const PROBE: &str = env!("CARGO_BIN_EXE_toolgate-harden-probe");
const MAX_OPEN_FILES: u64 = 200;
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The session's `/tmp`: smaller than `MAX_FILE_BYTES`, so a full `/tmp` is ENOSPC, not EFBIG.
const TMP_BYTES: u64 = 256 << 10;
/// The host uid the sessions of these tests run as (user 1000 inside).
const SESSION_UID: u32 = 1_000_123;

/// Helpers every Python snippet starts with; parameters arrive as JSON in `sys.argv[1]`.
const PRELUDE: &str = r#"
import ctypes, errno, json, os, socket, sys
P = json.loads(sys.argv[1])
def errno_of(action):
    try:
        action()
    except OSError as error:
        return error.errno
    return 0
def expect_permission_error(what, action):
    try:
        action()
    except PermissionError:
        return
    except OSError as error:
        raise AssertionError(f"{what}: expected PermissionError, got {error!r}")
    raise AssertionError(f"{what}: succeeded, expected PermissionError")
def expect_absent(what, action):
    try:
        action()
    except FileNotFoundError:
        return
    except OSError as error:
        raise AssertionError(f"{what}: expected FileNotFoundError, got {error!r}")
    raise AssertionError(f"{what}: succeeded, expected FileNotFoundError")
def expect_unwritable(what, action):
    try:
        action()
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return
        raise AssertionError(f"{what}: expected EACCES, EPERM or EROFS, got {error!r}")
    raise AssertionError(f"{what}: succeeded, expected a refusal")
"#;
/// The workspace's path inside a session (`WORKSPACE_INSIDE`).
const INSIDE: &str = "/workspace";

/// The real Python interpreter behind `python3` on PATH (pyenv puts a shell-script shim first,
/// which would need bash and pyenv's tree inside the sandbox).
struct Python {
    executable: PathBuf,
    prefix: PathBuf,
}

fn python() -> &'static Python {
    static PYTHON: OnceLock<Python> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = Command::new("python3")
            .args([
                "-c",
                "import os, sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix)",
            ])
            .output()
            .expect("python3 on PATH");
        assert!(output.status.success(), "python3 -c failed: {output:?}");
        let text = String::from_utf8(output.stdout).unwrap();
        let mut lines = text.lines();
        Python {
            executable: lines.next().unwrap().into(),
            prefix: lines.next().unwrap().into(),
        }
    })
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// A session's workspace, given to [`SESSION_UID`]; its temporary directory is its own `/tmp`.
struct Session {
    workspace: TempDir,
}

impl Session {
    fn new() -> Self {
        Self {
            workspace: scratch_dir(),
        }
    }

    fn workspace(&self) -> &Path {
        self.workspace.path()
    }

    fn spec(&self, network: bool) -> Value {
        self.spec_with(network, &[])
    }

    /// The spec the zygote would send: the Python prefix and the system's libraries read-only.
    fn spec_with(&self, network: bool, extra_read_only: &[&Path]) -> Value {
        let mut read_only: Vec<PathBuf> = vec![python().prefix.clone()];
        read_only.extend(
            [
                "/usr",
                "/lib",
                "/lib64",
                "/bin",
                "/etc/ld.so.cache",
                "/etc/alternatives",
            ]
            .iter()
            .map(PathBuf::from)
            .filter(|path| path.exists()),
        );
        read_only.extend(extra_read_only.iter().map(|path| path.to_path_buf()));
        json!({
            "workspace": self.workspace.path(),
            "tmp": "/tmp",
            "read_only": read_only,
            "max_open_files": MAX_OPEN_FILES,
            "max_file_bytes": MAX_FILE_BYTES,
            "hostname": "session-7",
            "network": network,
            "uid": SESSION_UID,
            "tmp_bytes": TMP_BYTES,
        })
    }
}

/// A directory outside `/tmp` (which sessions do not see), searchable by everyone (its parent
/// is `target/tmp`), owned by [`SESSION_UID`]: a workspace, or a neighbour's.
fn scratch_dir() -> TempDir {
    let dir = TempDir::new_in("/var/tmp").unwrap();
    std::os::unix::fs::chown(dir.path(), Some(SESSION_UID), Some(SESSION_UID)).unwrap();
    dir
}

/// A root-owned directory outside `/tmp` that sessions may search (mode 0755) but not write.
fn shared_dir() -> TempDir {
    let dir = TempDir::new_in("/var/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The hardened session of a running probe: the probe's only child (host pid).
fn session_pid(probe: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{probe}/task/{probe}/children")).unwrap();
    let pids: Vec<u32> = children
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "the probe has children {pids:?}");
    pids[0]
}

/// `-I -c PRELUDE+code PARAMS`: isolated mode (no user site, no PYTHON* variables).
fn python_args(code: &str, params: &Value) -> [String; 4] {
    [
        "-I".to_owned(),
        "-c".to_owned(),
        format!("{PRELUDE}\n{code}"),
        params.to_string(),
    ]
}

/// The probe hardening itself with `spec`, then exec'ing Python, in a clean environment.
fn hardened_command(spec: &Value, code: &str, params: &Value) -> Command {
    let mut command = Command::new(PROBE);
    command
        .arg(spec.to_string())
        .arg(&python().executable)
        .args(python_args(code, params))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", "/tmp")
        .current_dir(spec["workspace"].as_str().unwrap())
        .stdin(Stdio::null());
    command
}

/// Runs `code` in Python hardened by the probe.
fn run_hardened(spec: &Value, code: &str, params: &Value) -> Output {
    hardened_command(spec, code, params).output().unwrap()
}

/// Runs `code` in plain, unconfined Python: the control.
fn run_plain(code: &str, params: &Value) -> Output {
    Command::new(&python().executable)
        .args(python_args(code, params))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Checks a successful run and returns its stdout.
fn succeeded(output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The cdylib of this crate. Cargo writes it into `target/<profile>/deps/` (beside this test
/// binary) whenever it compiles the library, `cargo test` included, and copies it up to
/// `target/<profile>/` only on `cargo build`; the first is always the current build.
fn cdylib() -> PathBuf {
    const NAME: &str = "libtoolgate_sandbox_harden.so";
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().expect("test binary in target/<profile>/deps");
    let candidates = [deps.join(NAME), deps.parent().unwrap().join(NAME)];
    candidates
        .iter()
        .find(|path| path.exists())
        .unwrap_or_else(|| {
            panic!(
                "the cdylib is at none of {candidates:?}: build it with \
                 `cargo build -p toolgate-sandbox-harden`"
            )
        })
        .clone()
}
