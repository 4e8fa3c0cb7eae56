//! The adversarial suite, part 3: attempts to get out: the host's files, other processes'
//! environments, other sessions' files and names, and more sessions than an account may have.
//! The network and the kernel's risky syscalls are part 4, `adversarial_kernel.rs`. What each
//! case asserts, (a) to (d), is said in `adversarial.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use crate::common::repo_root;
use crate::harness::{
    KillMarked, PROBE, Sandbox, Traced, assert_no_marker, join_all, json, marker, py, small, within,
};
use toolgate_sandbox_manager::{FileError, ManagerError};

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

/// Another session's files: session A writes a secret into its workspace, its /tmp and its
/// /dev/shm; sessions B of the same account and of another account look for it by the
/// sessions root, A's workspace path, `..`, every `/proc/*/root`, a walk from `/` and bash's
/// `find`; the file API refuses another account's session and paths out of the workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sessions_files_cannot_be_found() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let secret = marker("session-secret");
    let a = s
        .ok(
            "acct-a",
            "a",
            &format!(
                "for path in ('secret.txt', '/tmp/secret.txt', '/dev/shm/secret.txt'):\n    \
                     open(path, 'w').write({secret:?})\nkept = 'yes'"
            ),
            &limits,
        )
        .await;
    let traced_a = Traced::of(a.pid);
    let ws = a.workspace.display().to_string();
    let account_dir = a.workspace.parent().unwrap().display().to_string();
    let root = s.root.display().to_string();
    let code = format!(
        "{PROBE}\
         attempt('root', lambda: os.listdir({root:?}))\n\
         attempt('account', lambda: os.listdir({account_dir:?}))\n\
         attempt('workspace', lambda: os.listdir({ws:?}))\n\
         attempt('file', lambda: read({ws:?} + '/secret.txt'))\n\
         attempt('tmp_sibling', lambda: os.listdir({ws:?} + '.tmp'))\n\
         attempt('parent', lambda: os.listdir('..'))\n\
         attempt('sibling', lambda: read('../' + os.path.basename({ws:?}) + '/secret.txt'))\n\
         attempt('tmp', lambda: os.listdir('/tmp'))\n\
         attempt('shm', lambda: os.listdir('/dev/shm'))\n\
         def roots():\n    \
             found = {{}}\n    \
             for p in os.listdir('/proc'):\n        \
                 if p.isdigit():\n            \
                     for d in ('tmp', 'dev/shm', {ws:?}[1:]):\n                \
                         try:\n                    \
                             found[p + '/' + d] = os.listdir(f'/proc/{{p}}/root/{{d}}')\n                \
                         except OSError as e:\n                    \
                             found[p + '/' + d] = type(e).__name__\n    \
             return found\n\
         attempt('proc_roots', roots)\n\
         def walk():\n    \
             hits = []\n    \
             for top in ('/', '/proc', '/tmp', '/dev/shm', '/work', '/root', '/var', '/home'):\n        \
                 for d, subdirs, files in os.walk(top):\n            \
                     if d.startswith(('/proc/', '/sys', '/usr')):\n                \
                         subdirs[:] = []\n            \
                     hits += [os.path.join(d, f) for f in files if 'secret' in f]\n    \
             return hits\n\
         attempt('walk', walk)\n\
         json.dumps(seen)"
    );
    let find = format!(
        "find / -xdev -name 'secret*' 2>/dev/null; find /tmp /dev/shm {root} -name 'secret*' \
         2>/dev/null; cat {ws}/secret.txt 2>&1; grep -r {secret} {root} 2>&1; echo end"
    );
    for account in ["acct-a", "acct-b"] {
        let b = s.ok(account, "b", &code, &limits).await;
        let traced_b = Traced::of(b.pid);
        let seen = json(&b);
        println!("{account}: {seen:#}");
        assert!(
            !seen.to_string().contains(&secret),
            "{account} found A's secret: {seen:#}"
        );
        for name in [
            "root",
            "account",
            "workspace",
            "file",
            "tmp_sibling",
            "parent",
            "sibling",
        ] {
            let value = seen[name].as_str().unwrap();
            assert!(
                value.starts_with("PermissionError:") || value.starts_with("FileNotFoundError:"),
                "{account}: {name} was not refused: {value}"
            );
        }
        // its own /tmp and /dev/shm are empty, not A's (but for the way to a runtime kept
        // beneath /tmp, bound back into every session's /tmp)
        let tmp_listing = match runtime_path_in_tmp() {
            Some(first) => format!("ok:['{first}']"),
            None => "ok:[]".to_owned(),
        };
        assert_eq!(seen["tmp"], tmp_listing.as_str(), "{seen:#}");
        assert_eq!(seen["shm"], "ok:[]", "{seen:#}");
        assert_eq!(seen["walk"], "ok:[]", "{seen:#}");
        let proc_roots = seen["proc_roots"].as_str().unwrap();
        let own_tmp = format!("ok:{{'1/tmp': {}", &tmp_listing[3..]);
        assert!(proc_roots.starts_with(&own_tmp), "{proc_roots}");

        let call = s.bash(account, "b", &find, &limits).await.unwrap();
        assert!(!call.outcome.stdout.contains(&secret), "{:?}", call.outcome);
        assert!(
            !call.outcome.stdout.contains("secret.txt\n"),
            "{account} found a secret file: {:?}",
            call.outcome
        );
        assert!(call.outcome.stdout.ends_with("end\n"), "{:?}", call.outcome);
        assert!(s.m.close_session(account, "b").await);
        traced_b.assert_gone().await;
    }

    // the file API: another account cannot name A's session; a path cannot leave a workspace
    let other = s.m.read_file("acct-b", "a", "secret.txt", 1 << 20).await;
    assert!(
        matches!(other, Err(ManagerError::NoSuchSession)),
        "{other:?}"
    );
    s.ok("acct-a", "c", "1", &limits).await;
    let hash = a
        .workspace
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    for path in [
        format!("../{hash}/secret.txt"),
        format!("{ws}/secret.txt"),
        "/tmp/secret.txt".to_owned(),
    ] {
        let escaped = s.m.read_file("acct-a", "c", &path, 1 << 20).await;
        assert!(
            matches!(escaped, Err(ManagerError::File(FileError { .. }))),
            "{path}: {escaped:?}"
        );
    }
    // control: A reads its own
    let own =
        s.m.read_file("acct-a", "a", "secret.txt", 1 << 20)
            .await
            .unwrap();
    assert_eq!(own.bytes, secret.as_bytes());
    s.assert_survived("acct-a", "a", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("acct-a", "a").await);
    traced_a.assert_gone().await;
    s.m.shutdown().await;
}

