//! The session's own pid and user namespaces, its own root with its own `/proc`, `/tmp`,
//! `/dev/shm` and `/dev`, and nothing of the host's tree but the read-only paths it is given.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{
    SESSION_UID, Session, TMP_BYTES, hardened_command, run_hardened, run_plain, session_pid,
    shared_dir, succeeded,
};

#[test]
fn the_session_is_pid_1_and_user_1000_without_capabilities() {
    let session = Session::new();
    let code = r#"
import subprocess
assert os.getpid() == 1, os.getpid()
assert (os.getuid(), os.geteuid(), os.getgid(), os.getegid()) == (1000, 1000, 1000, 1000)
assert os.getgroups() == [], os.getgroups()
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
    assert status[field].strip() == "0" * 16, (field, status[field])
# /proc shows this namespace only: this process and the ones it starts, nothing of the host
child = subprocess.Popen(["/bin/sleep", "30"])
pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
assert pids == [1, child.pid], pids
assert str(P["server_pid"]) not in os.listdir("/proc")
child.kill(); child.wait()
# /proc/1 is the session itself: its own environment, readable (dumpable again after setresuid)
environ = open("/proc/1/environ", "rb").read().split(b"\0")
assert b"PATH=/usr/bin:/bin" in environ, environ
assert os.readlink("/proc/self") == "1"
# the map the zygote wrote: user 1000 here is the session's host uid there
print(open("/proc/self/uid_map").read().split())
"#;
    let params = json!({"server_pid": std::process::id()});
    let stdout = succeeded(run_hardened(&session.spec(false), code, &params));
    let expected = format!("['1000', '{SESSION_UID}', '1']");
    assert_eq!(stdout.trim(), expected);
    // Control: unconfined, the same Python sees the host's processes, among them this one.
    succeeded(run_plain(
        "assert str(P['server_pid']) in os.listdir('/proc') and os.getpid() != 1",
        &params,
    ));
}

#[test]
fn tmp_and_dev_shm_are_private_empty_and_capped_and_run_is_absent() {
    let first = Session::new();
    let second = Session::new();
    // What the first session leaves in its /tmp, the second must not see, nor the host.
    let code = r#"
import errno
assert os.listdir("/tmp") == [], os.listdir("/tmp")
assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
st = os.stat("/tmp")
assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1000, 1000, 0o700), st
open(os.path.join("/tmp", P["marker"]), "w").write("mine")
open(os.path.join("/dev/shm", P["marker"]), "w").write("mine")
# beyond tmp_bytes the tmpfs is full: ENOSPC (RLIMIT_FSIZE is larger, so not EFBIG)
with open("/tmp/big", "wb", buffering=0) as f:
    chunk = b"x" * 65536
    written, error = 0, 0
    try:
        while written <= 2 * P["tmp_bytes"]:
            written += f.write(chunk)
    except OSError as e:
        error = e.errno
assert error == errno.ENOSPC, (error, written)
assert written <= P["tmp_bytes"], written
os.remove("/tmp/big")
# the host's /run is not in the session's root at all
assert not os.path.exists("/run")
print("ok")
"#;
    let marker = format!("toolgate-tmp-marker-{}", std::process::id());
    let params = json!({"marker": marker, "tmp_bytes": TMP_BYTES});
    succeeded(run_hardened(&first.spec(false), code, &params));
    succeeded(run_hardened(&second.spec(false), code, &params));
    assert!(!std::path::Path::new("/tmp").join(&marker).exists());
    assert!(!std::path::Path::new("/dev/shm").join(&marker).exists());
}

#[test]
fn unix_sockets_the_host_bound_under_run_and_tmp_are_unreachable() {
    // Landlock (ABI 7) does not mediate connect(2) to pathname sockets: the session's own
    // root, which holds none of the host's directories, is what hides them (in /run, /tmp, and
    // anywhere else, like /var/tmp). The sockets are world-writable, so that DAC would not be
    // what stops the session either.
    let name = format!("toolgate-harden-test-{}.sock", std::process::id());
    let elsewhere = shared_dir();
    let paths = [
        std::path::Path::new("/run").join(&name),
        std::path::Path::new("/tmp").join(&name),
        elsewhere.path().join(&name),
    ];
    let _listeners: Vec<(UnixListener, RemovedOnDrop)> = paths
        .iter()
        .map(|path| {
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path).unwrap();
            let guard = RemovedOnDrop(path.clone());
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
            (listener, guard)
        })
        .collect();
    let code = r#"
for path in P["paths"]:
    client = socket.socket(socket.AF_UNIX)
    try:
        client.connect(path)
        raise AssertionError(f"connected to {path}")
    except FileNotFoundError:
        pass
print("ok")
"#;
    let params = json!({"paths": paths});
    let session = Session::new();
    succeeded(run_hardened(&session.spec(false), code, &params));
    // Control: unconfined, all three connect.
    let control = r#"
for path in P["paths"]:
    socket.socket(socket.AF_UNIX).connect(path)
"#;
    succeeded(run_plain(control, &params));
}

