//! The operator command line: account and wallet commands, their failures (non-zero exit, a
//! message on stderr, nothing on stdout), and settings from flags, `TOOLGATE_*` and `--config`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::*;
use serde_json::Value;

pub(crate) fn assert_fails(out: &CliOutput, what: &str) {
    assert!(!out.success(), "{what} must fail: {out:?}");
    assert!(
        out.code.is_some(),
        "{what} exits, it is not killed: {out:?}"
    );
    assert!(
        out.stdout.trim().is_empty(),
        "{what}: nothing on stdout: {out:?}"
    );
    assert!(
        !out.stderr.trim().is_empty(),
        "{what}: a message on stderr: {out:?}"
    );
}

#[tokio::test]
async fn account_create_prints_the_key_once_and_refuses_duplicates_and_bad_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());

    let out = cli(
        Some(&storage),
        &[
            "account",
            "create",
            "--email",
            "Ann@Example.org",
            "--public-url",
            "https://tools.example.com/",
        ],
        &[],
    );
    assert!(out.success(), "{out:?}");
    let printed: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let mut fields: Vec<&String> = printed.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(
        fields,
        ["account_id", "api_key", "email", "personal_url"],
        "{printed}"
    );
    assert_eq!(
        printed["email"], "ann@example.org",
        "the address is normalised"
    );
    let key = printed["api_key"].as_str().unwrap();
    assert_key_shape(key);
    assert_eq!(
        printed["personal_url"],
        format!("https://tools.example.com/u/{key}")
    );
    assert!(!printed["account_id"].as_str().unwrap().is_empty());
    assert!(
        !out.stderr.contains(key),
        "the key is printed on stdout only: {out:?}"
    );

    for email in ["ann@example.org", "Ann@Example.org", "ANN@EXAMPLE.ORG"] {
        let out = cli(
            Some(&storage),
            &["account", "create", "--email", email],
            &[],
        );
        assert_fails(&out, &format!("a second account for {email}"));
        assert!(out.stderr.contains("already exists"), "{out:?}");
    }
    for email in [
        "not-an-address",
        "",
        "a@",
        "@example.org",
        "two@@example.org",
        "sp ace@example.org",
    ] {
        let out = cli(
            Some(&storage),
            &["account", "create", "--email", email],
            &[],
        );
        assert_fails(&out, &format!("the address {email:?}"));
    }
    let out = cli(Some(&storage), &["account", "create"], &[]);
    assert_fails(&out, "create without --email");

    // Two accounts get different keys, and each key works for its own account only.
    let other = create_account(&storage, "bob@example.org");
    assert_ne!(other.key, key);
    let server = Server::start(&storage, &[]).await;
    let http = client();
    post_personal(&http, &server, &other.key, &billing_call()).await;
    assert_eq!(server.free_remaining(key).await, 1000);
    assert_eq!(server.free_remaining(&other.key).await, 999);
}

#[tokio::test]
async fn wallet_credit_refuses_bad_amounts_and_unknown_accounts() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let email = "credit@example.org";
    let account = create_account(&storage, email);

    let bad: [&[&str]; 9] = [
        &["--usd", "-1"],
        &["--usd=-1"],
        &["--usd", "abc"],
        &["--usd", "0"],
        &["--usd", "0.00"],
        &["--usd", "1.2345678"],
        &["--usd", "1,50"],
        &["--usd", ""],
        &["--usd", "1e3"],
    ];
    for amount in bad {
        let mut args = vec!["wallet", "credit", "--email", email];
        args.extend_from_slice(amount);
        assert_fails(
            &cli(Some(&storage), &args, &[]),
            &format!("credit {amount:?}"),
        );
    }
    let out = cli(
        Some(&storage),
        &["wallet", "credit", "--email", email, "--usd=-1"],
        &[],
    );
    assert!(
        out.stderr.to_ascii_lowercase().contains("amount"),
        "the message names the amount: {out:?}"
    );
    let out = cli(
        Some(&storage),
        &[
            "wallet",
            "credit",
            "--email",
            "ghost@example.org",
            "--usd",
            "5",
        ],
        &[],
    );
    assert_fails(&out, "credit for an unknown account");

    // None of the refused credits changed the wallet; a good one does, once per reference.
    let record = credit(&storage, email, "12.50");
    assert_eq!(record["wallet_balance_usd"], "12.50", "{record}");
    assert_eq!(record["paid_calls_available"], 1562, "{record}");
    let args = [
        "wallet",
        "credit",
        "--email",
        email,
        "--usd",
        "1",
        "--reference",
        "ref-1",
    ];
    assert_eq!(cli_json(&storage, &args)["wallet_balance_usd"], "13.50");
    assert_eq!(
        cli_json(&storage, &args)["wallet_balance_usd"],
        "13.50",
        "the same reference credits once"
    );

    let server = Server::start(&storage, &[]).await;
    assert_eq!(
        server.billing(&account.key).await["wallet_balance_usd"],
        "13.50"
    );
}

