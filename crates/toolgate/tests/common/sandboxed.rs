//! A server with the sandbox on: this checkout's runtime and confinement library.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::PathBuf;

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
pub fn sandbox_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    dir
}
