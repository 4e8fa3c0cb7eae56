//! Many hosts failing, through the real binaries: two front ends (as `nobody`) on one
//! PostgreSQL and three nodes, each in a network namespace of the test's, sharing a checkpoint
//! directory. A node killed, and a node cut off from the network, lose only what changed since
//! each session's last checkpoint: the next call restores the session on another node and says
//! so; the cut-off node, joined again, holds none of them. A drained node gives its sessions up
//! whole. Metering stays exact when calls race through both front ends. A front end killed
//! mid-call loses nothing committed.
//!
//! Needs root, iproute2 (`scripts/deps.sh`), the sandbox's runtime and confinement library, and
//! PostgreSQL (`TOOLGATE_TEST_POSTGRES_URL`, which `scripts/test.sh` sets).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_domain::{AccountId, SandboxSessionId};
use toolgate_store::Store;

use crate::common::*;
use crate::sandbox::{is_error, text};

fn postgres_url() -> String {
    std::env::var("TOOLGATE_TEST_POSTGRES_URL")
        .expect("TOOLGATE_TEST_POSTGRES_URL: scripts/test.sh starts a server and sets it")
}

/// Which of the cluster's nodes owns the session now, by the placement store.
async fn owner_of(
    store: &Arc<dyn Store>,
    cluster: &Cluster,
    account: &str,
    id: &str,
) -> Option<usize> {
    let owner = store
        .session_owner(
            &AccountId::from_stored(account.to_owned()),
            &SandboxSessionId::parse(id).unwrap(),
        )
        .await
        .unwrap()?;
    cluster.nodes.iter().position(|node| {
        let name = node.base.trim_start_matches("http://").replace(':', "-");
        name == owner.node.as_str()
    })
}

/// How often a session is checkpointed after a call (`sandbox_checkpoint_every_s`): long
/// enough that a call right after a checkpoint is certainly not followed by another.
const CHECKPOINT_EVERY_S: &str = "3";

