//! `serve`'s settings checked before anything opens, through the real binary: a bad value of
//! every group refused by name with nothing made, the orders that used to open things first,
//! and a second `serve` on one database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli::assert_fails;
use crate::common::*;

/// `serve` with `flags` fails at once, naming `named`, and leaves nothing behind: the data
/// directory (where the database, the vault key file, the outbox and the sessions would be) is
/// never made, and no port was bound. With `hold_port` the port it is told to listen on is held
/// by the test meanwhile, so a server that got as far as binding would fail with "cannot listen"
/// instead; without, it listens on port 0 and would go on to open what it opens.
fn assert_refused_untouched(hold_port: bool, flags: &[&str], env: &[(&str, &str)], named: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let storage = Storage::sqlite(&data);
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = if hold_port {
        held.local_addr().unwrap().to_string()
    } else {
        "127.0.0.1:0".to_owned()
    };
    let mut args = vec!["serve", "--listen", &listen];
    args.extend_from_slice(flags);
    let out = cli(Some(&storage), &args, env);
    assert_fails(&out, &format!("serve {flags:?}"));
    assert!(
        out.stderr.contains(named),
        "serve {flags:?}: the message names {named}: {out:?}"
    );
    assert!(
        !out.stderr.contains("cannot listen"),
        "serve {flags:?} tried to bind before refusing: {out:?}"
    );
    assert!(
        !data.exists(),
        "serve {flags:?} made the data directory: {:?}",
        std::fs::read_dir(&data)
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default()
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "serve {flags:?} left {left:?} behind");
}

#[test]
fn serve_refuses_a_bad_value_of_every_group_before_anything_opens() {
    let cases: &[(&[&str], &str)] = include!("../refused_settings.in");
    for (flags, named) in cases {
        assert_refused_untouched(true, flags, &[], named);
    }
    // a value clap itself refuses, by its flag
    assert_refused_untouched(
        true,
        &["--sign-in-limit-per-address", "many"],
        &[],
        "sign-in-limit-per-address",
    );
    // the operator's PostgreSQL client settings, which tenants' connections would carry
    assert_refused_untouched(
        true,
        &[],
        &[("PGSSLCERT", "/etc/ssl/operator.pem")],
        "PGSSLCERT",
    );
}

/// Once found only after the database was opened (and created on a first start).
#[test]
fn the_vault_key_conflict_is_refused_before_the_database_opens() {
    let key = "v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let elsewhere = tempfile::tempdir().unwrap();
    let key_file = elsewhere.path().join("vault.key").display().to_string();
    assert_refused_untouched(
        false,
        &["--vault-master-key", key, "--vault-key-file", &key_file],
        &[],
        "vault_master_key",
    );
    assert!(!elsewhere.path().join("vault.key").exists());
}

/// Once found only after the vault's key file was created with a fresh key.
#[test]
fn bad_ai_endpoints_are_refused_before_the_vault_key_file_is_made() {
    let elsewhere = tempfile::tempdir().unwrap();
    let key_file = elsewhere.path().join("keys").join("vault.key");
    let key_flag = key_file.display().to_string();
    for endpoints in [
        "nonsense",
        "local=not a url",
        "openai=http://127.0.0.1:1/v1",
    ] {
        assert_refused_untouched(
            false,
            &["--ai-endpoints", endpoints, "--vault-key-file", &key_flag],
            &[],
            "ai_endpoints",
        );
        assert!(!key_file.exists(), "{endpoints}: no key file was made");
    }
}

/// One server per SQLite file: a second is refused at once, by name, while the first keeps
/// serving; operator commands still work beside it.
#[tokio::test]
async fn a_second_serve_on_the_same_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "first@example.org");
    let server = Server::start(&storage, &[]).await;
    let out = cli(Some(&storage), &["serve", "--listen", "127.0.0.1:0"], &[]);
    assert_fails(&out, "a second serve on the same database");
    assert!(
        out.stderr
            .contains("another toolgate serve is using this database"),
        "{out:?}"
    );
    credit(&storage, "first@example.org", "5.00");
    assert_eq!(
        server.billing(&account.key).await["wallet_balance_usd"],
        "5.00"
    );
}

/// The async runtime's workers: one per core by default, `--worker-threads` when given (as the
/// runtime itself counts them, in the start-up line of the log).
#[tokio::test]
async fn serve_runs_the_worker_threads_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let by_default = Server::start(&storage, &["--sandbox", "off"]).await;
    assert_eq!(workers_of(&by_default), cores);
    drop(by_default);
    let given = Server::start(&storage, &["--sandbox", "off", "--worker-threads", "1"]).await;
    assert_eq!(workers_of(&given), 1);
    let health = client().get(given.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// `workers=N` of the server's start-up line.
fn workers_of(server: &Server) -> usize {
    let log = server.log_text();
    let line = log
        .lines()
        .find(|line| line.contains("toolgate serving"))
        .unwrap_or_else(|| panic!("no start-up line in {log}"));
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("workers="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no workers= in {line}"))
}
