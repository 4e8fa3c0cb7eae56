//! The adversarial suite, part 3 (continued from `escape.rs`): other sessions and tenants:
//! another session's files and names, other tenants' sessions, and more sessions than an
//! account may have.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness::{PROBE, Sandbox, Traced, join_all, json, marker, runtime_path_in_tmp, small};
use toolgate_sandbox_manager::{FileError, ManagerError};

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
    let started = results.iter().filter(|r| r.is_ok()).count();
    let capped = results
        .iter()
        .filter(|r| matches!(r, Err(ManagerError::TooManySessions { limit: 3, .. })))
        .count();
    assert_eq!((started, capped), (3, 9), "{results:?}");
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
