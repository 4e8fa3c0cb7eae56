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

    // code on a node reaches the network through the node's proxy, under the grant the front
    // end sent with the run: the guard there refuses loopback, and the record comes back
    let guarded = write(
        &front,
        &alice.key,
        json!({"code": "import requests\nr = requests.get('http://127.0.0.1:9/', timeout=10)\n(r.status_code, 'loopback' in r.text)", "session_id": "s1"}),
    )
    .await;
    assert_eq!(value(&guarded), "(403, True)", "{guarded}");
    assert_eq!(
        guarded["structuredContent"]["python"]["network"][0]["port"], 9,
        "{guarded}"
    );

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

/// A CA in `dir` and two certificates it signs: the node's (serverAuth, naming 127.0.0.1) and
/// a front end's (clientAuth, its key readable by the unprivileged front end only). Each as
/// the three `--node-tls-*` flags.
fn mutual_tls(dir: &Path) -> (Vec<String>, Vec<String>) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
        KeyPair,
    };
    use std::os::unix::fs::PermissionsExt;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let ca_file = dir.join("tls-ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let issue = |who: &str, names: Vec<String>, purpose, owner: Option<u32>| {
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let (cert_file, key_file) = (
            dir.join(format!("{who}.pem")),
            dir.join(format!("{who}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&key_file, owner, owner).unwrap();
        [
            "--node-tls-cert",
            cert_file.to_str().unwrap(),
            "--node-tls-key",
            key_file.to_str().unwrap(),
            "--node-tls-ca",
            ca_file.to_str().unwrap(),
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let node = issue(
        "tls-node",
        vec!["127.0.0.1".to_owned()],
        ExtendedKeyUsagePurpose::ServerAuth,
        None,
    );
    let front = issue(
        "tls-front",
        Vec::new(),
        ExtendedKeyUsagePurpose::ClientAuth,
        Some(FRONT_END_UID),
    );
    (node, front)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_runs_on_a_node_over_mutual_tls() {
    let dir = sandbox_dir();
    let (node_tls, front_tls) = mutual_tls(dir.path());
    let node_flags: Vec<&str> = node_tls.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start_with(dir.path(), 1, false, &node_flags).await;
    let address = cluster.nodes[0]
        .base
        .trim_start_matches("http://")
        .to_owned();
    cluster.nodes[0].base = format!("https://{address}");
    let storage = Storage::sqlite(&dir.path().join("front"));
    let front_flags: Vec<&str> = front_tls.iter().map(String::as_str).collect();
    let front = cluster.front_end(&storage, &front_flags).await;
    let alice = create_account(&storage, "mtls@example.org");
    let set = write(
        &front,
        &alice.key,
        json!({"code": "kept = 6 * 7", "session_id": "tls"}),
    )
    .await;
    assert!(!is_error(&set), "{set}");
    let got = write(
        &front,
        &alice.key,
        json!({"code": "kept", "session_id": "tls"}),
    )
    .await;
    assert_eq!(value(&got), "42", "{got}");

    // plaintext h2c to that node gets nothing: `node --drain` without the TLS settings fails,
    // with a front end's certificate it drains
    let drain = |tls: &[String]| {
        std::process::Command::new(BIN)
            .args(["node", "--drain", "--listen", &address, "--node-token-file"])
            .arg(&cluster.token)
            .args(tls)
            .output()
            .unwrap()
    };
    assert!(!drain(&[]).status.success());
    let drained = drain(&front_tls);
    assert!(
        drained.status.success(),
        "{}",
        String::from_utf8_lossy(&drained.stderr)
    );
    let answer: Value = serde_json::from_slice(&drained.stdout).unwrap();
    assert_eq!(answer["drained"], true, "{answer}");
}
