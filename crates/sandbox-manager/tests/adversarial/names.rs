//! The adversarial suite, part 5: what a session can learn by `stat` alone. Landlock governs
//! opening, not looking up, so before the sessions root's directory was masked a session could
//! `stat` the warm workspaces beside its own (`.warm/<prefix>-N`: which exist, their owners and
//! times) and the database beside the sessions root (its size and times: the service's call
//! volume). Now a session has a root of its own, where the workspace is `/workspace` and none of
//! the host's directories exists.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness::{PROBE, Sandbox, json, small};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbours_and_the_database_cannot_even_be_stat() {
    let s = Sandbox::start(|_| {}).await;
    let limits = small(30);
    // what a data directory holds beside the sessions root
    let database = s.dir.path().join("toolgate.db");
    std::fs::write(&database, vec![0u8; 8192]).unwrap();
    let own = s.ok("acct-a", "a", "1", &limits).await;
    let neighbour = s.ok("acct-b", "b", "1", &limits).await;
    // warm workspaces made ready for the next sessions, and the other account's workspace
    let warm_dir = s.root.join(".warm");
    let mut targets: Vec<String> = std::fs::read_dir(&warm_dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !targets.is_empty(),
        "the manager keeps warm workspaces in {warm_dir:?}"
    );
    targets.push(neighbour.workspace.display().to_string());
    targets.push(database.display().to_string());
    targets.push(s.root.display().to_string());
    // the session's own host path too: nothing of the host's tree is around its workspace
    targets.push(own.workspace.display().to_string());
    let code = format!(
        "{PROBE}\
         for i, path in enumerate({targets:?}):\n    \
             attempt(f'stat{{i}}', lambda: os.stat(path).st_size)\n\
         attempt('data_dir', lambda: os.listdir({data:?}))\n\
         attempt('own', lambda: os.stat({own:?}).st_mode)\n\
         json.dumps(seen)",
        data = s.dir.path().display().to_string(),
        own = "/workspace",
    );
    assert!(own.workspace.exists() && s.dir.path().exists());
    let seen = json(&s.ok("acct-a", "a", &code, &limits).await);
    println!("{seen:#}");
    for (i, path) in targets.iter().enumerate() {
        let value = seen[format!("stat{i}")].as_str().unwrap();
        assert!(
            value.starts_with("FileNotFoundError:"),
            "{path} could be looked up: {value}"
        );
    }
    assert!(
        seen["data_dir"]
            .as_str()
            .unwrap()
            .starts_with("FileNotFoundError:"),
        "{seen:#}"
    );
    assert!(seen["own"].as_str().unwrap().starts_with("ok:"), "{seen:#}");
    s.m.shutdown().await;
}
