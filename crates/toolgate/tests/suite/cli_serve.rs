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
    let key = "v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let cases: &[(&[&str], &str)] = &[
        (&["--public-url", "ftp://example.org"], "public_url"),
        (&["--brand", "Not A Brand!"], "brand"),
        (&["--paid-call-cost-usd", "lots"], "paid_call_cost_usd"),
        (
            &["--min-topup-usd", "10", "--max-topup-usd", "5"],
            "min_topup_usd",
        ),
        (&["--max-request-bytes", "10"], "max_request_bytes"),
        (&["--max-connections", "0"], "max_connections"),
        (&["--max-mcp-sessions", "0"], "max_mcp_sessions"),
        (&["--trusted-proxies", "10.0.0.0/33"], "trusted_proxies"),
        (
            &["--egress-allow-private", "nowhere"],
            "egress_allow_private",
        ),
        (&["--database-url", "mysql://localhost/x"], "database_url"),
        (&["--sqlite-synchronous", "sometimes"], "sqlite_synchronous"),
        (&["--vault-master-key", "v1 short"], "vault_master_key"),
        (
            &["--vault-master-key", key, "--vault-key-file", "vault.key"],
            "vault_master_key",
        ),
        (&["--sandbox", "maybe"], "sandbox"),
        (
            &["--sandbox", "on", "--sandbox-idle-minutes", "0"],
            "sandbox_idle_minutes",
        ),
        (
            &["--sandbox", "on", "--sandbox-max-sessions", "0"],
            "sandbox_max_sessions",
        ),
        (
            &["--sandbox", "on", "--sandbox-memory-mib", "1"],
            "sandbox_memory_mib",
        ),
        (
            &[
                "--sandbox",
                "on",
                "--sandbox-runtime",
                "/nonexistent/runtime",
            ],
            "sandbox_runtime",
        ),
        (&["--openai-base-url", "not a url"], "openai_base_url"),
        (&["--searxng-url", "not a url"], "searxng_url"),
        (&["--ai-endpoints", "nonsense"], "ai_endpoints"),
        (&["--operator-max-tokens", "0"], "operator_max_tokens"),
        (&["--smtp-url", "http://mail.example.org"], "smtp_url"),
        (&["--mail-from", "not an address"], "mail_from"),
        (
            &[
                "--stripe-secret-key",
                "sk_test_x",
                "--stripe-api-base",
                "nowhere",
            ],
            "stripe_api_base",
        ),
        (
            &["--sign-in-limit-per-address", "many"],
            "sign-in-limit-per-address",
        ),
        (&["--log", "toolgate=loud"], "log"),
    ];
    for (flags, named) in cases {
        assert_refused_untouched(true, flags, &[], named);
    }
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
