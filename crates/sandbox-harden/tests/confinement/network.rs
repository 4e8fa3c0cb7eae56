//! Network: none by default (new namespace, seccomp on `socket`, Landlock on TCP), the host's
//! when allowed, and never the host's abstract UNIX sockets.

use std::io::Write;
use std::net::TcpListener;

use serde_json::json;

use crate::{INSIDE, Session, run_hardened, run_plain, succeeded};

#[test]
fn without_network_only_unix_sockets_can_be_created() {
    let session = Session::new();
    let code = r#"
for name, family, kind in [("AF_INET TCP", socket.AF_INET, socket.SOCK_STREAM),
                           ("AF_INET UDP", socket.AF_INET, socket.SOCK_DGRAM),
                           ("AF_INET6 TCP", socket.AF_INET6, socket.SOCK_STREAM),
                           ("AF_INET6 UDP", socket.AF_INET6, socket.SOCK_DGRAM),
                           ("AF_NETLINK", socket.AF_NETLINK, socket.SOCK_RAW),
                           ("AF_PACKET", socket.AF_PACKET, socket.SOCK_RAW)]:
    expect_permission_error(name, lambda: socket.socket(family, kind))
expect_permission_error("create_connection", lambda: socket.create_connection(("127.0.0.1", 9)))
# AF_UNIX works: a pair, and a named socket in the workspace.
a, b = socket.socketpair()
a.sendall(b"ping"); assert b.recv(4) == b"ping"
path = os.path.join(P["workspace"], "s.sock")
server = socket.socket(socket.AF_UNIX); server.bind(path); server.listen(1)
client = socket.socket(socket.AF_UNIX); client.connect(path)
peer, _ = server.accept(); client.sendall(b"pong"); assert peer.recv(4) == b"pong"
print("ok")
"#;
    let params = json!({"workspace": INSIDE});
    succeeded(run_hardened(&session.spec(false), code, &params));
}

#[test]
fn with_network_the_sandbox_reaches_a_loopback_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.write_all(b"hi").unwrap();
    });
    let session = Session::new();
    let code = r#"
with socket.create_connection(("127.0.0.1", P["port"]), timeout=10) as connection:
    assert connection.recv(2) == b"hi"
socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()
print("ok")
"#;
    succeeded(run_hardened(
        &session.spec(true),
        code,
        &json!({"port": port}),
    ));
    server.join().unwrap();
}

#[test]
fn abstract_unix_sockets_outside_the_sandbox_are_unreachable() {
    // With network the sandbox shares the host's network namespace, where abstract UNIX
    // sockets live; Landlock's scope keeps it away from those it did not create.
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("toolgate-harden-test-{}", std::process::id());
    let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = UnixListener::bind_addr(&address).unwrap();
    let code = r#"
def connect():
    with socket.socket(socket.AF_UNIX) as client:
        client.connect("\0" + P["name"])
"#;
    let params = json!({"name": name});
    succeeded(run_plain(&format!("{code}connect()"), &params));
    let session = Session::new();
    let hardened =
        format!("{code}expect_permission_error('connect to the host abstract socket', connect)");
    succeeded(run_hardened(&session.spec(true), &hardened, &params));
}
