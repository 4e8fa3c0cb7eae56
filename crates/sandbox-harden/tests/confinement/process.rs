//! The process itself: signals, host name, limits, privileges, namespaces and mounts seen from
//! outside, failing closed (on either side of the fork), and the time it all takes.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::{
    INSIDE, MAX_FILE_BYTES, MAX_OPEN_FILES, PROBE, SESSION_UID, Session, hardened_command, is_root,
    python, run_hardened, run_plain, session_pid, shared_dir, succeeded,
};

#[test]
fn processes_outside_the_sandbox_cannot_be_signalled() {
    // The server (this test process) is not even nameable from the session's pid namespace;
    // Landlock's signal scope would refuse it anyway. Its own children it can signal.
    let session = Session::new();
    let code = r#"
import signal, subprocess
for sig in (0, signal.SIGKILL):
    try:
        os.kill(P["server_pid"], sig)
        raise AssertionError("signalled the server")
    except (ProcessLookupError, PermissionError):
        pass
assert os.getppid() == 0, os.getppid()      # the parent is outside the namespace
child = subprocess.Popen(["/bin/sleep", "30"])
os.kill(child.pid, signal.SIGTERM)
assert child.wait() == -signal.SIGTERM
print("ok")
"#;
    let params = json!({"server_pid": std::process::id()});
    succeeded(run_hardened(&session.spec(false), code, &params));
    succeeded(run_plain("os.kill(P['server_pid'], 0)", &params));
}

#[test]
fn hostname_is_the_sessions_and_the_hosts_is_untouched() {
    let host_before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let session = Session::new();
    let stdout = succeeded(run_hardened(
        &session.spec(false),
        "print(socket.gethostname())",
        &json!({}),
    ));
    assert_eq!(stdout.trim(), "session-7");
    let host_after = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(host_before, host_after);
}

#[test]
fn limits_are_set_and_an_oversized_write_is_an_oserror() {
    let session = Session::new();
    let code = r#"
import resource
assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)
assert resource.getrlimit(resource.RLIMIT_NOFILE) == (P["files"], P["files"]), resource.getrlimit(resource.RLIMIT_NOFILE)
assert resource.getrlimit(resource.RLIMIT_FSIZE) == (P["bytes"], P["bytes"])
assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (P["files"] * 2, P["files"] * 2))
    raise AssertionError("raised RLIMIT_NOFILE")
except ValueError:          # CPython's answer to EPERM: "not allowed to raise maximum limit"
    pass
# Python ignores SIGXFSZ, so the write past the limit fails with EFBIG instead of killing it.
fd = os.open(os.path.join(P["workspace"], "big"), os.O_WRONLY | os.O_CREAT)
assert os.write(fd, b"x" * P["bytes"]) == P["bytes"]
error = errno_of(lambda: os.write(fd, b"x"))
assert error == errno.EFBIG, error
print("ok")
"#;
    let params = json!({
        "files": MAX_OPEN_FILES,
        "bytes": MAX_FILE_BYTES,
        "workspace": INSIDE,
    });
    succeeded(run_hardened(&session.spec(false), code, &params));
}

