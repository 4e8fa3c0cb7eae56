//! The C ABI as the zygote uses it: ctypes, in a forked child.

use serde_json::{Value, json};

use crate::{Session, cdylib, is_root, run_plain, succeeded};

/// Python that loads the cdylib like the zygote does and defines `harden(spec_bytes, size)`.
const CTYPES_PRELUDE: &str = r#"
lib = ctypes.CDLL(P["library"])
lib.toolgate_harden_session.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
lib.toolgate_harden_session.restype = ctypes.c_int
def harden(spec, size=512):
    message = ctypes.create_string_buffer(size)
    code = lib.toolgate_harden_session(spec, len(spec), message, size)
    return code, message.value.decode()
"#;

#[test]
fn c_abi_hardens_a_forked_child_and_leaves_the_parent_alone() {
    // The zygote's shape: the parent forks, the child hardens itself through ctypes.
    let session = Session::new();
    let code = format!(
        "{CTYPES_PRELUDE}\n{}",
        r#"
host = socket.gethostname()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    code, message = harden(json.dumps(P["spec"]).encode())
    if code == 0:
        try:
            open("/etc/shadow").read()
            shadow = "readable"
        except PermissionError:
            shadow = "denied"
        result = {"code": code, "message": message, "hostname": socket.gethostname(), "shadow": shadow}
    else:
        result = {"code": code, "message": message}
    os.write(write, json.dumps(result).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 65536))
os.waitpid(pid, 0)
child["parent_hostname_unchanged"] = socket.gethostname() == host
child["parent_shadow"] = len(open("/etc/shadow").read()) > 0 if os.geteuid() == 0 else None
print(json.dumps(child))
"#
    );
    let params = json!({"library": cdylib(), "spec": session.spec(false)});
    let result: Value = serde_json::from_str(&succeeded(run_plain(&code, &params))).unwrap();
    assert_eq!(result["code"], 0, "{result}");
    let message = result["message"].as_str().unwrap();
    assert!(message.starts_with("hardened: landlock="), "{message}");
    eprintln!("C ABI report: {message}");
    assert_eq!(result["hostname"], "session-7");
    assert_eq!(result["shadow"], "denied");
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
    assert_eq!(results["still_unconfined"], true);
}
