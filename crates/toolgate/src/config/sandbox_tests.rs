#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn limits_default_and_refuse_nonsense() {
    let limits = limits(&Settings::default()).unwrap();
    assert_eq!(limits, LimitSettings::default());
    let inverted = Settings {
        sandbox_default_timeout_s: Some(301),
        ..Settings::default()
    };
    let err = super::limits(&inverted).unwrap_err();
    assert_eq!(err.setting(), "sandbox_default_timeout_s");
    assert!(err.to_string().contains("between 1"), "{err}");
    let tiny = Settings {
        sandbox_memory_mib: Some(1),
        ..Settings::default()
    };
    assert_eq!(
        super::limits(&tiny).unwrap_err().setting(),
        "sandbox_memory_mib"
    );
}

#[test]
fn bad_switches_and_missing_parts_are_named() {
    let bad = Settings {
        sandbox: Some("maybe".into()),
        ..Settings::default()
    };
    let err = SandboxConfig::from_settings(&bad).unwrap_err();
    assert_eq!(err.setting(), "sandbox");
    assert!(err.to_string().contains("`on` or `off`"), "{err}");
    let off = Settings {
        sandbox: Some("off".into()),
        ..Settings::default()
    };
    assert!(SandboxConfig::from_settings(&off).unwrap().is_none());
    let missing = Settings {
        sandbox_runtime: Some("/nonexistent/runtime".into()),
        ..Settings::default()
    };
    let err = SandboxConfig::from_settings(&missing).unwrap_err();
    assert_eq!(err.setting(), "sandbox_runtime");
    assert!(err.to_string().contains("python-runtime.sh"), "{err}");
    let confinement = Settings {
        sandbox_runtime: Some("/".into()),
        sandbox_zygote: Some("/".into()),
        sandbox_confinement: Some("sometimes".into()),
        ..Settings::default()
    };
    let err = SandboxConfig::from_settings(&confinement).unwrap_err();
    assert_eq!(err.setting(), "sandbox_confinement");
}

#[test]
fn unreachable_session_roots_are_refused_at_start() {
    let masked = check_root(Path::new("/tmp/x/sessions")).unwrap_err();
    assert_eq!(masked.setting(), "sandbox_root");
    assert!(masked.to_string().contains("beneath /tmp"), "{masked}");
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = check_root(&closed.join("sessions")).unwrap_err();
    assert!(err.to_string().contains("may not search"), "{err}");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
    check_root(&closed.join("sessions")).unwrap();
}

#[test]
fn the_warm_pool_has_a_floor_and_a_ceiling_not_under_it() {
    assert_eq!(warm_sessions(&Settings::default()).unwrap(), (2, 256));
    let fixed = Settings {
        sandbox_warm_sessions: Some(4),
        sandbox_warm_sessions_max: Some(4),
        ..Settings::default()
    };
    assert_eq!(warm_sessions(&fixed).unwrap(), (4, 4));
    let big_floor = Settings {
        sandbox_warm_sessions: Some(300),
        ..Settings::default()
    };
    assert_eq!(warm_sessions(&big_floor).unwrap(), (300, 300));
    let none = Settings {
        sandbox_warm_sessions: Some(0),
        sandbox_warm_sessions_max: Some(0),
        ..Settings::default()
    };
    assert_eq!(warm_sessions(&none).unwrap(), (0, 0));
    let inverted = Settings {
        sandbox_warm_sessions: Some(8),
        sandbox_warm_sessions_max: Some(7),
        ..Settings::default()
    };
    let err = warm_sessions(&inverted).unwrap_err();
    assert_eq!(err.setting(), "sandbox_warm_sessions_max");
    assert!(
        err.to_string()
            .contains("at least sandbox_warm_sessions (8)"),
        "{err}"
    );
    let huge = Settings {
        sandbox_warm_sessions_max: Some(1 << 40),
        ..Settings::default()
    };
    assert_eq!(
        warm_sessions(&huge).unwrap_err().setting(),
        "sandbox_warm_sessions_max"
    );
}