#[test]
fn no_new_privs_makes_setuid_binaries_powerless() {
    let session = Session::new();
    let code = r#"
libc = ctypes.CDLL(None, use_errno=True)
PR_GET_NO_NEW_PRIVS, PR_GET_SECCOMP = 39, 21
assert libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1
assert libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2
print("ok")
"#;
    succeeded(run_hardened(&session.spec(false), code, &json!({})));

    if !is_root() {
        eprintln!("not root: the set-user-ID part needs root to create a set-user-ID binary");
        return;
    }
    // A set-user-ID-root copy of `id`, readable by the sandbox.
    let bin = shared_dir();
    let suid_id = bin.path().join("id");
    std::fs::copy("/usr/bin/id", &suid_id).unwrap();
    std::fs::set_permissions(&suid_id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // The control drops to nobody first; the session is user 1000 already. Unconfined, the
    // set-user-ID binary's effective uid is root.
    let control = r#"
import subprocess
os.setgid(65534); os.setuid(65534)
print(subprocess.run([P["id"], "-u"], capture_output=True, text=True, check=True).stdout.strip())
"#;
    let params = json!({"id": suid_id});
    let control = succeeded(run_plain(control, &params));
    assert_eq!(control.trim(), "0", "control: set-user-ID works unconfined");
    let code = r#"
import subprocess
print(subprocess.run([P["id"], "-u"], capture_output=True, text=True, check=True).stdout.strip())
"#;
    let spec = session.spec_with(false, &[bin.path()]);
    let hardened = succeeded(run_hardened(&spec, code, &params));
    assert_eq!(hardened.trim(), "1000", "set-user-ID gained privileges");
}

#[test]
fn seen_from_outside_namespaces_privileges_and_an_empty_network() {
    let session = Session::new();
    with_waiting_child(&session.spec(false), |pid| {
        let pid_text = pid.to_string();
        assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
        assert_eq!(status_field(pid, "Seccomp:"), "2");
        // the host sees the session's host uid and gid, and no capability at all
        assert_eq!(
            status_field(pid, "Uid:"),
            format!("{SESSION_UID}\t").repeat(4).trim()
        );
        assert_eq!(
            status_field(pid, "Gid:"),
            format!("{SESSION_UID}\t").repeat(4).trim()
        );
        assert_eq!(status_field(pid, "Groups:"), "");
        for set in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
            assert_eq!(status_field(pid, set), "0000000000000000", "{set}");
        }
        for kind in ["net", "ipc", "uts", "mnt", "user", "pid"] {
            assert_ne!(
                namespace(&pid_text, kind),
                namespace("self", kind),
                "{kind} namespace not new"
            );
        }
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
        assert_eq!(
            map.split_whitespace().collect::<Vec<_>>(),
            ["1000", &SESSION_UID.to_string(), "1"]
        );
        // The new network namespace has loopback only, and it is down (no ::1 address).
        let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
        let interfaces: Vec<&str> = dev
            .lines()
            .skip(2)
            .filter_map(|line| line.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(interfaces, ["lo"]);
        let inet6 = std::fs::read_to_string(format!("/proc/{pid}/net/if_inet6")).unwrap();
        assert!(inet6.trim().is_empty(), "loopback is up: {inet6}");
    });
    // With network, the host's network namespace is kept (and the rest is still new).
    with_waiting_child(&session.spec(true), |pid| {
        let pid_text = pid.to_string();
        assert_eq!(namespace(&pid_text, "net"), namespace("self", "net"));
        assert_ne!(namespace(&pid_text, "mnt"), namespace("self", "mnt"));
    });
}

#[test]
fn mounts_become_private() {
    // This host has no shared mounts, so the probe runs under `unshare --mount --propagation
    // shared`, whose namespace has only shared ones (checked first as the control).
    let control = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "shared",
            "cat",
            "/proc/self/mountinfo",
        ])
        .output()
        .unwrap();
    let control = succeeded(control);
    assert!(control.contains(" shared:"), "control has no shared mount");

    let session = Session::new();
    let spec = session.spec(false);
    // The session reads its own mountinfo: its /proc is granted now.
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "shared", PROBE])
        .arg(spec.to_string())
        .arg(&python().executable)
        .args(["-I", "-c", "print(open('/proc/self/mountinfo').read())"])
        .current_dir(session.workspace())
        .output()
        .unwrap();
    let mountinfo = succeeded(output);
    assert!(mountinfo.contains(" /tmp "), "{mountinfo}");
    assert!(!mountinfo.contains(" shared:"), "{mountinfo}");
    assert!(!mountinfo.contains(" master:"), "{mountinfo}");
}

