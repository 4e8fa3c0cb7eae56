//! The adversarial suite, part 3: attempts to get out: the host's files, other processes'
//! environments (other sessions and tenants are in `neighbours.rs`).
//! The network and the kernel's risky syscalls are part 4, `adversarial_kernel.rs`. What each
//! case asserts, (a) to (d), is said in `adversarial.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use crate::common::repo_root;
use crate::harness::{
    KillMarked, PROBE, Sandbox, Traced, assert_no_marker, json, marker, py, runtime_path_in_tmp,
    small, within,
};

/// The host's files: secrets of the system, root's home, the server's data directory (made
/// world-readable here, as a careless operator would), the repository outside the runtime, and
/// the same through symlinks, hard links, `..` and `/proc/self/root`. Only the runtime (read) and
/// the session's own directories are reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_files_outside_the_runtime_cannot_be_read() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let secret = marker("datadir-secret");
    let data = s.dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(data.join("secret.txt"), &secret).unwrap();
    std::fs::set_permissions(
        data.join("secret.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let repo = repo_root();
    // the runtime the sessions run (TOOLGATE_PYTHON_RUNTIME, default .deps/python-runtime)
    let runtime = crate::common::zygote_config(None).runtime;

    let first = s.ok("attacker", "files", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let targets = [
        ("shadow", "/etc/shadow".to_owned()),
        ("passwd", "/etc/passwd".to_owned()),
        ("hostname", "/etc/hostname".to_owned()),
        ("root_bashrc", "/root/.bashrc".to_owned()),
        ("data_secret", data.join("secret.txt").display().to_string()),
        (
            "repo_manifest",
            repo.join("Cargo.toml").display().to_string(),
        ),
        ("repo_readme", repo.join("README.md").display().to_string()),
        ("repo_git", repo.join(".git/config").display().to_string()),
        (
            "repo_source",
            repo.join("crates/sandbox/src/lib.rs").display().to_string(),
        ),
        (
            "repo_zygote",
            repo.join("runtime/toolgate_zygote.py")
                .display()
                .to_string(),
        ),
        ("cgroups", "/sys/fs/cgroup/pids/pids.max".to_owned()),
        ("kernel_log", "/dev/kmsg".to_owned()),
        ("disk", "/dev/vda".to_owned()),
    ];
    let dirs = [
        ("ls_root", "/root".to_owned()),
        ("ls_slash", "/".to_owned()),
        ("ls_etc", "/etc".to_owned()),
        ("ls_home", "/home".to_owned()),
        ("ls_data", data.display().to_string()),
        ("ls_sessions", s.root.display().to_string()),
        ("ls_repo", repo.display().to_string()),
        ("ls_deps", repo.join(".deps").display().to_string()),
        ("ls_sys", "/sys".to_owned()),
        ("ls_var", "/var".to_owned()),
    ];
    // A target absent from this host would be "refused" whatever the confinement: only those
    // that exist are probed, and the ones that matter most must.
    let targets: Vec<(&str, String)> = targets
        .into_iter()
        .filter(|(name, path)| {
            let exists = std::path::Path::new(path).exists();
            if !exists {
                println!("{name}: {path} is not on this host; not probed");
            }
            exists
        })
        .collect();
    for required in [
        "shadow",
        "passwd",
        "data_secret",
        "repo_manifest",
        "repo_zygote",
    ] {
        assert!(
            targets.iter().any(|(name, _)| *name == required),
            "{required} must exist on the host for this test to mean anything"
        );
    }
    let mut code = PROBE.to_owned();
    for (name, path) in &targets {
        code += &format!("attempt('{name}', lambda: read({path:?}))\n");
    }
    for (name, path) in &dirs {
        code += &format!("attempt('{name}', lambda: os.listdir({path:?}))\n");
    }
    // around Landlock: a symlink, a hard link, `..`, the magic links of /proc
    let secret_path = py(&data.join("secret.txt"));
    code += &format!(
        "os.symlink('/etc/shadow', 'to_shadow')\n\
         os.symlink({secret_path}, 'to_data')\n\
         attempt('symlink_shadow', lambda: read('to_shadow'))\n\
         attempt('symlink_data', lambda: read('to_data'))\n\
         attempt('hardlink', lambda: os.link({secret_path}, 'linked'))\n\
         attempt('dotdot', lambda: read('../../data/secret.txt'))\n\
         attempt('proc_root', lambda: read('/proc/self/root' + {secret_path}))\n\
         attempt('proc_cwd', lambda: read('/proc/1/cwd/../../../data/secret.txt'))\n\
         attempt('write_etc', lambda: open('/etc/toolgate-adversarial', 'w'))\n\
         attempt('write_runtime', lambda: open({runtime:?} + '/pwned', 'w'))\n\
         attempt('runtime', lambda: read({cfg:?}))\n\
         attempt('own_mountinfo', lambda: read('/proc/self/mountinfo'))\n\
         json.dumps(seen)",
        runtime = runtime.display().to_string(),
        cfg = runtime.join("pyvenv.cfg").display().to_string(),
    );
    let call = s.ok("attacker", "files", &code, &limits).await;
    let seen = json(&call);
    println!("{seen:#}");
    let raw = seen.to_string();
    assert!(
        !raw.contains(&secret),
        "the data directory's secret leaked: {seen:#}"
    );
    let refused = |name: &str| {
        let value = seen[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name}: {seen:#}"));
        assert!(
            value.starts_with("PermissionError:")
                || value.starts_with("FileNotFoundError:")
                || value.starts_with("OSError:EXDEV")
                || value.starts_with("OSError:EROFS"),
            "{name} was not refused: {value}"
        );
    };
    // A checkout beneath /tmp has its runtime bound back into the session's own /tmp: listing
    // the directories on the way shows that path, and nothing else of the repository.
    let on_the_way = runtime_path_in_tmp();
    for (name, _) in targets.iter().chain(&dirs) {
        match (name, &on_the_way) {
            (&"ls_repo", Some(_)) => assert_eq!(seen[name], "ok:['.deps']", "{seen:#}"),
            (&"ls_deps", Some(_)) => assert_eq!(seen[name], "ok:['python-runtime']", "{seen:#}"),
            _ => refused(name),
        }
    }
    for name in [
        "symlink_shadow",
        "symlink_data",
        "hardlink",
        "dotdot",
        "proc_root",
        "proc_cwd",
        "write_etc",
        "write_runtime",
    ] {
        refused(name);
    }
    // controls: the runtime and the session's own /proc are readable
    assert!(
        seen["runtime"].as_str().unwrap().starts_with("ok:"),
        "{seen:#}"
    );
    assert!(
        seen["own_mountinfo"].as_str().unwrap().starts_with("ok:"),
        "{seen:#}"
    );
    assert!(!std::path::Path::new("/etc/toolgate-adversarial").exists());
    assert!(!runtime.join("pwned").exists());

    // bash sees the same
    let call = s
        .bash(
            "attacker",
            "files",
            &format!(
                "cat /etc/shadow {secret_path} {readme} 2>&1; ls /root 2>&1; echo end",
                readme = repo.join("README.md").display()
            ),
            &limits,
        )
        .await
        .unwrap();
    let out = &call.outcome.stdout;
    assert!(
        out.contains("Permission denied") && out.ends_with("end\n"),
        "{out}"
    );
    assert!(!out.contains(&secret), "{out}");
    assert!(!out.contains("toolgate"), "the README leaked: {out}");

    s.assert_survived("attacker", "files", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "files").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// Every `/proc/*/environ` (and cmdline) the session can find: only its own processes are in
/// its `/proc`, and a secret in the environment of a host process (started by this test, the
/// server's stand-in) appears nowhere the session can read, by Python or by bash. The session's
/// own environment is the clean one the zygote builds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_processes_environments_are_invisible() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let tag = marker("environ");
    let secret = format!(
        "{tag}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let _cleanup = KillMarked(tag.clone());
    let mut host = std::process::Command::new("/bin/sleep")
        .arg0(&tag)
        .arg("600")
        .env("TOOLGATE_ADVERSARIAL_SECRET", &secret)
        .spawn()
        .unwrap();
    let host_pid = host.id();
    // the planted secret is really there, for whoever may read it (once its exec is complete)
    within(
        Duration::from_secs(5),
        "the secret in the host process's environ",
        || {
            std::fs::read(format!("/proc/{host_pid}/environ"))
                .is_ok_and(|environ| String::from_utf8_lossy(&environ).contains(&secret))
        },
    )
    .await;

    let first = s.ok("attacker", "environ", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let code = format!(
        "{PROBE}\
         pids = sorted(p for p in os.listdir('/proc') if p.isdigit())\n\
         blob = []\n\
         for p in pids:\n    \
             for what in ('environ', 'cmdline', 'status'):\n        \
                 try:\n            \
                     blob.append(read(f'/proc/{{p}}/{{what}}').decode('latin-1'))\n        \
                 except OSError as e:\n            \
                     blob.append(type(e).__name__)\n    \
             for t in os.listdir(f'/proc/{{p}}/task'):\n        \
                 try:\n            \
                     blob.append(read(f'/proc/{{p}}/task/{{t}}/environ').decode('latin-1'))\n        \
                 except OSError as e:\n            \
                     blob.append(type(e).__name__)\n\
         attempt('host_environ', lambda: read('/proc/{host_pid}/environ'))\n\
         attempt('zygote_environ', lambda: read('/proc/{zygote}/environ'))\n\
         attempt('server_environ', lambda: read('/proc/{me}/environ'))\n\
         json.dumps({{'pids': pids, 'blob': '\\n'.join(blob), 'env': dict(os.environ), \
         'seen': seen}})",
        me = std::process::id(),
    );
    let call = s.ok("attacker", "environ", &code, &limits).await;
    let seen = json(&call);
    println!("{seen:#}");
    assert_eq!(seen["pids"], serde_json::json!(["1"]), "{seen:#}");
    let raw = seen.to_string();
    assert!(!raw.contains(&secret), "the secret leaked: {seen:#}");
    assert!(!raw.contains(&tag), "the host process is visible: {seen:#}");
    for name in ["host_environ", "zygote_environ", "server_environ"] {
        let value = seen["seen"][name].as_str().unwrap();
        assert!(
            value.starts_with("FileNotFoundError:") || value.starts_with("PermissionError:"),
            "{name}: {value}"
        );
    }
    // the session's own environment: the zygote's few variables, nothing of this process's
    let env = seen["env"].as_object().unwrap();
    for key in env.keys() {
        assert!(
            [
                "PATH",
                "HOME",
                "LANG",
                "MPLBACKEND",
                "OPENBLAS_NUM_THREADS",
                "MPLCONFIGDIR",
                "TMPDIR"
            ]
            .contains(&key.as_str()),
            "unexpected variable {key} in {env:?}"
        );
    }
    let blob = seen["blob"].as_str().unwrap();
    assert!(
        !blob.contains("CARGO"),
        "the server's environment leaked: {blob}"
    );

    let call = s
        .bash(
            "attacker",
            "environ",
            "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; env; ls /proc",
            &limits,
        )
        .await
        .unwrap();
    assert!(!call.outcome.stdout.contains(&secret), "{:?}", call.outcome);
    assert!(!call.outcome.stdout.contains(&tag), "{:?}", call.outcome);

    assert!(host.try_wait().unwrap().is_none());
    s.assert_survived("attacker", "environ", "kept", "yes")
        .await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "environ").await);
    traced.assert_gone().await;
    host.kill().unwrap();
    host.wait().unwrap();
    assert_no_marker(&tag).await;
    s.m.shutdown().await;
}