#[tokio::test]
async fn settings_come_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("toolgate.toml");
    let toml = format!(
        "data_dir = {:?}\nfree_monthly_calls = 1\npaid_call_cost_usd = \"0.01\"\n",
        data.display().to_string()
    );
    std::fs::write(&file, toml).unwrap();
    let config = file.display().to_string();

    // The file's data_dir is where the account lands: no --data-dir given.
    let out = cli(
        None,
        &[
            "account",
            "create",
            "--email",
            "file@example.org",
            "--config",
            &config,
        ],
        &[],
    );
    assert!(out.success(), "{out:?}");
    let key = serde_json::from_str::<Value>(out.stdout.trim()).unwrap()["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        data.join("toolgate.db").exists(),
        "the file's data_dir was used"
    );

    let record: Value = {
        let out = cli(
            None,
            &[
                "wallet",
                "credit",
                "--email",
                "file@example.org",
                "--usd",
                "1",
                "--config",
                &config,
            ],
            &[],
        );
        assert!(out.success(), "{out:?}");
        serde_json::from_str(out.stdout.trim()).unwrap()
    };
    assert_eq!(record["free_monthly_limit"], 1, "{record}");
    assert_eq!(record["paid_call_cost_usd"], "0.01", "{record}");
    assert_eq!(record["paid_calls_available"], 100, "{record}");

    // The server reads the same file; a flag beats it.
    let storage = Storage::sqlite(&data);
    let server = Server::start(&storage, &["--config", &config]).await;
    let status = server.billing(&key).await;
    assert_eq!(
        (
            status["free_monthly_limit"].as_i64(),
            status["paid_call_cost_usd"].as_str()
        ),
        (Some(1), Some("0.01"))
    );
    drop(server);
    let server = Server::start(
        &storage,
        &["--config", &config, "--free-monthly-calls", "4"],
    )
    .await;
    assert_eq!(server.billing(&key).await["free_monthly_limit"], 4);

    // TOOLGATE_CONFIG names the file too.
    let out = cli(
        None,
        &[
            "wallet",
            "credit",
            "--email",
            "file@example.org",
            "--usd",
            "1",
        ],
        &[("TOOLGATE_CONFIG", &config)],
    );
    assert!(out.success(), "{out:?}");
    assert_eq!(
        serde_json::from_str::<Value>(out.stdout.trim()).unwrap()["wallet_balance_usd"],
        "2.00"
    );
}

