//! The C ABI as the zygote uses it: ctypes, in a forked child.

use serde_json::{Value, json};

use crate::{Session, cdylib, is_root, run_plain, succeeded};

/// Python that loads the cdylib like the zygote does and defines its calls: each returns
/// (rc, message).
const CTYPES_PRELUDE: &str = r#"
lib = ctypes.CDLL(P["library"])
assert lib.toolgate_harden_abi_version() == 4
ERR = (ctypes.c_char_p, ctypes.c_size_t)
SPEC = (ctypes.c_char_p, ctypes.c_size_t)
FD = ctypes.c_int
def function(name, *argtypes):
    f = getattr(lib, name)
    f.argtypes, f.restype = (*argtypes, *ERR), ctypes.c_int
    def call(*args, size=512):
        message = ctypes.create_string_buffer(size)
        code = f(*args, message, size)
        return code, message.value.decode()
    return call
init = function("toolgate_zygote_init")
before = function("toolgate_before_session_fork")
after = function("toolgate_after_session_fork")
begin_ = function("toolgate_release_begin", ctypes.c_int, *SPEC)
advance_ = function("toolgate_release_advance", ctypes.c_int, *SPEC, ctypes.c_int,
                    ctypes.c_char_p, ctypes.c_size_t, FD)
harden_ = function("toolgate_harden_session", *SPEC, FD, FD, FD)
def release(pid, spec, status_r, release_w):
    """The zygote's side, its poll loop reduced to blocking reads; the pipes stay open until
    the child's last word, and are closed after."""
    try:
        code, message = begin_(pid, spec, len(spec))
        released = 0
        while code >= 0:
            said = os.read(status_r, 4096)
            code, message = advance_(pid, spec, len(spec), released, said, len(said), release_w)
            if code == 0:
                break
            released = 1
        return code, message
    finally:
        os.close(status_r); os.close(release_w)
def harden(spec, status_w=None, release_r=None, size=512):
    if status_w is None:       # a call that fails before any step: pipes nobody else holds
        status_r, status_w = os.pipe(); release_r, release_w = os.pipe()
    return harden_(spec, len(spec), status_w, release_r, -1, size=size)
"#;

#[test]
fn c_abi_hardens_a_forked_child_and_leaves_the_parent_alone() {
    // The zygote's shape: pid namespace, fork, restore, admission in the parent; the child
    // hardens itself through ctypes. Three times in a row: the pid namespace is restored.
    let session = Session::new();
    let code = format!(
        "{CTYPES_PRELUDE}\n{}",
        r#"
assert init() == (0, "")
host = socket.gethostname()
own_ns = os.readlink("/proc/self/ns/pid")
results = []
for _ in range(3):
    spec = json.dumps(P["spec"]).encode()
    status_r, status_w = os.pipe(); release_r, release_w = os.pipe()
    out_r, out_w = os.pipe()
    assert before() == (0, "")
    pid = os.fork()
    if pid == 0:
        os.close(status_r); os.close(release_w); os.close(out_r)
        code, message = harden(spec, status_w, release_r)
        if code == 0:
            try:
                open("/etc/shadow").read()
                shadow = "readable"
            except FileNotFoundError:
                shadow = "absent"
            # no exec here (as in the zygote), so nothing but the library clears capabilities
            caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith("Cap")]
            result = {"code": code, "message": message, "hostname": socket.gethostname(),
                      "shadow": shadow, "pid": os.getpid(), "uid": os.getuid(), "caps": caps}
        else:
            result = {"code": code, "message": message}
        os.write(out_w, json.dumps(result).encode())
        os._exit(0)
    assert after() == (0, "")
    assert os.readlink("/proc/self/ns/pid_for_children") == own_ns
    os.close(status_w); os.close(release_r); os.close(out_w)
    released = release(pid, spec, status_r, release_w)
    child = json.loads(os.read(out_r, 65536))
    os.waitpid(pid, 0)
    child["released"] = released
    results.append(child)
print(json.dumps({"children": results,
                  "parent_hostname_unchanged": socket.gethostname() == host,
                  "parent_shadow": len(open("/etc/shadow").read()) > 0 if os.geteuid() == 0 else None}))
"#
    );
    let params = json!({"library": cdylib(), "spec": session.spec(false)});
    let result: Value = serde_json::from_str(&succeeded(run_plain(&code, &params))).unwrap();
    for child in result["children"].as_array().unwrap() {
        assert_eq!(child["code"], 0, "{child}");
        let message = child["message"].as_str().unwrap();
        assert!(message.starts_with("hardened: landlock="), "{message}");
        // the zygote got the same report line from the child
        assert_eq!(child["released"], json!([0, message]));
        assert_eq!(child["hostname"], "session-7");
        assert_eq!(child["shadow"], "absent");
        assert_eq!(child["pid"], 1);
        assert_eq!(child["uid"], 1000);
        assert_eq!(
            child["caps"],
            json!(vec!["0".repeat(16); 5]),
            "capabilities left"
        );
    }
    eprintln!("C ABI report: {}", result["children"][0]["message"]);
    assert_eq!(result["parent_hostname_unchanged"], true);
    if is_root() {
        assert_eq!(result["parent_shadow"], true, "the parent stays unconfined");
    }
}

#[test]
fn c_abi_reports_errors_without_crashing() {
    let session = Session::new();
    let mut relative = session.spec(false);
    relative["workspace"] = json!("relative/workspace");
    let mut threaded = session.spec(false);
    threaded["hostname"] = json!("threaded");
    let code = format!(
        "{CTYPES_PRELUDE}\n{}",
        r#"
import threading
results = {}
results["bad_json"] = harden(b"{not json")
results["truncated"] = harden(b"{not json", size=8)
results["unknown_field"] = harden(json.dumps(dict(P["relative"], surprise=1)).encode())
results["relative_path"] = harden(json.dumps(P["relative"]).encode())
results["bad_fds"] = harden(json.dumps(P["threaded"]).encode(), -1, -2)
valid = json.dumps(P["threaded"]).encode()
results["release_pid_0"] = begin_(0, valid, len(valid))
# A second thread alive: Landlock and seccomp would bind only the calling one.
stop = threading.Event()
thread = threading.Thread(target=stop.wait); thread.start()
results["threaded"] = harden(json.dumps(P["threaded"]).encode())
stop.set(); thread.join()
results["still_unconfined"] = socket.gethostname() != "threaded"
print(json.dumps(results))
"#
    );
    let params = json!({"library": cdylib(), "relative": relative, "threaded": threaded});
    let results: Value = serde_json::from_str(&succeeded(run_plain(&code, &params))).unwrap();
    let check = |name: &str, prefix: &str| {
        let (code, message) = (&results[name][0], results[name][1].as_str().unwrap());
        assert_eq!(*code, -1, "{name}: {message}");
        assert!(message.starts_with(prefix), "{name}: {message}");
    };
    check("bad_json", "invalid harden spec JSON: key must be a string");
    // 8 bytes of buffer: 7 of the message and the NUL.
    assert_eq!(results["truncated"][1], "invalid");
    check(
        "unknown_field",
        "invalid harden spec JSON: unknown field `surprise`",
    );
    check(
        "relative_path",
        "invalid harden spec: workspace path relative/workspace is not absolute",
    );
    check(
        "threaded",
        "step (0) single-thread check: the process has 2 threads",
    );
    check("bad_fds", "invalid descriptors -1 and -2");
    check("release_pid_0", "admission: invalid child pid 0");
    assert_eq!(results["still_unconfined"], true);
}
