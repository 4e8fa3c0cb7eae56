//! Landlock's filesystem confinement: the session's own directories work, nothing else is
//! reachable.

use serde_json::json;

use crate::{INSIDE, Session, is_root, run_hardened, run_plain, shared_dir, succeeded};

#[test]
fn workspace_and_tmp_are_writable_and_the_runtime_still_works() {
    let session = Session::new();
    let code = r##"
import subprocess, threading
for directory in (P["workspace"], P["tmp"], os.environ["TMPDIR"]):
    path = os.path.join(directory, "notes.txt")
    with open(path, "w") as f:
        f.write("kept")
    assert open(path).read() == "kept"
    os.mkdir(os.path.join(directory, "sub"))
    os.rename(path, os.path.join(directory, "sub", "moved.txt"))
    os.remove(os.path.join(directory, "sub", "moved.txt"))
    os.rmdir(os.path.join(directory, "sub"))
import tempfile
with tempfile.NamedTemporaryFile() as f:
    assert f.name.startswith(P["tmp"]), f.name
# A script written to the workspace runs; so do the read-only system binaries.
script = os.path.join(P["workspace"], "run.sh")
with open(script, "w") as f:
    f.write("#!/bin/sh\necho from-workspace\n")
os.chmod(script, 0o755)
assert subprocess.run([script], capture_output=True, text=True).stdout == "from-workspace\n"
# Threads (glibc falls back from clone3 to clone) and imports still work.
box = []
thread = threading.Thread(target=lambda: box.append(sum(range(10))))
thread.start(); thread.join()
assert box == [45]
import json as _json, decimal, sqlite3
print("ok")
"##;
    let params = json!({"workspace": INSIDE, "tmp": "/tmp"});
    let stdout = succeeded(run_hardened(&session.spec(false), code, &params));
    assert_eq!(stdout.trim(), "ok");
}

#[test]
fn host_files_are_unreadable_and_writes_outside_the_session_fail() {
    let session = Session::new();
    let outside = shared_dir();
    let code = r#"
expect_absent("read /etc/shadow", lambda: open("/etc/shadow").read())
expect_absent("read /etc/passwd", lambda: open("/etc/passwd").read())
expect_absent("stat the host's workspace path", lambda: os.stat(P["host_workspace"]))
expect_absent("write outside", lambda: open(os.path.join(P["outside"], "x"), "w"))
# the root holds the way to the read-only paths (the runtime may be in /root) and nothing else
if os.path.exists("/root"):
    expect_permission_error("list /root", lambda: os.listdir("/root"))
expect_permission_error("list /", lambda: os.listdir("/"))
expect_unwritable("write /etc", lambda: open("/etc/evil", "w"))
expect_unwritable("write into the root", lambda: os.mkdir("/evil"))
expect_unwritable("write into the runtime", lambda: open(os.path.join(sys.base_prefix, "evil.py"), "w"))
expect_unwritable("overwrite a runtime file", lambda: open(os.__file__, "a"))
expect_permission_error("mknod in the workspace", lambda: os.mknod(os.path.join(P["workspace"], "disk"), 0o600 | 0o060000, os.makedev(8, 0)))
print("ok")
"#;
    let params = json!({
        "outside": outside.path(),
        "workspace": INSIDE,
        "host_workspace": session.workspace(),
    });
    succeeded(run_hardened(&session.spec(false), code, &params));

    if is_root() {
        // Control: unconfined root can do the two that matter.
        let control = r#"
open("/etc/shadow").read()
open(os.path.join(P["outside"], "x"), "w").write("x")
os.mknod(os.path.join(P["outside"], "disk"), 0o600 | 0o060000, os.makedev(8, 0))
print("ok")
"#;
        succeeded(run_plain(control, &params));
    }
}

#[test]
fn another_sessions_workspace_is_unreachable() {
    let session = Session::new();
    let neighbour = Session::new();
    std::fs::write(neighbour.workspace().join("secret.csv"), "a,b\n1,2\n").unwrap();
    let code = r#"
expect_absent("stat the neighbour", lambda: os.stat(P["neighbour"]))
expect_absent("list the neighbour", lambda: os.listdir(P["neighbour"]))
expect_absent("read the neighbour's file", lambda: open(os.path.join(P["neighbour"], "secret.csv")).read())
expect_absent("write into the neighbour", lambda: open(os.path.join(P["neighbour"], "planted.py"), "w"))
print("ok")
"#;
    let params = json!({"neighbour": neighbour.workspace()});
    succeeded(run_hardened(&session.spec(false), code, &params));
    succeeded(run_plain(
        "assert os.listdir(P['neighbour']) == ['secret.csv']",
        &params,
    ));
}
