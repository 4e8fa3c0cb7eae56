#![allow(clippy::unwrap_used)]
use super::*;

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
