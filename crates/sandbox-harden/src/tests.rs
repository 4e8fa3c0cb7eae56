//! Unit tests of what can be checked without confining the test process itself. The confinement
//! is tested in separate processes by `tests/confinement/`; the seccomp policy's own tests are in
//! `policy/tests.rs`.

use super::*;

pub(crate) fn spec_json(extra: &str) -> String {
    format!(
        r#"{{"workspace":"/w","tmp":"/tmp","read_only":["/usr"],"max_open_files":256,
            "max_file_bytes":1048576,"hostname":"session","network":false,"uid":1000123,
            "tmp_bytes":1048576{extra}}}"#
    )
}

#[test]
fn spec_parses_from_the_zygote_json() {
    let spec: HardenSpec = serde_json::from_str(&spec_json("")).unwrap();
    assert_eq!(spec.workspace, std::path::Path::new("/w"));
    assert!(!spec.network);
    assert_eq!(spec.uid, 1_000_123);
    assert!(spec.cgroups.is_empty(), "cgroups default to none");
    spec.validate().unwrap();
    let spec: HardenSpec =
        serde_json::from_str(&spec_json(r#","cgroups":["/sys/fs/cgroup/pids/s"]"#)).unwrap();
    assert_eq!(
        spec.cgroups,
        [std::path::Path::new("/sys/fs/cgroup/pids/s")]
    );
}

/// The spec the server sends (`runtime/golden/control/fork_hardened.json`, which the server's
/// own tests serialise to) is one this library reads, field for field: neither side can add,
/// drop or rename a field alone (unknown fields are refused here).
#[test]
fn the_servers_golden_spec_parses_whole() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../runtime/golden/control/fork_hardened.json"
    );
    let frame: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let spec: HardenSpec = serde_json::from_value(frame["harden"].clone()).unwrap();
    assert_eq!(
        spec.workspace,
        std::path::Path::new("/var/lib/toolgate/sessions/acct-1/3f2a")
    );
    assert_eq!((spec.uid, spec.tmp_bytes), (1_000_000_000, 256 << 20));
    assert_eq!(spec.cgroups.len(), 1);
    assert_eq!(spec.net(), crate::spec::Net::Proxy(3128));
    spec.validate().unwrap();
}