/// Makes the session write its state out now, and waits until it has: a call once
/// [`CHECKPOINT_EVERY_S`] has passed since its last checkpoint is followed by one, written in
/// the background; the listing shows its age.
async fn checkpoint_now(server: &Server, key: &str, id: &str) {
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let touched = Instant::now();
    let call = write(server, key, json!({"code": "0", "session_id": id})).await;
    assert!(!is_error(&call), "{call}");
    let listing = tool_call("svc_read", json!({"sessions": true}));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = post_personal(&client(), server, key, &listing)
            .await
            .result();
        let fresh = listed["structuredContent"]["sessions"]["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["id"] == id)
            .filter_map(|s| s["checkpoint"]["age_s"].as_f64())
            .any(|age| age <= touched.elapsed().as_secs_f64() + 0.5);
        if fresh {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of {id} within 30 s: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_or_cut_off_node_loses_only_what_came_after_its_checkpoints() {
    let url = postgres_url();
    let dir = sandbox_dir();
    let mut cluster = Cluster::start_with(
        dir.path(),
        3,
        true,
        &["--sandbox-checkpoint-every-s", CHECKPOINT_EVERY_S],
    )
    .await;
    let one = Storage::postgres(&dir.path().join("fe-1"), &url);
    let two = Storage::postgres(&dir.path().join("fe-2"), &url);
    let lease = ["--node-lease-s", "3"];
    let first = cluster.front_end(&one, &lease).await;
    let second = cluster.front_end(&two, &lease).await;
    let alice = create_account(
        &one,
        &format!("failing-nodes-{}@example.org", std::process::id()),
    );
    let store = one.open_store().await;

    // sessions spread over the nodes; each is the same through either front end
    let ids: Vec<String> = (0..6).map(|n| format!("kept-{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let set = write(
            &first,
            &alice.key,
            json!({"code": format!("x = {n}"), "session_id": id}),
        )
        .await;
        assert!(!is_error(&set), "{set}");
        let got = write(&second, &alice.key, json!({"code": "x", "session_id": id})).await;
        assert_eq!(value(&got), n.to_string(), "{got}");
    }
    let mut owners = Vec::new();
    for id in &ids {
        owners.push(
            owner_of(&store, &cluster, &alice.id, id)
                .await
                .expect("an owner"),
        );
    }
    let used: std::collections::BTreeSet<usize> = owners.iter().copied().collect();
    assert!(
        used.len() >= 2,
        "sessions are spread over the nodes: {owners:?}"
    );

    // --- a node killed (kill -9) ---
    let victim = owners[0];
    checkpoint_now(&first, &alice.key, &ids[0]).await;
    // written right after the checkpoint, so not followed by another: lost with the node
    write(
        &first,
        &alice.key,
        json!({"code": "late = 1", "session_id": ids[0]}),
    )
    .await;
    cluster.nodes[victim].kill();
    let started = Instant::now();
    let back = write(
        &second,
        &alice.key,
        json!({"code": "x", "session_id": ids[0]}),
    )
    .await;
    assert!(!is_error(&back), "{back}");
    assert_eq!(
        value(&back),
        "0",
        "the session's state up to its checkpoint: {back}"
    );
    assert_eq!(session(&back)["restored"], true, "{back}");
    assert_eq!(session(&back)["node_lost"], true, "{back}");
    assert!(text(&back).contains("execution node"), "{back}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "restored within the lease and a little"
    );
    let late = write(
        &first,
        &alice.key,
        json!({"code": "'late' in globals()", "session_id": ids[0]}),
    )
    .await;
    assert_eq!(
        value(&late),
        "False",
        "what came after the checkpoint is gone: {late}"
    );
    let moved_to = owner_of(&store, &cluster, &alice.id, &ids[0])
        .await
        .unwrap();
    assert_ne!(moved_to, victim);

    // --- a node cut off from the network ---
    let alive: Vec<usize> = (0..3).filter(|n| *n != victim).collect();
    let cut = alive
        .iter()
        .copied()
        .find(|n| owners.iter().any(|o| o == n) && *n != moved_to)
        .unwrap_or(alive[0]);
    let on_cut: Vec<&String> = ids
        .iter()
        .zip(&owners)
        .filter(|(_, o)| **o == cut)
        .map(|(id, _)| id)
        .collect();
    let cut_id = on_cut
        .first()
        .map_or_else(|| ids[0].clone(), |id| (*id).clone());
    checkpoint_now(&first, &alice.key, &cut_id).await;
    cluster.namespaces[cut].cut();
    let started = Instant::now();
    let back = write(
        &first,
        &alice.key,
        json!({"code": "x = x + 100\nx", "session_id": cut_id}),
    )
    .await;
    assert!(!is_error(&back), "{back}");
    assert_eq!(session(&back)["restored"], true, "{back}");
    assert_eq!(session(&back)["node_lost"], true, "{back}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let moved = owner_of(&store, &cluster, &alice.id, &cut_id)
        .await
        .unwrap();
    assert_ne!(moved, cut);
    // joined again: it fenced itself meanwhile, and holds none of its old sessions
    cluster.namespaces[cut].join();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = cluster.nodes[cut].log_text();
    assert!(
        log.contains("every session is dropped"),
        "the cut-off node fenced itself:\n{log}"
    );
    let after = write(
        &second,
        &alice.key,
        json!({"code": "x", "session_id": cut_id}),
    )
    .await;
    assert_eq!(
        value(&after),
        (owners_value(&ids, &cut_id) + 100).to_string(),
        "{after}"
    );
    assert_eq!(
        owner_of(&store, &cluster, &alice.id, &cut_id).await,
        Some(moved)
    );

    // --- a node drained: its sessions are given up whole, and come back elsewhere ---
    let drained = moved;
    let mut on_drained = cut_id.clone();
    for id in &ids {
        if owner_of(&store, &cluster, &alice.id, id).await == Some(drained) {
            on_drained = id.clone();
            break;
        }
    }
    write(
        &first,
        &alice.key,
        json!({"code": "kept_by_drain = 7", "session_id": on_drained}),
    )
    .await;
    let node_addr = cluster.nodes[drained]
        .base
        .trim_start_matches("http://")
        .to_owned();
    let out = std::process::Command::new(BIN)
        .args([
            "node",
            "--drain",
            "--listen",
            &node_addr,
            "--node-token-file",
        ])
        .arg(&cluster.token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["drained"], true, "{answer}");
    assert!(answer["hibernated"].as_u64().unwrap() >= 1, "{answer}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let back = write(
        &second,
        &alice.key,
        json!({"code": "kept_by_drain", "session_id": on_drained}),
    )
    .await;
    assert_eq!(value(&back), "7", "nothing is lost by a drain: {back}");
    assert_eq!(session(&back)["restored"], true, "{back}");
    assert_ne!(
        owner_of(&store, &cluster, &alice.id, &on_drained).await,
        Some(drained)
    );
}

/// The `x` a session of `ids` was given first (its index).
fn owners_value(ids: &[String], id: &str) -> usize {
    ids.iter().position(|i| i == id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metering_is_exact_when_calls_race_through_two_front_ends() {
    let url = postgres_url();
    let dir = sandbox_dir();
    let cluster = Cluster::start(dir.path(), 1).await;
    let one = Storage::postgres(&dir.path().join("fe-1"), &url);
    let two = Storage::postgres(&dir.path().join("fe-2"), &url);
    // a month's allowance far below what is asked: free calls, then the wallet, then refusals
    let terms = ["--free-monthly-calls", "5"];
    let first = cluster.front_end(&one, &terms).await;
    let second = cluster.front_end(&two, &terms).await;
    let alice = create_account(&one, &format!("racing-{}@example.org", std::process::id()));
    credit(&one, &alice.email, "0.04");
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..32 {
        let base = if n % 2 == 0 {
            first.base.clone()
        } else {
            second.base.clone()
        };
        let key = alice.key.clone();
        calls.spawn(async move {
            let reply = client()
                .post(format!("{base}/u/{key}"))
                .header("accept", "application/json, text/event-stream")
                .json(&tool_call("svc_read", json!({"billing": true})))
                .send()
                .await
                .unwrap();
            let body: Value = reply.json().await.unwrap();
            body.get("result").is_some()
        });
    }
    let mut admitted = 0;
    while let Some(done) = calls.join_next().await {
        admitted += usize::from(done.unwrap());
    }
    // 5 free, and 0.04 USD pays 5 calls at 0.008
    assert_eq!(
        admitted, 10,
        "exactly what the allowance and the wallet cover"
    );
    assert_eq!(one.ledger_counts(&alice.id).await, (5, 5));
}

/// How soon a run whose front end died must have ended: far under the cell's own time limit
/// (60 s by default), which would end it too.
const ORPHAN_ENDED_WITHIN: Duration = Duration::from_secs(20);

/// A front end killed (kill -9) in the middle of a call loses nothing committed: the call's
/// charge stands; the node ends the run whose caller went away rather than let it run on; the
/// other front end serves the session on, with what that run did before it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_end_killed_mid_call_loses_nothing_committed() {
    let url = postgres_url();
    let dir = sandbox_dir();
    let cluster = Cluster::start(dir.path(), 1).await;
    let one = Storage::postgres(&dir.path().join("fe-1"), &url);
    let two = Storage::postgres(&dir.path().join("fe-2"), &url);
    let mut first = cluster.front_end(&one, &[]).await;
    let second = cluster.front_end(&two, &[]).await;
    let alice = create_account(
        &one,
        &format!("fe-killed-{}@example.org", std::process::id()),
    );
    let id = "outlives-its-front-end";
    let set = write(
        &first,
        &alice.key,
        json!({"code": "x = 1", "session_id": id}),
    )
    .await;
    assert!(!is_error(&set), "{set}");
    let (base, key) = (first.base.clone(), alice.key.clone());
    let long = json!({"code": "x = 2\nimport time\ntime.sleep(120)", "session_id": id});
    let orphaned = tokio::spawn(async move {
        client()
            .post(format!("{base}/u/{key}"))
            .header("accept", "application/json, text/event-stream")
            .json(&tool_call("svc_write", long))
            .send()
            .await
    });
    // admitted (its ledger row is committed before it runs), then given time to start
    let deadline = Instant::now() + Duration::from_secs(30);
    while one.ledger_counts(&alice.id).await != (2, 0) {
        assert!(
            Instant::now() < deadline,
            "the long call was never admitted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.kill();
    let lost = orphaned.await.unwrap();
    assert!(
        lost.is_err() || !lost.unwrap().status().is_success(),
        "the killed front end cannot have answered"
    );
    let asked = Instant::now();
    let read = loop {
        let read = write(&second, &alice.key, json!({"code": "x", "session_id": id})).await;
        // the node may still be ending the orphaned run when the first ask arrives
        if !is_error(&read) || asked.elapsed() > ORPHAN_ENDED_WITHIN {
            break read;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!is_error(&read), "{read}");
    assert!(
        asked.elapsed() < ORPHAN_ENDED_WITHIN,
        "the run outlived its caller by {:?}",
        asked.elapsed()
    );
    assert_eq!(value(&read), "2", "the session kept what the ended run did");
    assert_eq!(
        two.ledger_counts(&alice.id).await,
        (3, 0),
        "the killed call's charge stands, and only once"
    );
}
