//! A server with the sandbox on: this checkout's runtime and confinement library.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::PathBuf;

use serde_json::Value;

use super::*;

/// The checkout's root.
pub fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Flags that turn the sandbox on with this checkout's runtime and confinement library.
pub fn sandbox_flags(dir: &std::path::Path) -> Vec<String> {
    let root = checkout();
    let lib = std::env::var("TOOLGATE_HARDEN_LIB").map_or_else(
        |_| root.join("target/debug/libtoolgate_sandbox_harden.so"),
        PathBuf::from,
    );
    assert!(
        lib.is_file(),
        "no confinement library at {}: cargo build -p toolgate-sandbox-harden",
        lib.display()
    );
    let runtime = root.join(".deps/python-runtime");
    assert!(
        runtime.is_dir(),
        "no runtime at {}: scripts/python-runtime.sh .deps/python-runtime",
        runtime.display()
    );
    [
        "--sandbox",
        "on",
        "--sandbox-runtime",
        runtime.to_str().unwrap(),
        "--sandbox-zygote",
        root.join("runtime/toolgate_zygote.py").to_str().unwrap(),
        "--sandbox-harden-lib",
        lib.to_str().unwrap(),
        "--sandbox-root",
        dir.join("sessions").to_str().unwrap(),
        "--sandbox-max-sessions",
        "3",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A directory for a sandboxed server's data: not under /tmp (each session has its own empty
/// /tmp), and searchable by the sessions' uids wherever the checkout lives.
pub fn sandbox_dir() -> SandboxDir {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    SandboxDir(dir)
}

/// A [`sandbox_dir`]. A server killed on purpose (SIGKILL, as a crash) leaves its workspace
/// mounts on the host, as a crash would (the next server on the same root detaches them; a
/// test's root is never used again): dropped, this detaches every mount still under it, deepest
/// first, before the directory goes.
pub struct SandboxDir(tempfile::TempDir);

impl SandboxDir {
    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl From<tempfile::TempDir> for SandboxDir {
    fn from(dir: tempfile::TempDir) -> Self {
        Self(dir)
    }
}

impl Drop for SandboxDir {
    fn drop(&mut self) {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut under = mounts_under(&table, self.0.path());
        under.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in under {
            let _ = std::process::Command::new("umount")
                .args(["-l", &point])
                .status();
        }
    }
}

/// The mount points in `table` (`/proc/self/mountinfo`) below `dir`. Taken as the kernel
/// writes them: a test's directory and the workspaces under it have no character that
/// mountinfo escapes.
fn mounts_under(table: &str, dir: &std::path::Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// A server with the sandbox on and two accounts, stopped (and checked for left-behind mounts)
/// when dropped.
pub struct Fixture {
    pub _dir: SandboxDir,
    pub server: Server,
    pub http: reqwest::Client,
    pub alice: Account,
    pub bob: Account,
}

/// Starts the server of a [`Fixture`].
pub async fn fixture() -> Fixture {
    fixture_with(&[]).await
}

/// Starts the server of a [`Fixture`] with `extra` flags.
pub async fn fixture_with(extra: &[&str]) -> Fixture {
    let dir = sandbox_dir();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "alice@example.org");
    let bob = create_account(&storage, "bob@example.org");
    let flags = sandbox_flags(dir.path());
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend_from_slice(extra);
    let server = Server::start(&storage, &flags).await;
    Fixture {
        _dir: dir,
        server,
        http: client(),
        alice,
        bob,
    }
}

impl Fixture {
    /// The host directory holding every session's workspace (`<account>/<hash of the id>`).
    pub fn sessions_root(&self) -> PathBuf {
        self._dir.path().join("sessions")
    }
}

impl Drop for Fixture {
    /// Stops the server gracefully and checks that it left no workspace mount behind.
    fn drop(&mut self) {
        self.server.stop();
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self._dir.path().to_string_lossy().into_owned();
        let left: Vec<&str> = table.lines().filter(|line| line.contains(&dir)).collect();
        if !std::thread::panicking() {
            assert!(left.is_empty(), "mounts left behind: {left:?}");
        }
    }
}

impl Fixture {
    /// `tools/call` of `tool` as `who`; its result.
    pub async fn call(&self, who: &Account, tool: &str, args: Value) -> Value {
        let reply = post_personal(&self.http, &self.server, &who.key, &tool_call(tool, args)).await;
        reply.result()
    }

    /// svc_write as alice; its result.
    pub async fn write(&self, args: Value) -> Value {
        self.call(&self.alice, "svc_write", args).await
    }
}

/// The result of `svc_write` with `args`, through the personal URL (bare POST).
pub async fn write(server: &Server, key: &str, args: Value) -> Value {
    post_personal(&client(), server, key, &tool_call("svc_write", args))
        .await
        .result()
}

/// A Python result's session record.
pub fn session(result: &Value) -> &Value {
    &result["structuredContent"]["python"]["session"]
}

/// The value of a Python cell's last expression.
pub fn value(result: &Value) -> String {
    result["structuredContent"]["python"]["result"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
