//! Listeners for a session's proxy: inside a confined session's own network namespace, or on the
//! host's loopback for an unconfined (development) session.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsFd;

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use crate::SESSION_PROXY_PORT;

/// A listener on `127.0.0.1:3128` inside the network namespace of process `pid` (a confined
/// session, whose loopback its confinement brought up). The socket belongs to that namespace
/// for its whole life, wherever it is used from: the server accepts on it in its own.
///
/// Made on a thread of its own that ends right after, so no thread of the server is ever left
/// in a session's namespace (entering one needs `CAP_SYS_ADMIN`: the server is root where it
/// confines sessions).
pub fn listen_in_netns(pid: i32) -> io::Result<TcpListener> {
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    std::thread::Builder::new()
        .name("toolgate-netns".into())
        .spawn(move || {
            move_into_link_name_space(namespace.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(io::Error::from)?;
            let listener =
                TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, SESSION_PROXY_PORT)))?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })?
        .join()
        .map_err(|_| {
            io::Error::other("the thread entering a session's network namespace panicked")
        })?
}

/// A listener on the host's loopback at a port the kernel picks: the proxy of an unconfined
/// session, which shares the host's network anyway (development only).
pub fn listen_on_loopback() -> io::Result<TcpListener> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