#[test]
fn probe_fails_closed_with_the_failing_step_named() {
    let session = Session::new();
    let mut spec = session.spec(false);
    spec["read_only"]
        .as_array_mut()
        .unwrap()
        .push(json!("/nonexistent/runtime"));
    let output = Command::new(PROBE)
        .arg(spec.to_string())
        .args(["/bin/echo", "must not run"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    assert!(output.stdout.is_empty(), "the program ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("step (g) landlock: cannot open /nonexistent/runtime"),
        "{stderr}"
    );
}

#[test]
fn a_failed_release_kills_the_child_before_it_runs_anything() {
    // The zygote's side fails, kills the child, and the program never runs: (1) a uid_map write
    // the kernel refuses, because the zygote (here the probe, started by `setpriv` without
    // CAP_SETUID in its bounding set) may not map another uid; (2) a cgroup that does not exist.
    let session = Session::new();
    let spec = session.spec(false);
    let mut bad_cgroup = spec.clone();
    bad_cgroup["cgroups"] = json!(["/sys/fs/cgroup/pids/toolgate-no-such-group"]);
    let cases: [(&[&str], &Value, &str); 2] = [
        (
            &["setpriv", "--bounding-set", "-setuid", PROBE],
            &spec,
            "admission: writing /proc/",
        ),
        (
            &[PROBE],
            &bad_cgroup,
            "admission: adding the session child to \
             /sys/fs/cgroup/pids/toolgate-no-such-group/cgroup.procs: No such file",
        ),
    ];
    for (command, spec, expected) in cases {
        let output = Command::new(command[0])
            .args(&command[1..])
            .arg(spec.to_string())
            .args(["/bin/echo", "must not run"])
            .current_dir(session.workspace())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(125), "{stderr}");
        assert!(output.stdout.is_empty(), "the program ran");
        assert!(stderr.contains(expected), "{stderr}");
    }
    // Control: the same spec and command succeed when nothing is refused.
    let output = Command::new(PROBE)
        .arg(spec.to_string())
        .args(["/bin/echo", "ran"])
        .current_dir(session.workspace())
        .output()
        .unwrap();
    assert_eq!(succeeded(output).trim(), "ran");
}

#[test]
fn harden_session_timing() {
    // The probe runs `true`, which exits at once; `--time` prints how long the fork took until
    // the child was fully hardened (unshare of the pid namespace, fork, the child's checklist,
    // the zygote's id maps), and the child's report.
    let session = Session::new();
    let spec = session.spec(false).to_string();
    let runs: Vec<(u64, u64)> = (0..30)
        .map(|_| {
            let output = Command::new(PROBE)
                .args(["--time", &spec, "/bin/true"])
                .current_dir(session.workspace())
                .output()
                .unwrap();
            let stderr = String::from_utf8(output.stderr).unwrap();
            assert!(output.status.success(), "{stderr}");
            let number = |after: &str| -> u64 {
                stderr
                    .split(after)
                    .nth(1)
                    .and_then(|rest| rest.split([' ', ')']).next())
                    .unwrap_or_else(|| panic!("no {after:?} in {stderr:?}"))
                    .parse()
                    .unwrap()
            };
            (number("ready "), number("elapsed_us="))
        })
        .collect();
    let summary = |mut micros: Vec<u64>| {
        micros.sort_unstable();
        let percentile = |p: usize| micros[(micros.len() - 1) * p / 100];
        format!(
            "min {} us, p50 {} us, p90 {} us, max {} us",
            micros[0],
            percentile(50),
            percentile(90),
            micros[micros.len() - 1]
        )
    };
    let ready: Vec<u64> = runs.iter().map(|run| run.0).collect();
    let checklist: Vec<u64> = runs.iter().map(|run| run.1).collect();
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    eprintln!(
        "hardened fork request to ready child over {} runs: {} ({build} build)",
        runs.len(),
        summary(ready.clone())
    );
    eprintln!("  of which the child's checklist: {}", summary(checklist));
    // A figure, not a test of speed (shared machines are noisy): `toolgate-bench --sandbox`
    // and the zygote's own figures are where the speed goals are watched.
}

/// A hardened Python that says it is ready and waits for stdin to close, so the test can look at
/// it from outside through `/proc/<host pid>`.
fn with_waiting_child(spec: &Value, inspect: impl FnOnce(u32)) {
    let code = "print(os.getpid(), flush=True); sys.stdin.read()";
    let mut child = hardened_command(spec, code, &json!({}))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "1", "pid 1 of its namespace");
    inspect(session_pid(child.id()));
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

fn namespace(pid: &str, kind: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap()
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .unwrap()
        .trim()
        .to_owned()
}
