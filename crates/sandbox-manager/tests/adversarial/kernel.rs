//! The adversarial suite, part 4: the kernel's interfaces out of a session: the network (every
//! family, every kind of address) and the risky syscalls, called directly. What each case
//! asserts, (a) to (d), is said in `adversarial.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::ErrorKind;

use crate::harness::{PROBE, Sandbox, Traced, json, marker, small};

/// Network egress: TCP and UDP over IPv4 and IPv6 to a public address, to listeners this test
/// opens on loopback, to the cloud metadata address; raw, packet and netlink sockets; DNS; an
/// abstract Unix socket of the host; bash's /dev/tcp. Every socket of a network family is
/// refused by the seccomp filter (EPERM) before any address matters, so this holds whether or
/// not the host has IPv6 or a route out; the session's network namespace would stop them next
/// (its loopback is down). The test's listeners see no connection and no datagram.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_egress() {
    use std::os::linux::net::SocketAddrExt;

    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let tcp4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp4 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // IPv6 loopback may be missing on a host: then only the socket call is tried
    let tcp6 = std::net::TcpListener::bind("[::1]:0").ok();
    let udp6 = std::net::UdpSocket::bind("[::1]:0").ok();
    let abstract_name = marker("abstract");
    let unix = std::os::unix::net::UnixListener::bind_addr(
        &std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap(),
    )
    .unwrap();
    for listener in [Some(&tcp4), tcp6.as_ref()].into_iter().flatten() {
        listener.set_nonblocking(true).unwrap();
    }
    for socket in [Some(&udp4), udp6.as_ref()].into_iter().flatten() {
        socket.set_nonblocking(true).unwrap();
    }
    unix.set_nonblocking(true).unwrap();
    let port = |addr: Option<std::net::SocketAddr>| addr.map_or(9, |a| a.port());

    let first = s.ok("attacker", "net", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    let code = format!(
        "{PROBE}\
         import socket\n\
         from socket import AF_INET, AF_INET6, AF_UNIX, SOCK_STREAM, SOCK_DGRAM, SOCK_RAW\n\
         def go(family, kind, addr, proto=0, send=False):\n    \
             s = socket.socket(family, kind, proto)\n    \
             s.settimeout(2)\n    \
             try:\n        \
                 if send:\n            \
                     s.sendto(b'x', addr)\n        \
                 else:\n            \
                     s.connect(addr)\n    \
             finally:\n        \
                 s.close()\n    \
             return 'connected'\n\
         attempt('tcp4_public', lambda: go(AF_INET, SOCK_STREAM, ('1.1.1.1', 443)))\n\
         attempt('tcp4_loopback', lambda: go(AF_INET, SOCK_STREAM, ('127.0.0.1', {t4})))\n\
         attempt('tcp4_metadata', lambda: go(AF_INET, SOCK_STREAM, ('169.254.169.254', 80)))\n\
         attempt('tcp6_loopback', lambda: go(AF_INET6, SOCK_STREAM, ('::1', {t6})))\n\
         attempt('tcp6_public', lambda: go(AF_INET6, SOCK_STREAM, ('2606:4700:4700::1111', 443)))\n\
         attempt('udp4_public', lambda: go(AF_INET, SOCK_DGRAM, ('1.1.1.1', 53), send=True))\n\
         attempt('udp4_loopback', lambda: go(AF_INET, SOCK_DGRAM, ('127.0.0.1', {u4}), send=True))\n\
         attempt('udp6_loopback', lambda: go(AF_INET6, SOCK_DGRAM, ('::1', {u6}), send=True))\n\
         attempt('udp6_public', lambda: go(AF_INET6, SOCK_DGRAM, ('2606:4700:4700::1111', 53), send=True))\n\
         attempt('raw_icmp', lambda: go(AF_INET, SOCK_RAW, ('1.1.1.1', 0), proto=socket.IPPROTO_ICMP, send=True))\n\
         attempt('packet', lambda: socket.socket(socket.AF_PACKET, SOCK_RAW))\n\
         attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, SOCK_RAW))\n\
         attempt('vsock', lambda: socket.socket(socket.AF_VSOCK, SOCK_STREAM))\n\
         attempt('dns', lambda: socket.getaddrinfo('example.com', 443))\n\
         attempt('abstract', lambda: go(AF_UNIX, SOCK_STREAM, '\\0{abstract_name}'))\n\
         attempt('unix_pair', lambda: socket.socketpair()[0].close())\n\
         json.dumps(seen)",
        t4 = tcp4.local_addr().unwrap().port(),
        t6 = port(tcp6.as_ref().map(|l| l.local_addr().unwrap())),
        u4 = udp4.local_addr().unwrap().port(),
        u6 = port(udp6.as_ref().map(|u| u.local_addr().unwrap())),
    );
    let call = s.ok("attacker", "net", &code, &limits).await;
    let seen = json(&call);
    println!("{seen:#}");
    for name in [
        "tcp4_public",
        "tcp4_loopback",
        "tcp4_metadata",
        "tcp6_loopback",
        "tcp6_public",
        "udp4_public",
        "udp4_loopback",
        "udp6_loopback",
        "udp6_public",
        "raw_icmp",
        "packet",
        "netlink",
        "vsock",
    ] {
        assert_eq!(seen[name], "PermissionError:EPERM", "{name}: {seen:#}");
    }
    // no resolver reachable (and no socket to ask it with)
    assert!(
        seen["dns"].as_str().unwrap().starts_with("gaierror"),
        "{seen:#}"
    );
    // abstract Unix sockets are per network namespace (and scoped by Landlock)
    let abstract_result = seen["abstract"].as_str().unwrap();
    assert!(
        abstract_result == "ConnectionRefusedError:ECONNREFUSED"
            || abstract_result == "PermissionError:EPERM",
        "{seen:#}"
    );
    // control: Unix socket pairs, which the runtime itself needs, still work
    assert!(
        seen["unix_pair"].as_str().unwrap().starts_with("ok:"),
        "{seen:#}"
    );

    let call = s
        .bash(
            "attacker",
            "net",
            &format!(
                "(echo x > /dev/tcp/127.0.0.1/{t4}) 2>&1; (echo x > /dev/tcp/1.1.1.1/443) 2>&1; \
                 (echo x > /dev/udp/127.0.0.1/{u4}) 2>&1; echo end",
                t4 = tcp4.local_addr().unwrap().port(),
                u4 = udp4.local_addr().unwrap().port(),
            ),
            &limits,
        )
        .await
        .unwrap();
    assert!(call.outcome.stdout.ends_with("end\n"), "{:?}", call.outcome);
    assert_eq!(
        call.outcome
            .stdout
            .matches("socket: Operation not permitted")
            .count(),
        3,
        "{:?}",
        call.outcome
    );

    // (a) the listeners saw nothing
    for listener in [Some(&tcp4), tcp6.as_ref()].into_iter().flatten() {
        let accepted = listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "a connection reached the test's listener: {accepted:?}"
        );
    }
    for socket in [Some(&udp4), udp6.as_ref()].into_iter().flatten() {
        let mut buf = [0u8; 16];
        let received = socket.recv_from(&mut buf);
        assert!(
            matches!(&received, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "a datagram reached the test's socket: {received:?}"
        );
    }
    let accepted = unix.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "a connection reached the abstract socket: {accepted:?}"
    );
    s.assert_survived("attacker", "net", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "net").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}

