//! The session manager with the confinement library (crates/sandbox-harden) loaded into the
//! zygote: every session is forked with a spec made from its workspace, and the confinement is
//! checked from inside, through the manager.
//!
//! The library is `TOOLGATE_HARDEN_LIB`, else `libtoolgate_sandbox_harden.so` in `target/debug`
//! or `target/debug/deps` (`cargo test --workspace` builds it there). A missing library fails
//! the test: build it with `cargo build -p toolgate-sandbox-harden`.

// The helpers are test code too: a panic is how they report failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{limits, manager, repo_root};
use toolgate_sandbox::client::{CallOutcome, SessionManager};

const LIBRARY: &str = "libtoolgate_sandbox_harden.so";

fn harden_lib() -> PathBuf {
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
    // this test's own executable lives in <target>/<profile>/deps, next to the library when the
    // workspace was built together
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from));
    let mut candidates = vec![
        target.join("debug").join(LIBRARY),
        target.join("debug/deps").join(LIBRARY),
    ];
    if let Some(deps) = exe_dir {
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
                "no hardening library ({LIBRARY}) in {candidates:?} and TOOLGATE_HARDEN_LIB is not \
                 set: build it with `cargo build -p toolgate-sandbox-harden`"
            )
        })
}

async fn exec(m: &SessionManager, account: &str, id: &str, code: &str) -> CallOutcome {
    let call = m
        .exec(account, Some(id), code, &limits(60), None)
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

fn text(call: &CallOutcome) -> &str {
    call.outcome
        .result
        .as_ref()
        .map_or("", |value| value.text_plain.as_str())
}

/// What `statement` raises, by type name ('ok' when nothing).
async fn raised(m: &SessionManager, account: &str, id: &str, statement: &str) -> String {
    let code = format!(
        "try:\n    {statement}\n    _r = 'ok'\nexcept BaseException as e:\n    _r = type(e).__name__\n_r"
    );
    text(&exec(m, account, id, &code).await).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardened_sessions_are_confined_to_their_workspace() {
    let lib = harden_lib();
    let root = tempfile::tempdir().unwrap();
    let m = manager(root.path(), |config| {
        config.zygote.harden_lib = Some(lib.clone());
    })
    .await;

    let first = exec(&m, "acct-a", "s1", "1+1").await;
    assert_eq!(text(&first), "2");
    // nothing preloaded: numpy is read from the runtime after hardening
    let numpy = exec(
        &m,
        "acct-a",
        "s1",
        "import numpy\nint(numpy.arange(5).sum())",
    )
    .await;
    assert_eq!(text(&numpy), "10");
    let write = exec(&m, "acct-a", "s1", "open('note.txt', 'w').write('kept')").await;
    assert_eq!(text(&write), "4");
    assert_eq!(
        std::fs::read_to_string(first.workspace.join("note.txt")).unwrap(),
        "kept"
    );
    let hostname = exec(&m, "acct-a", "s1", "import socket\nsocket.gethostname()").await;
    assert_eq!(text(&hostname), "'sandbox'");

    let bash = m
        .bash(
            "acct-a",
            Some("s1"),
            "echo from-bash > b.txt; cat b.txt; cat /etc/shadow",
            &limits(60),
            None,
        )
        .await
        .unwrap();
    assert!(
        bash.outcome.stdout.contains("from-bash") && bash.outcome.exit_status != Some(0),
        "{:?}",
        bash.outcome
    );

    let denied = "'PermissionError'";
    assert_eq!(
        raised(&m, "acct-a", "s1", "open('/etc/shadow').read()").await,
        denied
    );
    // world-readable, but outside what the session may read
    assert_eq!(
        raised(&m, "acct-a", "s1", "open('/etc/passwd').read()").await,
        denied
    );
    assert_eq!(
        raised(
            &m,
            "acct-a",
            "s1",
            "import socket\n    socket.socket(socket.AF_INET)"
        )
        .await,
        denied
    );

    // another session, of the same account or another one, cannot read this one's workspace
    let note = first.workspace.join("note.txt");
    let read_note = format!("open({:?}).read()", note.to_str().unwrap());
    for account in ["acct-a", "acct-b"] {
        let other = exec(&m, account, "s2", "1").await;
        assert_ne!(other.pid, first.pid);
        assert_eq!(raised(&m, account, "s2", &read_note).await, denied);
        let list = format!("import os\n    os.listdir({:?})", first.workspace);
        assert_eq!(raised(&m, account, "s2", &list).await, denied);
    }
    // while the first session still reads its own
    assert_eq!(raised(&m, "acct-a", "s1", &read_note).await, "'ok'");
    m.shutdown().await;
}
