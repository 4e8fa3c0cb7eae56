//! Many hosts, through the real binaries: `toolgate node` processes own the sessions (root,
//! confinement, cgroups), and `toolgate serve --nodes …` runs as an unprivileged user with no
//! capability and reaches them only over the node channel. State, upcalls, cancellation and
//! errors cross it; a node killed mid-call ends the call with a clear error.
//!
//! Needs what `sandbox` needs (the Python runtime and the confinement library) and root (the
//! nodes are root, the front end drops to `nobody` through `setpriv`); the two-front-end test
//! needs PostgreSQL (`TOOLGATE_TEST_POSTGRES_URL`, which `scripts/test.sh` sets).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::sandbox::{is_error, text};

/// A process's effective capabilities and real and effective uids, from /proc.
fn identity(pid: u32) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap()
            .trim()
            .to_owned()
    };
    (field("CapEff:"), field("Uid:"))
}

/// Whether `nobody` can list `dir`.
fn nobody_can_list(dir: &Path) -> bool {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "ls",
            "-A",
        ])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_on_nodes_behind_an_unprivileged_front_end() {
    let dir = sandbox_dir();
    let mut cluster = Cluster::start(dir.path(), 2).await;
    let storage = Storage::sqlite(&dir.path().join("front"));
    let front = cluster.front_end(&storage, &[]).await;
    let alice = create_account(&storage, "on-nodes@example.org");

    // the front end holds no capability and is not root
    let (caps, uids) = identity(front.pid());
    assert_eq!(
        caps, "0000000000000000",
        "the front end's effective capabilities"
    );
    assert!(
        uids.split_whitespace().all(|uid| uid == "65534"),
        "its uids: {uids}"
    );
    // and cannot look into a node's sessions
    std::fs::create_dir_all(cluster.node_dir(0).join("sessions")).unwrap();
    assert!(!nobody_can_list(&cluster.node_dir(0).join("sessions")));
    assert!(
        nobody_can_list(&storage.data_dir),
        "the check itself can pass"
    );

    // state lives in a session across calls, and several sessions spread over the nodes
    for n in 0..6 {
        let id = format!("s{n}");
        let first = write(
            &front,
            &alice.key,
            json!({"code": format!("x = {n} * 10"), "session_id": id}),
        )
        .await;
        assert!(!is_error(&first), "{first}");
        let second = write(
            &front,
            &alice.key,
            json!({"code": "x + 1", "session_id": id}),
        )
        .await;
        assert_eq!(value(&second), (n * 10 + 1).to_string(), "{second}");
    }
    // bash and uploaded files cross too
    let bash = write(
        &front,
        &alice.key,
        json!({"bash": "cat in.txt; id -u", "session_id": "s0", "files": [{"path": "in.txt", "content": "crossed\n"}]}),
    )
    .await;
    assert!(text(&bash).contains("crossed"), "{bash}");

    // an upcall from code on a node is answered (and metered) by the front end
    let billing = write(
        &front,
        &alice.key,
        json!({"code": "import toolgate\ntoolgate.billing()['free_monthly_limit']", "session_id": "s1"}),
    )
    .await;
    assert_eq!(value(&billing), "1000", "{billing}");

    // a node killed mid-call ends the call with a clear error, in well under a minute
    let busy = tokio::spawn({
        let base = front.base.clone();
        let port = front.port;
        let key = alice.key.clone();
        async move {
            let server = ServerRef { base, port };
            server
                .write(
                    &key,
                    json!({"code": "import time\ntime.sleep(60)", "session_id": "doomed"}),
                )
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    for node in &mut cluster.nodes {
        node.kill();
    }
    let lost = tokio::time::timeout(Duration::from_secs(20), busy)
        .await
        .unwrap()
        .unwrap();
    assert!(is_error(&lost), "{lost}");
    assert!(text(&lost).contains("execution node"), "{lost}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // with no node left, a call is refused clearly and charged nothing more than a tool error
    let refused = write(&front, &alice.key, json!({"code": "1", "session_id": "s2"})).await;
    assert!(is_error(&refused), "{refused}");
}

/// A front end's address, to call it from a task.
struct ServerRef {
    base: String,
    port: u16,
}

impl ServerRef {
    async fn write(&self, key: &str, args: Value) -> Value {
        let reply = client()
            .post(format!("{}/u/{key}", self.base))
            .header("accept", "application/json, text/event-stream")
            .json(&tool_call("svc_write", args))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "port {}", self.port);
        let body: Value = reply.json().await.unwrap();
        body["result"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_the_same_through_either_front_end() {
    let url = std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it");
    let dir = sandbox_dir();
    let cluster = Cluster::start(dir.path(), 2).await;
    let one = Storage::postgres(&dir.path().join("front-1"), &url);
    let two = Storage::postgres(&dir.path().join("front-2"), &url);
    let first = cluster.front_end(&one, &[]).await;
    let second = cluster.front_end(&two, &[]).await;
    let alice = create_account(
        &one,
        &format!("two-front-ends-{}@example.org", std::process::id()),
    );
    for n in 0..4 {
        let id = format!("shared-{n}");
        let set = write(
            &first,
            &alice.key,
            json!({"code": format!("import math\nkept = {n} + math.pi"), "session_id": id}),
        )
        .await;
        assert!(!is_error(&set), "{set}");
        let got = write(
            &second,
            &alice.key,
            json!({"code": "round(kept, 2)", "session_id": id}),
        )
        .await;
        assert_eq!(
            value(&got),
            format!("{:.2}", f64::from(n) + std::f64::consts::PI),
            "{got}"
        );
    }
}