/// The kernel's risky interfaces, called directly through `ctypes.CDLL(None).syscall`: each is
/// refused (EPERM for the known routes to the host or a kernel exploit, ENOSYS for what the
/// filter does not know), and the session lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn risky_syscalls_are_refused_and_the_session_survives() {
    let s = Sandbox::start(|_| {}).await;
    let zygote = s.zygote_pid().await;
    let limits = small(30);
    let first = s.ok("attacker", "sys", "kept = 'yes'", &limits).await;
    let traced = Traced::of(first.pid);
    // x86_64 and aarch64 numbers; (name, x86_64, aarch64, arguments)
    let code = "import ctypes, errno, json, platform\n\
                libc = ctypes.CDLL(None, use_errno=True)\n\
                libc.syscall.restype = ctypes.c_long\n\
                arch = platform.machine()\n\
                buf = ctypes.create_string_buffer(256)\n\
                L = ctypes.c_long\n\
                calls = [\n    \
                    ('ptrace_traceme', 101, 117, [L(0), L(0), L(0), L(0)]),\n    \
                    ('ptrace_attach_1', 101, 117, [L(16), L(1), L(0), L(0)]),\n    \
                    ('unshare_user', 272, 97, [L(0x10000000)]),\n    \
                    ('unshare_mount', 272, 97, [L(0x00020000)]),\n    \
                    ('unshare_net', 272, 97, [L(0x40000000)]),\n    \
                    ('mount', 165, 40, [b'none', b'/tmp', b'tmpfs', L(0), None]),\n    \
                    ('umount', 166, 39, [b'/proc', L(2)]),\n    \
                    ('bpf', 321, 280, [L(5), buf, L(128)]),\n    \
                    ('io_uring_setup', 425, 425, [L(8), buf]),\n    \
                    ('setns', 308, 268, [L(0), L(0)]),\n    \
                    ('perf_event_open', 298, 241, [buf, L(0), L(-1), L(-1), L(0)]),\n    \
                    ('keyctl', 250, 219, [L(0), L(0)]),\n    \
                    ('add_key', 248, 217, [b'user', b'k', b'v', L(1), L(-2)]),\n    \
                    ('userfaultfd', 323, 282, [L(0)]),\n    \
                    ('init_module', 175, 105, [buf, L(16), b'']),\n    \
                    ('kexec_load', 246, 104, [L(0), L(0), None, L(0)]),\n    \
                    ('open_by_handle_at', 304, 265, [L(-100), buf, L(0)]),\n    \
                    ('pivot_root', 155, 41, [b'.', b'.']),\n    \
                    ('chroot', 161, 51, [b'.']),\n    \
                    ('clone_newuser', 56, 220, [L(0x10000000 | 17), L(0), L(0), L(0), L(0)]),\n    \
                    ('fsopen', 430, 430, [b'tmpfs', L(0)]),\n    \
                    ('open_tree', 428, 428, [L(-100), b'/', L(1)]),\n    \
                    ('reboot', 169, 142, [L(0xfee1dead), L(672274793), L(0x4321fedc), None]),\n    \
                    ('swapon', 167, 224, [b'/tmp/x', L(0)]),\n    \
                    ('settimeofday', 164, 170, [buf, None]),\n\
                ]\n\
                seen = {}\n\
                for name, x86, arm, args in calls:\n    \
                    nr = {'x86_64': x86, 'aarch64': arm}.get(arch)\n    \
                    if nr is None:\n        \
                        continue\n    \
                    ctypes.set_errno(0)\n    \
                    r = libc.syscall(L(nr), *args)\n    \
                    seen[name] = 'ok' if r >= 0 else errno.errorcode.get(ctypes.get_errno(), '?')\n\
                status = open('/proc/self/status').read()\n\
                wanted = ('Seccomp:', 'NoNewPrivs:', 'CapEff:')\n\
                seen['seccomp'] = [l for l in status.splitlines() if l.startswith(wanted)]\n\
                json.dumps(seen)";
    let call = s.ok("attacker", "sys", code, &limits).await;
    let seen = json(&call);
    println!("{seen:#}");
    let calls = seen.as_object().unwrap();
    assert!(calls.len() > 20, "{seen:#}");
    for (name, result) in calls {
        if name == "seccomp" {
            continue;
        }
        assert!(
            result == "EPERM" || result == "ENOSYS",
            "{name} was not refused: {result}"
        );
    }
    for name in [
        "ptrace_traceme",
        "unshare_user",
        "mount",
        "bpf",
        "io_uring_setup",
    ] {
        assert_eq!(seen[name], "EPERM", "{name}: {seen:#}");
    }
    assert_eq!(
        seen["seccomp"],
        serde_json::json!(["CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"]),
        "{seen:#}"
    );
    s.assert_survived("attacker", "sys", "kept", "yes").await;
    s.assert_healthy(zygote).await;
    assert!(s.m.close_session("attacker", "sys").await);
    traced.assert_gone().await;
    s.m.shutdown().await;
}
