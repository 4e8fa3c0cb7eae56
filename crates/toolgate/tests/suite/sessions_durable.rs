//! Sessions that outlive their process, through the real binary: a graceful restart loses no
//! session state, a kill -9 loses only what changed since the last checkpoint, an idle session
//! hibernates and comes back, what cannot be kept is named, a torn checkpoint falls back, and
//! nothing of a session's data is readable in the data directory.
//!
//! Needs what `sandbox` needs (the Python runtime and the confinement library); on PostgreSQL
//! too when `TOOLGATE_TEST_POSTGRES_URL` is set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;
use crate::sandbox::{is_error, text};

/// A sandboxed server's flags with checkpoints in `<dir>/checkpoints`, and `extra`.
fn durable_flags(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut flags = sandbox_flags(dir);
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    flags
}

/// Every storage this run has: SQLite, and PostgreSQL when its URL is given.
fn storages(dir: &Path) -> Vec<Storage> {
    let mut all = vec![Storage::sqlite(&dir.join("sqlite"))];
    if let Ok(url) = std::env::var("TOOLGATE_TEST_POSTGRES_URL") {
        all.push(Storage::postgres(&dir.join("pg"), &url));
    }
    all
}

/// Every file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_restart_loses_no_session_state() {
    let dir = sandbox_dir();
    for storage in storages(dir.path()) {
        std::fs::create_dir_all(&storage.data_dir).unwrap();
        // PostgreSQL is one database for the whole suite: addresses of this test's own
        let alice = create_account(&storage, "restarted@example.org");
        let bob = create_account(&storage, "their-tenant@example.org");
        let flags = durable_flags(&storage.data_dir, &[]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut server = Server::start(&storage, &flags).await;
        let marker = "MARKER-7f3c9e1d-only-in-the-session";
        let first = write(
            &server,
            &alice.key,
            json!({"session_id": "work", "code": format!(
                "import pandas as pd\nx = 41\ndf = pd.DataFrame({{'a': [1, 2]}})\n\
                 secret_note = '{marker}'\nopen('notes.txt', 'w').write(secret_note)\n\
                 def bump():\n    return x + 1\nbump()"
            )}),
        )
        .await;
        assert_eq!(value(&first), "42", "{first}");
        assert!(server.stop(), "the server did not stop on SIGTERM");

        // nothing of the session is readable at rest: the checkpoints are sealed
        for file in files_under(&storage.data_dir) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            let found = bytes.windows(marker.len()).any(|w| w == marker.as_bytes());
            assert!(
                !found,
                "{} holds the session's data in the clear",
                file.display()
            );
        }

        let server = Server::start(&storage, &flags).await;
        // another account's same id is another session
        let theirs = write(
            &server,
            &bob.key,
            json!({"session_id": "work", "code": "'x' in dir()"}),
        )
        .await;
        assert_eq!(value(&theirs), "False", "{theirs}");
        assert_eq!(session(&theirs)["restored"], false);
        let back = write(
            &server,
            &alice.key,
            json!({"session_id": "work", "code": "(x, bump(), int(df['a'].sum()), open('notes.txt').read())"}),
        )
        .await;
        assert_eq!(value(&back), format!("(41, 42, 3, '{marker}')"), "{back}");
        assert_eq!(session(&back)["restored"], true, "{back}");
        assert_eq!(session(&back)["not_restored"], json!([]));
        assert!(
            text(&back).contains("was restored from its checkpoint"),
            "{back}"
        );
        // listed as live now, with a checkpoint
        let listed = post_personal(
            &client(),
            &server,
            &alice.key,
            &tool_call("svc_read", json!({"sessions": true})),
        )
        .await
        .result();
        let rows = listed["structuredContent"]["sessions"]["sessions"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(rows.len(), 1, "{listed}");
        assert_eq!(rows[0]["state"], "live");
        assert!(rows[0]["checkpoint"]["bytes"].as_u64().unwrap() > 0);
        drop(server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_hibernates_and_a_kill_loses_only_what_came_after_its_checkpoint() {
    let dir = sandbox_dir();
    for storage in storages(dir.path()) {
        std::fs::create_dir_all(&storage.data_dir).unwrap();
        hibernates_and_survives_a_kill(&storage).await;
    }
}

async fn hibernates_and_survives_a_kill(storage: &Storage) {
    // PostgreSQL is one database for the whole suite: an address of this test's own
    let alice = create_account(storage, "sleeper@example.org");
    let flags = durable_flags(&storage.data_dir, &["--sandbox-hibernate-after-s", "1"]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut server = Server::start(storage, &flags).await;
    let first = write(
        &server,
        &alice.key,
        json!({"session_id": "s", "code": "import threading\nkept = [1, 2]\ngen = (i for i in range(3))\nlock = threading.Lock()\nlen(kept)"}),
    )
    .await;
    assert_eq!(value(&first), "2", "{first}");
    // hibernated within about a second of its time
    let http = client();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = post_personal(
            &http,
            &server,
            &alice.key,
            &tool_call("svc_read", json!({"sessions": true})),
        )
        .await
        .result();
        if listed["structuredContent"]["sessions"]["sessions"][0]["state"] == "hibernated" {
            break;
        }
        assert!(Instant::now() < deadline, "it did not hibernate: {listed}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // from here on nothing hibernates or checkpoints by itself: what a kill loses is certain
    server.kill();
    let flags = durable_flags(&storage.data_dir, &["--sandbox-hibernate-after-s", "600"]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut server = Server::start(storage, &flags).await;
    let back = write(
        &server,
        &alice.key,
        json!({"session_id": "s", "code": "kept.append(3)\nkept"}),
    )
    .await;
    assert_eq!(value(&back), "[1, 2, 3]", "{back}");
    let mut unkept: Vec<String> = session(&back)["not_restored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect();
    unkept.sort();
    assert_eq!(unkept, ["gen", "lock"], "{back}");
    assert!(
        text(&back).contains("Not restored: gen (generator"),
        "{back}"
    );
    // a kill -9 after the checkpoint of the hibernation loses what came after it only
    server.kill();
    let server = Server::start(storage, &flags).await;
    let after = write(
        &server,
        &alice.key,
        json!({"session_id": "s", "code": "kept"}),
    )
    .await;
    assert_eq!(value(&after), "[1, 2]", "{after}");
    assert_eq!(session(&after)["restored"], true);
    assert!(!is_error(&after));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_checkpoint_falls_back_or_is_said_lost() {
    let dir = sandbox_dir();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "alice@example.org");
    let flags = durable_flags(dir.path(), &["--sandbox-checkpoint-every-s", "1"]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut server = Server::start(&storage, &flags).await;
    write(
        &server,
        &alice.key,
        json!({"session_id": "t", "code": "v = 'first'"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // this call's checkpoint is taken after its result
    write(
        &server,
        &alice.key,
        json!({"session_id": "t", "code": "v = 'second'"}),
    )
    .await;
    assert!(server.stop());
    let mut images: Vec<PathBuf> = files_under(&dir.path().join("checkpoints"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .collect();
    images.sort();
    assert!(
        images.len() >= 2,
        "the one before the newest is kept: {images:?}"
    );
    // tear the newest: the one before it is restored, and the result says so
    let newest = images.last().unwrap();
    let len = std::fs::metadata(newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(newest)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let server = Server::start(&storage, &flags).await;
    let back = write(&server, &alice.key, json!({"session_id": "t", "code": "v"})).await;
    assert_eq!(session(&back)["restored"], true, "{back}");
    assert_eq!(session(&back)["fell_back"], true, "{back}");
    assert!(
        value(&back) == "'first'" || value(&back) == "'second'",
        "{back}"
    );
    drop(server);
    // every image torn: a fresh session, with a note that says it could not be restored
    for image in files_under(&dir.path().join("checkpoints")) {
        std::fs::write(&image, b"torn").unwrap();
    }
    let server = Server::start(&storage, &flags).await;
    let lost = write(
        &server,
        &alice.key,
        json!({"session_id": "t", "code": "'v' in dir()"}),
    )
    .await;
    assert_eq!(value(&lost), "False", "{lost}");
    assert!(text(&lost).contains("could not be restored"), "{lost}");
    drop(server);
}

/// The suite's Garage (`scripts/garage-up.sh`, which `scripts/test.sh` starts): checkpoints in
/// a bucket, as every host of a deployment would share them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_in_object_storage_carry_a_session_across_a_restart() {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: start a Garage with `eval \"$(scripts/garage-up.sh DIR)\"`")
        })
    };
    let bucket = var("TOOLGATE_TEST_S3_URL");
    let url = format!(
        "{}/suite-{}",
        bucket.trim_end_matches('/'),
        std::process::id()
    );
    let dir = sandbox_dir();
    let storage = Storage::sqlite(dir.path());
    let alice = create_account(&storage, "alice@example.org");
    let (endpoint, region, key_id) = (
        var("TOOLGATE_TEST_S3_ENDPOINT"),
        var("TOOLGATE_TEST_S3_REGION"),
        var("TOOLGATE_TEST_S3_KEY_ID"),
    );
    let flags = durable_flags(
        dir.path(),
        &[
            "--checkpoint-url",
            &url,
            "--checkpoint-s3-endpoint",
            &endpoint,
            "--checkpoint-s3-region",
            &region,
            "--checkpoint-s3-access-key-id",
            &key_id,
        ],
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let secret = var("TOOLGATE_TEST_S3_SECRET");
    let env = [("TOOLGATE_CHECKPOINT_S3_SECRET_ACCESS_KEY", secret.as_str())];
    let mut server = Server::start_with_env(&storage, &flags, &env).await;
    write(
        &server,
        &alice.key,
        json!({"session_id": "b", "code": "w = 'in the bucket'"}),
    )
    .await;
    assert!(server.stop());
    assert!(
        !dir.path().join("checkpoints").exists(),
        "nothing was kept on the local disk"
    );
    let mut server = Server::start_with_env(&storage, &flags, &env).await;
    let back = write(&server, &alice.key, json!({"session_id": "b", "code": "w"})).await;
    assert_eq!(value(&back), "'in the bucket'", "{back}");
    assert_eq!(session(&back)["restored"], true);
    let log = server.stop_and_read_log();
    assert!(
        !log.contains(&secret),
        "the secret key is in the server's log"
    );
}