#[tokio::test]
async fn a_bad_config_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    create_account(&storage, "typo@example.org");
    let cases = [
        ("free_monthly_calss = 1\n", "free_monthly_calss"),
        ("brnad = \"svc\"\n", "brnad"),
        ("free_monthly_calls = \"many\"\n", "free_monthly_calls"),
        ("paid_call_cost_usd = \"abc\"\n", "paid_call_cost_usd"),
        ("free_monthly_calls = -1\n", "free_monthly_calls"),
        ("this is not toml\n", "toolgate.toml"),
    ];
    for (text, named) in cases {
        let file = dir.path().join("toolgate.toml");
        std::fs::write(&file, text).unwrap();
        let config = file.display().to_string();
        for args in [
            vec![
                "wallet",
                "credit",
                "--email",
                "typo@example.org",
                "--usd",
                "1",
                "--config",
                &config,
            ],
            vec!["serve", "--listen", "127.0.0.1:1", "--config", &config],
        ] {
            let out = cli(Some(&storage), &args, &[]);
            assert_fails(&out, &format!("config {text:?} for {}", args[0]));
            assert!(
                out.stderr.contains(named),
                "the message names `{named}`: {out:?}"
            );
        }
    }
    let missing = dir.path().join("absent.toml").display().to_string();
    let out = cli(
        Some(&storage),
        &[
            "account",
            "create",
            "--email",
            "x@example.org",
            "--config",
            &missing,
        ],
        &[],
    );
    assert_fails(&out, "a missing config file");
    assert!(out.stderr.contains("absent.toml"), "{out:?}");
}

#[tokio::test]
async fn settings_come_from_the_environment_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::sqlite(dir.path());
    let account = create_account(&storage, "env@example.org");
    let env = [("TOOLGATE_FREE_MONTHLY_CALLS", "5")];

    let out = cli(
        Some(&storage),
        &[
            "wallet",
            "credit",
            "--email",
            "env@example.org",
            "--usd",
            "1",
        ],
        &env,
    );
    assert!(out.success(), "{out:?}");
    let record: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(record["free_monthly_limit"], 5, "{record}");
    assert_eq!(record["free_remaining_this_month"], 5, "{record}");

    let out = cli(
        Some(&storage),
        &[
            "wallet",
            "credit",
            "--email",
            "env@example.org",
            "--usd",
            "1",
            "--free-monthly-calls",
            "3",
        ],
        &env,
    );
    assert_eq!(
        serde_json::from_str::<Value>(out.stdout.trim()).unwrap()["free_monthly_limit"],
        3,
        "{out:?}"
    );

    // TOOLGATE_DATA_DIR alone locates the storage.
    let data_dir = storage.data_dir.display().to_string();
    let out = cli(
        None,
        &["account", "rotate-key", "--email", "env@example.org"],
        &[("TOOLGATE_DATA_DIR", &data_dir)],
    );
    assert!(out.success(), "{out:?}");
    let new_key = serde_json::from_str::<Value>(out.stdout.trim()).unwrap()["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new_key, account.key);

    let server = Server::start_with_env(&storage, &[], &env).await;
    let http = client();
    let record = billing_of(&post_personal(&http, &server, &new_key, &billing_call()).await);
    assert_eq!(record["free_monthly_limit"], 5, "{record}");
    assert_eq!(record["free_remaining_this_month"], 4, "{record}");
    post_personal(&http, &server, &account.key, &tools_list())
        .await
        .assert_error(401, -32001);

    let out = cli(
        Some(&storage),
        &[
            "wallet",
            "credit",
            "--email",
            "env@example.org",
            "--usd",
            "1",
        ],
        &[("TOOLGATE_FREE_MONTHLY_CALLS", "lots")],
    );
    assert_fails(&out, "a non-numeric TOOLGATE_FREE_MONTHLY_CALLS");
}

#[test]
fn help_documents_the_environment() {
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["account", "create", "--help"],
        &["wallet", "credit", "--help"],
    ] {
        let out = cli(None, args, &[]);
        assert!(out.success(), "toolgate {args:?}: {out:?}");
        assert!(
            out.stdout.contains("TOOLGATE_"),
            "toolgate {args:?} mentions TOOLGATE_: {}",
            out.stdout
        );
    }
    let out = cli(None, &["serve", "--help"], &[]);
    for flag in [
        "--listen",
        "--data-dir",
        "--database-url",
        "--public-url",
        "--free-monthly-calls",
        "--config",
    ] {
        assert!(
            out.stdout.contains(flag),
            "serve --help lists {flag}: {}",
            out.stdout
        );
    }
    assert_fails(&cli(None, &["frobnicate"], &[]), "an unknown command");
    assert_fails(&cli(None, &[], &[]), "no command");
}