#[test]
fn a_proxy_port_is_a_port_and_only_without_network() {
    let with = |network: bool, port: u16| {
        spec_json("").replace(
            r#""network":false"#,
            &format!(r#""network":{network},"proxy_port":{port}"#),
        )
    };
    let spec: HardenSpec = serde_json::from_str(&with(false, 3128)).unwrap();
    assert_eq!(spec.net(), crate::spec::Net::Proxy(3128));
    spec.validate().unwrap();
    for bad in [with(false, 0), with(true, 3128)] {
        let spec: HardenSpec = serde_json::from_str(&bad).unwrap();
        let error = spec.validate().unwrap_err().to_string();
        assert!(error.contains("proxy_port"), "{error}");
    }
    let closed: HardenSpec = serde_json::from_str(&spec_json("")).unwrap();
    assert_eq!(closed.net(), crate::spec::Net::Closed);
}

#[test]
fn uid_and_tmp_size_are_required() {
    let without_uid = spec_json("").replace(r#""uid":1000123,"#, "");
    let error = serde_json::from_str::<HardenSpec>(&without_uid).unwrap_err();
    assert!(error.to_string().contains("missing field `uid`"), "{error}");
    // the key removed, not renamed: an unknown key would fail on its own
    let mut spec: serde_json::Value = serde_json::from_str(&spec_json("")).unwrap();
    spec.as_object_mut().unwrap().remove("tmp_bytes").unwrap();
    let without_tmp = spec.to_string();
    let error = serde_json::from_str::<HardenSpec>(&without_tmp).unwrap_err();
    assert!(
        error.to_string().contains("missing field `tmp_bytes`"),
        "{error}"
    );
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
        HardenSpec {
            uid: 0,
            ..good.clone()
        },
        HardenSpec {
            tmp_bytes: 0,
            ..good.clone()
        },
        HardenSpec {
            cgroups: vec!["sys/fs/cgroup/pids".into()],
            ..good.clone()
        },
        // hidden by the session's own mounts
        HardenSpec {
            workspace: "/tmp/ws".into(),
            ..good.clone()
        },
        HardenSpec {
            workspace: "/run/user/0/ws".into(),
            ..good.clone()
        },
        HardenSpec {
            tmp: "/dev/shm/t".into(),
            ..good.clone()
        },
        HardenSpec {
            read_only: vec!["/run/runtime".into()],
            ..good.clone()
        },
        HardenSpec {
            tmp: "/var/tmp".into(),
            ..good.clone()
        },
        HardenSpec {
            read_only: vec!["/".into()],
            ..good.clone()
        },
        HardenSpec {
            read_only: vec!["/dev/pts".into()],
            ..good.clone()
        },
        HardenSpec {
            read_only: vec!["/workspace/tools".into()],
            ..good.clone()
        },
        HardenSpec {
            workspace: "/tmp".into(),
            ..good.clone()
        },
        HardenSpec {
            tmp: "/proc".into(),
            ..good.clone()
        },
    ];
    for spec in cases {
        let error = spec.validate().unwrap_err();
        assert!(matches!(error, HardenError::InvalidSpec(_)), "{error}");
    }
    // a runtime in /tmp is shown inside the session's own /tmp
    HardenSpec {
        read_only: vec!["/tmp/runtime".into()],
        ..good.clone()
    }
    .validate()
    .unwrap();
    // the masked directories themselves are fine
    for tmp in ["/tmp", "/dev/shm"] {
        HardenSpec {
            tmp: tmp.into(),
            ..good.clone()
        }
        .validate()
        .unwrap();
    }
}

#[test]
fn search_permission_is_read_from_the_right_mode_bits() {
    let uid = 1_000_123;
    // owner class decides for the owner, even when "other" could search
    assert!(mounts::searchable(uid, 0, 0o700, uid));
    assert!(!mounts::searchable(uid, 0, 0o077, uid));
    // group class for the session's group (= its uid)
    assert!(mounts::searchable(0, uid, 0o710, uid));
    assert!(!mounts::searchable(0, uid, 0o701, uid));
    // other class for everyone else: /root is 0700 root:root
    assert!(!mounts::searchable(0, 0, 0o700, uid));
    assert!(mounts::searchable(0, 0, 0o711, uid));
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
    let error = HardenError::Identity {
        call: "setresuid",
        source: std::io::Error::from_raw_os_error(libc::EPERM),
    };
    assert!(
        error
            .to_string()
            .starts_with("step (d) user namespace: setresuid")
    );
    let error = ReleaseError::IdMap {
        file: "/proc/7/uid_map".into(),
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    };
    assert!(
        error
            .to_string()
            .starts_with("admission: writing /proc/7/uid_map: Invalid argument")
    );
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

#[test]
fn the_report_line_lists_each_step() {
    let report = HardenReport {
        landlock: LandlockEnforcement::Full,
        landlock_abi: 6,
        seccomp_denied_syscalls: 80,
        admission: Duration::from_micros(40),
        elapsed: Duration::from_micros(1500),
        steps: vec![
            ("unshare", Duration::from_micros(600)),
            ("seccomp", Duration::from_micros(900)),
        ],
    };
    assert_eq!(
        report.to_string(),
        "hardened: landlock=fully_enforced kernel_landlock_abi=6 seccomp_denied_syscalls=80 \
         admission_us=40 elapsed_us=1500 steps_us=unshare:600,seccomp:900"
    );
}

/// Each message of the child against each phase of the release: only `U` before and `D` after
/// it move the release on; the rest is an error naming what it was.
#[test]
fn a_release_moves_on_only_by_the_protocols_messages() {
    use std::os::fd::AsFd;
    let spec: HardenSpec = serde_json::from_str(&spec_json("")).unwrap();
    let (_read, write) = sys::pipe().unwrap();
    let pid = i32::try_from(std::process::id()).unwrap();
    let advance =
        |released, message: &[u8]| advance_release(pid, &spec, released, message, write.as_fd());
    assert_eq!(
        advance(true, b"Dhardened: ok").unwrap(),
        ReleaseProgress::Done("hardened: ok".to_owned())
    );
    let gone = advance(false, b"").unwrap_err().to_string();
    assert!(
        gone.contains("ended while entering its user namespace"),
        "{gone}"
    );
    let gone = advance(true, b"").unwrap_err().to_string();
    assert!(
        gone.contains("ended while completing its checklist"),
        "{gone}"
    );
    let failed = advance(true, b"Estep (g) landlock: nope").unwrap_err();
    assert_eq!(failed.to_string(), "session child: step (g) landlock: nope");
    let failed = advance(false, b"Estep (a) unshare: nope").unwrap_err();
    assert_eq!(failed.to_string(), "session child: step (a) unshare: nope");
    for (released, message) in [
        (false, &b"D"[..]),
        (true, b"U"),
        (false, b"UU"),
        (false, b"X"),
    ] {
        let error = advance(released, message).unwrap_err();
        assert!(
            matches!(error, ReleaseError::Protocol(_)),
            "{released} {message:?}: {error}"
        );
    }
    assert!(matches!(
        advance_release(0, &spec, true, b"D", write.as_fd()),
        Err(ReleaseError::InvalidPid(0))
    ));
}

/// `U` makes the zygote write the child's id maps: for a process that is not in a user
/// namespace of its own the kernel refuses them, and nothing is released.
#[test]
fn a_child_outside_its_user_namespace_is_not_released() {
    use std::os::fd::AsFd;
    let spec: HardenSpec = serde_json::from_str(&spec_json("")).unwrap();
    let (read, write) = sys::pipe().unwrap();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = i32::try_from(sleeper.id()).unwrap();
    let error = advance_release(pid, &spec, false, b"U", write.as_fd()).unwrap_err();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(matches!(error, ReleaseError::IdMap { .. }), "{error}");
    drop(write);
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut std::fs::File::from(read), &mut rest).unwrap();
    assert!(rest.is_empty(), "released: {rest:?}");
}
