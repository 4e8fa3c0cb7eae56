#![allow(clippy::unwrap_used)]
use super::*;
use std::net::SocketAddr;

#[test]
fn flags_win_over_the_file_and_the_file_over_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("toolgate.toml");
    std::fs::write(
        &file,
        "brand = \"acme\"\nfree_monthly_calls = 7\nallowed_origins = [\"https://a.example\"]\n",
    )
    .unwrap();
    let given = Settings {
        free_monthly_calls: Some(3),
        ..Settings::default()
    };
    let merged = given.merged_with_file(Some(&file)).unwrap();
    assert_eq!(merged.free_monthly_calls, Some(3));
    assert_eq!(merged.brand().unwrap().tool_name("read"), "acme_read");
    assert_eq!(
        merged.allowed_origins.as_deref(),
        Some(&["https://a.example".to_owned()][..])
    );
    assert_eq!(merged.pricing().unwrap().free_monthly_calls, 3);
    assert_eq!(merged.listen().to_string(), "127.0.0.1:8080");
}

#[test]
fn the_database_url_never_shows_in_debug() {
    let settings = Settings {
        database_url: Some("postgres://u:hunter2@db/x".parse().unwrap()),
        ..Settings::default()
    };
    let shown = format!("{settings:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn bad_settings_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "brnad = \"x\"\n").unwrap();
    let err = Settings::default()
        .merged_with_file(Some(&file))
        .unwrap_err();
    assert!(format!("{err:#}").contains("brnad"), "{err:#}");
    let bad_price = Settings {
        paid_call_cost_usd: Some("abc".into()),
        ..Settings::default()
    };
    assert!(format!("{:#}", bad_price.pricing().unwrap_err()).contains("paid_call_cost_usd"));
    let bad_url = Settings {
        public_url: Some("ftp://x".into()),
        ..Settings::default()
    };
    assert!(bad_url.public_url().is_err());
}

#[test]
fn trusted_proxies_are_checked_by_name() {
    let good = Settings {
        trusted_proxies: Some(vec!["10.0.0.0/8".into(), " ::1 ".into()]),
        ..Settings::default()
    };
    assert_eq!(good.trusted_proxies().unwrap().len(), 2);
    let bad = Settings {
        trusted_proxies: Some(vec!["10.0.0.0/33".into()]),
        ..Settings::default()
    };
    assert!(format!("{:#}", bad.trusted_proxies().unwrap_err()).contains("trusted_proxies"));
    assert!(Settings::default().trusted_proxies().unwrap().is_empty());
}

#[test]
fn server_timing_is_off_unless_on() {
    assert!(!Settings::default().server_timing().unwrap());
    let on = Settings {
        server_timing: Some("on".into()),
        ..Settings::default()
    };
    assert!(on.server_timing().unwrap());
    let bad = Settings {
        server_timing: Some("yes".into()),
        ..Settings::default()
    };
    assert_eq!(bad.server_timing().unwrap_err().setting(), "server_timing");
}

/// Settings as the command line gives them (no environment variable of the test's is read:
/// the suite's harness sets none).
pub(super) fn given(args: &[&str]) -> Settings {
    use clap::{Args, FromArgMatches};
    let command = Settings::augment_args(clap::Command::new("toolgate"));
    let matches = command
        .try_get_matches_from(std::iter::once("toolgate").chain(args.iter().copied()))
        .unwrap();
    Settings::from_arg_matches(&matches).unwrap()
}

/// The setting a refused configuration names.
pub(super) fn refused(args: &[&str]) -> String {
    match ServeConfig::from_settings(&given(args)) {
        Ok(_) => panic!("{args:?} was accepted"),
        Err(err) => {
            assert!(
                err.to_string().contains(err.setting()),
                "{args:?}: the message names its setting: {err}"
            );
            err.setting().to_owned()
        }
    }
}

const KEY: &str = "v1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

/// Shared with the suite's `cli_serve`, which runs each row through the binary.
const REFUSED: &[(&[&str], &str)] = include!("../../tests/refused_settings.in");