/// Other tenants' names: the sessions root and account directories are 0711 so that a session
/// cannot list them ("other sessions' names stay hidden", workspace.rs), and Landlock refuses
/// them anyway. But each session's mount namespace is a copy of the host's, whose mount table
/// lists every live session's workspace mount (account id, the hash of the session id, the
/// session's host uid) in `/proc/self/mountinfo`, which a session may read. This asserts that
/// nothing a session can read names another tenant's account or session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_tenants_sessions_are_not_named_in_what_a_session_can_read() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let victim_account = "0b5e7c1e-tenant-a";
    let a = s
        .ok(victim_account, "payroll-2024", "kept = 'yes'", &limits)
        .await;
    let traced_a = Traced::of(a.pid);
    let hash = a
        .workspace
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let a_uid = std::fs::read_to_string(format!("/proc/{}/uid_map", a.pid))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();

    let b = s.ok("tenant-b", "b", "kept = 'yes'", &limits).await;
    let traced_b = Traced::of(b.pid);
    let code = "import json\n\
                seen = {}\n\
                for path in ('/proc/self/mountinfo', '/proc/self/mounts', '/proc/1/mountinfo', \
                             '/proc/self/mountstats', '/proc/mounts'):\n    \
                    try:\n        \
                        seen[path] = open(path).read()\n    \
                    except OSError as e:\n        \
                        seen[path] = type(e).__name__\n\
                json.dumps(seen)";
    let call = s.ok("tenant-b", "b", code, &limits).await;
    let seen = json(&call);
    // every line that names A's account or A's session directory (with A's uid beside them)
    let leaks: Vec<String> = seen
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, text)| {
            text.as_str()
                .unwrap_or_default()
                .lines()
                .filter(|line| line.contains(victim_account) || line.contains(&hash))
                .map(|line| format!("{path}: {line}"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "session B of another account can name session A (account {victim_account:?}, \
         directory {hash}, host uid {a_uid}):\n{}",
        leaks.join("\n")
    );
    s.assert_survived("tenant-b", "b", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    for (account, id, traced) in [
        (victim_account, "payroll-2024", &traced_a),
        ("tenant-b", "b", &traced_b),
    ] {
        assert!(s.m.close_session(account, id).await);
        traced.assert_gone().await;
    }
    s.m.shutdown().await;
}

/// One account opening more sessions than it may: the cap refuses the rest with a clear error
/// (also for calls without a session id, and for a burst of concurrent opens), the account's
/// own sessions and other accounts are unaffected, and closing one makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_account_cannot_open_too_many_sessions() {
    let s = Sandbox::start(|c| c.max_sessions_per_account = 3).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let mut traced = Vec::new();
    for i in 0..3 {
        let call = s
            .ok("greedy", &format!("s{i}"), "kept = 'yes'", &limits)
            .await;
        traced.push(Traced::of(call.pid));
    }
    let refused = s.exec("greedy", "s3", "1", &limits).await;
    let Err(error @ ManagerError::TooManySessions { limit: 3, .. }) = &refused else {
        panic!("expected the cap, got {refused:?}");
    };
    assert!(
        error.to_string().contains("already has 3 live sessions"),
        "{error}"
    );
    let one_off = s.m.exec("greedy", None, "1", &limits, &[], None).await;
    assert!(
        matches!(one_off, Err(ManagerError::TooManySessions { .. })),
        "{one_off:?}"
    );
    assert_eq!(s.m.live_sessions("greedy"), 3);

    // a burst of concurrent opens from another account: exactly the cap gets in
    let burst = (0..12).map(|i| {
        let (s, limits) = (&s, &limits);
        async move { s.exec("burst", &format!("b{i}"), "1", limits).await }
    });
    let results = join_all(burst.collect()).await;
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    let capped = results
        .iter()
        .filter(|r| matches!(r, Err(ManagerError::TooManySessions { limit: 3, .. })))
        .count();
    assert_eq!((admitted, capped), (3, 9), "{results:?}");
    assert_eq!(s.m.live_sessions("burst"), 3);
    // other accounts are unaffected, and so are the greedy account's sessions
    s.assert_healthy(zygote).await;
    s.assert_survived("greedy", "s0", "kept", "yes").await;
    assert!(s.m.close_session("greedy", "s1").await);
    assert!(s.ok("greedy", "s3", "1", &limits).await.fresh);
    traced[1].assert_gone().await;
    s.m.shutdown().await;
    for t in &traced {
        t.assert_gone().await;
    }
}

/// When the checkout (and so the runtime) lives beneath `/tmp`: the first directory below
/// `/tmp` on the way to it, which every session's own `/tmp` then shows.
fn runtime_path_in_tmp() -> Option<String> {
    let repo = repo_root();
    let below = repo.strip_prefix("/tmp").ok()?;
    below
        .components()
        .next()
        .map(|first| first.as_os_str().to_string_lossy().into_owned())
}