/// A file of the host's removed when the test ends, failed or not.
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn sigkill_of_the_session_leaves_no_process_behind() {
    // The session starts a daemon the classic way (setsid, double fork, stdio closed): it is
    // reparented to the session, pid 1 of the namespace, which the kernel empties when pid 1
    // dies.
    let marker = format!("toolgate-daemon-marker-{}", std::process::id());
    let code = r#"
import subprocess
# stdio closed, not /dev/null: the session may not open /dev (Landlock)
subprocess.run(["/bin/bash", "-c",
                f"setsid bash -c 'exec -a {P['marker']} sleep 300' <&- >&- 2>&- &"],
               check=True)
print("started", flush=True)
sys.stdin.read()
"#;
    let session = Session::new();
    let mut probe = hardened_command(&session.spec(false), code, &json!({"marker": marker}))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(probe.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "started");
    let pid = session_pid(probe.id());
    // Control: the daemon runs, and the scan of the host's /proc finds it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the daemon never showed up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = probe.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 9), "the probe reports SIGKILL");
    // The session was reaped, so its namespace is empty already; a short grace for /proc.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !processes_with(&marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            processes_with(&marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Host pids whose `argv[0]` is `marker` (the session's own command line holds the marker too,
/// as an argument: it must not count).
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline.split(|&byte| byte == 0).next() == Some(marker.as_bytes())
            })
        })
        .collect()
}

#[test]
fn a_read_only_path_beneath_an_unsearchable_directory_is_shown_alone() {
    // `locked` (0700, the host's root) holds `runtime` (0755) and a secret: the session's uid
    // could not pass `locked`, but the session's root has its own `locked` that holds only
    // `runtime`. The Python of these tests is found the same way when it lives in /root.
    let outer = shared_dir();
    let locked = outer.path().join("locked");
    let runtime = locked.join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::write(runtime.join("module.txt"), "shared").unwrap();
    std::fs::write(locked.join("secret.txt"), "the host's").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let code = r#"
assert open(os.path.join(P["runtime"], "module.txt")).read() == "shared"
mounts = open("/proc/self/mountinfo").read()
assert f" {P['runtime']} ro," in mounts, mounts
assert not os.path.exists(os.path.join(P["locked"], "secret.txt"))
assert os.stat(P["locked"]).st_mode & 0o7777 == 0o755
print("ok")
"#;
    let params = json!({"runtime": runtime, "locked": locked});
    let session = Session::new();
    let spec = session.spec_with(false, &[runtime.as_path()]);
    succeeded(run_hardened(&spec, code, &params));
    // Control: as the session's uid without the mask, `locked` cannot be passed.
    let control = r#"
os.setgid(P["uid"]); os.setuid(P["uid"])
try:
    open(os.path.join(P["runtime"], "module.txt")).read()
    raise AssertionError("read through a 0700 directory")
except PermissionError:
    pass
"#;
    succeeded(run_plain(
        control,
        &json!({"runtime": runtime, "uid": SESSION_UID}),
    ));
}

#[test]
fn the_root_holds_nothing_of_the_host_but_what_the_session_is_given() {
    // Paths of the host that exist here, none of them given to the session.
    let host_only: Vec<&str> = [
        "/var",
        "/home",
        "/sys",
        "/boot",
        "/srv",
        "/opt",
        "/etc/hostname",
    ]
    .into_iter()
    .filter(|path| std::path::Path::new(path).exists())
    .collect();
    assert!(
        host_only.len() >= 3,
        "too few host paths to look for: {host_only:?}"
    );
    let session = Session::new();
    let spec = session.spec(false);
    let code = r#"
assert os.getcwd() == "/workspace", os.getcwd()
for path in P["host_only"]:
    try:
        os.stat(path)
        raise AssertionError(f"{path} exists in the session")
    except FileNotFoundError:
        pass
# the mount table is the session's root and what it holds, nothing of the host's
points = {line.split()[4] for line in open("/proc/self/mountinfo")}
given = {"/", "/proc", "/tmp", "/dev/shm", "/workspace"}
given |= {"/dev/" + name for name in ("null", "zero", "full", "random", "urandom")}
given |= set(P["read_only"])
assert points <= given, points - given
assert {"/", "/proc", "/tmp", "/workspace"} <= points, points
# the root itself is read-only
try:
    os.mkdir("/planted")
    raise AssertionError("wrote into the root")
except OSError as error:
    assert error.errno in (errno.EACCES, errno.EROFS), error
open("/dev/null", "w").write("x")
assert os.readlink("/dev/fd") == "/proc/self/fd"
print("ok")
"#;
    let read_only: Vec<String> = spec["read_only"]
        .as_array()
        .unwrap()
        .iter()
        .map(|path| {
            std::fs::canonicalize(path.as_str().unwrap())
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    let params = json!({"host_only": host_only, "read_only": read_only});
    succeeded(run_hardened(&spec, code, &params));
    // Control: unconfined, every one of them exists.
    succeeded(run_plain(
        "assert all(os.path.exists(p) for p in P['host_only'])",
        &params,
    ));
}