#[test]
fn serve_refuses_a_bad_value_of_every_group_by_name() {
    let cases = REFUSED;
    for (args, setting) in cases {
        let mut args = args.to_vec();
        if !args.iter().any(|arg| arg.starts_with("--sandbox")) {
            args.extend(["--sandbox", "off"]);
        }
        assert_eq!(refused(&args), *setting, "{args:?}");
    }
}

#[test]
fn a_secret_in_a_refused_setting_is_never_repeated() {
    let err = ServeConfig::from_settings(&given(&[
        "--sandbox",
        "off",
        "--ai-endpoint-keys",
        "hunter2-no-equals",
    ]))
    .err()
    .unwrap();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn the_provider_settings_are_the_catalogs_names() {
    use toolgate_providers::{BUILTIN, SEARCH_ENGINES, setting_prefix};
    let names = providers::setting_names();
    for builtin in BUILTIN {
        let prefix = setting_prefix(builtin.name);
        for setting in [format!("{prefix}_base_url"), format!("{prefix}_api_key")] {
            assert!(names.contains(&setting), "{setting} is missing");
        }
    }
    for (engine, _, _) in SEARCH_ENGINES {
        assert!(names.contains(&format!("{engine}_api_key")), "{engine}");
    }
    // google and gemini share their settings: 10 providers and 3 engines, two settings each
    assert_eq!(names.len(), 2 * (BUILTIN.len() - 1 + SEARCH_ENGINES.len()));

    // each is a flag and a key of the file, and reaches the clients by the catalog's name
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("toolgate.toml");
    std::fs::write(
        &file,
        "gemini_base_url = \"http://127.0.0.1:9/g\"\nexa_api_key = \"exa-k\"\nopenai_api_key = \"file-k\"\n",
    )
    .unwrap();
    let settings = given(&[
        "--openai-api-key",
        "flag-k",
        "--ollama-base-url",
        "http://127.0.0.1:11434/v1",
    ])
    .merged_with_file(Some(&file))
    .unwrap();
    let providers = Providers::from_settings(&settings).unwrap();
    assert_eq!(
        providers.models.api_keys.get("openai").map(|k| k.as_str()),
        Some("flag-k"),
        "the flag beats the file"
    );
    assert_eq!(
        providers.models.base_urls.get("gemini").map(String::as_str),
        Some("http://127.0.0.1:9/g")
    );
    assert!(providers.models.base_urls.contains_key("ollama"));
    assert_eq!(
        providers.search.api_keys.get("exa").map(|k| k.as_str()),
        Some("exa-k")
    );
    assert!(
        !format!("{settings:?}").contains("flag-k"),
        "keys never show in Debug"
    );
}

#[test]
fn a_good_configuration_is_read_whole() {
    let config = ServeConfig::from_settings(&given(&[
        "--sandbox",
        "off",
        "--listen",
        "127.0.0.1:0",
        "--vault-master-key",
        KEY,
    ]))
    .unwrap();
    assert!(config.sandbox.is_none());
    assert_eq!(
        config.results,
        super::serve::ResultsConfig {
            inline_chars: 20_000,
            download_ttl: std::time::Duration::from_secs(3600),
            upload_ttl: std::time::Duration::from_secs(3600),
        }
    );
    assert!(matches!(config.vault, VaultKeys::Given(_)));
    assert!(matches!(config.store, StoreConfig::Sqlite { .. }));
    let bound: SocketAddr = "127.0.0.1:4321".parse().unwrap();
    assert_eq!(
        config.public_url_for(bound).unwrap(),
        "http://127.0.0.1:4321"
    );
}

#[test]
fn worker_threads_default_to_one_per_core_and_are_bounded() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(Settings::default().worker_threads().unwrap(), cores);
    let given = |n| Settings {
        worker_threads: Some(n),
        ..Settings::default()
    };
    assert_eq!(given(1).worker_threads().unwrap(), 1);
    assert_eq!(given(1024).worker_threads().unwrap(), 1024);
    assert!(given(0).worker_threads().is_err());
    assert!(given(1025).worker_threads().is_err());
}
