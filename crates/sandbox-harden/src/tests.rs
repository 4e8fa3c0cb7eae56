//! Unit tests of what can be checked without confining the test process itself. The confinement
//! is tested in a separate process by `tests/confinement.rs`.

use std::collections::BTreeSet;

use super::*;

fn spec_json(extra: &str) -> String {
    format!(
        r#"{{"workspace":"/w","tmp":"/t","read_only":["/usr"],"max_open_files":256,
            "max_file_bytes":1048576,"hostname":"session","network":false{extra}}}"#
    )
}

#[test]
fn spec_parses_from_the_zygote_json() {
    let spec: HardenSpec = serde_json::from_str(&spec_json("")).unwrap();
    assert_eq!(spec.workspace, std::path::Path::new("/w"));
    assert!(!spec.network);
    spec.validate().unwrap();
}

#[test]
fn unknown_fields_are_refused() {
    let error = serde_json::from_str::<HardenSpec>(&spec_json(r#","netwrok":true"#)).unwrap_err();
    assert!(error.to_string().contains("unknown field"), "{error}");
}

#[test]
fn invalid_specs_are_refused_before_any_step() {
    let good: HardenSpec = serde_json::from_str(&spec_json("")).unwrap();
    let cases = [
        HardenSpec {
            workspace: "relative".into(),
            ..good.clone()
        },
        HardenSpec {
            read_only: vec!["usr".into()],
            ..good.clone()
        },
        HardenSpec {
            hostname: String::new(),
            ..good.clone()
        },
        HardenSpec {
            hostname: "h".repeat(65),
            ..good.clone()
        },
        HardenSpec {
            max_open_files: 0,
            ..good.clone()
        },
        HardenSpec {
            max_file_bytes: 0,
            ..good.clone()
        },
    ];
    for spec in cases {
        let error = spec.validate().unwrap_err();
        assert!(matches!(error, HardenError::InvalidSpec(_)), "{error}");
    }
}

#[test]
fn deny_list_has_no_duplicates_and_every_entry_is_justified() {
    let mut seen = BTreeSet::new();
    for denied in policy::DENIED {
        assert!(seen.insert(denied.number), "{} listed twice", denied.name);
        assert!(!denied.reason.is_empty(), "{} has no reason", denied.name);
    }
}

#[test]
fn seccomp_programs_compile_within_kernel_limits() {
    for network in [false, true] {
        let programs = seccomp_filter::build(network).unwrap();
        assert!(programs.programs.len() >= 2);
        for program in &programs.programs {
            // BPF_MAXINSNS
            assert!(program.len() <= 4096, "{} instructions", program.len());
        }
        // The table, clone, clone3, and socket only without network.
        let expected = policy::DENIED.len() + 2 + usize::from(!network);
        assert_eq!(programs.denied_syscalls, expected);
    }
}

#[test]
fn network_decides_the_net_namespace() {
    assert_ne!(namespace_flags(false) & libc::CLONE_NEWNET, 0);
    assert_eq!(namespace_flags(true) & libc::CLONE_NEWNET, 0);
    for flags in [namespace_flags(false), namespace_flags(true)] {
        assert_ne!(flags & libc::CLONE_NEWNS, 0);
        assert_ne!(flags & libc::CLONE_NEWIPC, 0);
        assert_ne!(flags & libc::CLONE_NEWUTS, 0);
    }
}

#[test]
fn errors_name_their_step() {
    let error = HardenError::Unshare(std::io::Error::from_raw_os_error(libc::EPERM));
    assert!(error.to_string().starts_with("step (a)"), "{error}");
    let error = HardenError::Rlimit {
        resource: "RLIMIT_NOFILE",
        source: std::io::Error::from_raw_os_error(libc::EPERM),
    };
    assert!(
        error
            .to_string()
            .starts_with("step (e) setrlimit RLIMIT_NOFILE")
    );
}
