//! The gate over real sockets on loopback: a session's hostile or plain requests, its run's
//! grant, and what is recorded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolgate_egress::EgressPolicy;

use crate::{
    EgressGrant, EgressLimits, EgressProxy, ProxySettings, SessionGate, listen_on_loopback,
};

/// A site that answers every request with "hi" and closes.
async fn site() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
                    )
                    .await;
            });
        }
    });
    addr
}

fn gate(allow_loopback: bool) -> (SessionGate, SocketAddr) {
    let allowed = if allow_loopback {
        vec!["127.0.0.1".to_owned()]
    } else {
        vec![]
    };
    let proxy = EgressProxy::new(ProxySettings {
        policy: Arc::new(EgressPolicy::new(&allowed).unwrap()),
        ..ProxySettings::default()
    });
    let mut gate = proxy.gate();
    gate.serve(listen_on_loopback().unwrap()).unwrap();
    let addr = gate.env()["HTTP_PROXY"]
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    (gate, addr)
}

fn grant() -> EgressGrant {
    EgressGrant {
        limits: EgressLimits {
            max_connections: 4,
            max_bytes: 0,
            bytes_per_second: 0,
        },
        ..EgressGrant::default()
    }
}

/// Sends `bytes` to the proxy and reads its whole answer.
async fn ask(proxy: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_plain_request_and_a_tunnel_go_through_and_are_recorded() {
    let site = site().await;
    let (gate, proxy) = gate(true);
    let run = gate.begin(Some(grant())).unwrap();
    let answer = ask(
        proxy,
        format!("GET http://{site}/x HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("hi"),
        "{answer}"
    );
    let answer = ask(
        proxy,
        format!("CONNECT {site} HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\nHost: {site}\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"),
        "{answer}"
    );
    let reached = run.finish();
    assert_eq!(reached.len(), 2, "{reached:?}");
    assert_eq!(
        (reached[0].kind.as_str(), reached[1].kind.as_str()),
        ("http", "connect")
    );
    assert!(
        reached
            .iter()
            .all(|d| d.refused.is_none() && d.bytes_received > 0 && d.port == site.port())
    );
}

#[tokio::test]
async fn hostile_requests_get_a_clear_answer_and_nothing_leaves() {
    let site = site().await;
    let (gate, proxy) = gate(false);
    let run = gate.begin(Some(grant())).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"\x16\x03\x01\x02\x00garbage\r\n\r\n".to_vec(),
            "400 Bad Request",
        ),
        (
            format!("GET /x HTTP/1.1\r\nHost: {site}\r\n\r\n").into_bytes(),
            "400 Bad Request",
        ),
        (
            b"CONNECT nohost.invalid HTTP/1.1\r\n\r\n".to_vec(),
            "502 Bad Gateway",
        ),
        (
            b"CONNECT a b:80 HTTP/1.1\r\n\r\n".to_vec(),
            "400 Bad Request",
        ),
        (
            b"CONNECT example.org:0 HTTP/1.1\r\n\r\n".to_vec(),
            "400 Bad Request",
        ),
        (
            format!("GET http://user:pw@{site}/ HTTP/1.1\r\n\r\n").into_bytes(),
            "400 Bad Request",
        ),
        (
            format!("GET http://a/{} HTTP/1.1\r\n\r\n", "a".repeat(40_000)).into_bytes(),
            "400 Bad Request",
        ),
        // the guard: loopback, metadata, private, in any notation
        (
            format!("CONNECT {site} HTTP/1.1\r\n\r\n").into_bytes(),
            "403 Forbidden",
        ),
        (
            b"GET http://169.254.169.254/latest HTTP/1.1\r\n\r\n".to_vec(),
            "403 Forbidden",
        ),
        (
            b"CONNECT [::ffff:127.0.0.1]:80 HTTP/1.1\r\n\r\n".to_vec(),
            "403 Forbidden",
        ),
        (b"CONNECT 2130706433:80 HTTP/1.1\r\n\r\n".to_vec(), "40"),
    ];
    for (request, status) in &cases {
        let answer = ask(proxy, request).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}"))
                && answer.contains("toolgate network proxy"),
            "{:?} -> {answer}",
            String::from_utf8_lossy(&request[..request.len().min(60)])
        );
    }
    // a head that never ends within its bound, sent slowly, is cut rather than held
    let answer = ask(proxy, &[b'a'; 40_000]).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let refused = run.finish();
    assert!(refused.iter().all(|d| d.refused.is_some()), "{refused:?}");
    assert!(
        refused
            .iter()
            .any(|d| d.refused.as_deref().unwrap().contains("loopback"))
    );
}

#[tokio::test]
async fn lists_apply_and_nothing_passes_between_runs() {
    let site = site().await;
    let (gate, proxy) = gate(true);
    let get = format!("GET http://{site}/ HTTP/1.1\r\n\r\n");
    // no run: refused
    assert!(
        ask(proxy, get.as_bytes())
            .await
            .contains("no call of the service is running")
    );
    // a run that may reach only *.example.org, and one that denies the site
    let only = EgressGrant {
        allow: vec!["*.example.org".into()],
        ..grant()
    };
    let run = gate.begin(Some(only)).unwrap();
    let answer = ask(proxy, get.as_bytes()).await;
    assert!(answer.contains("not on this account's list"), "{answer}");
    drop(run);
    let denied = EgressGrant {
        deny: vec!["127.0.0.1".into()],
        ..grant()
    };
    let run = gate.begin(Some(denied)).unwrap();
    assert!(ask(proxy, get.as_bytes()).await.contains("may not reach"));
    let reached = run.finish();
    assert_eq!(reached.len(), 1);
    // after the run: refused again
    assert!(
        ask(proxy, get.as_bytes())
            .await
            .contains("no call of the service is running")
    );
    // a grant of nothing opens nothing
    assert!(gate.begin(None).is_none());
}

#[tokio::test]
async fn a_runs_end_closes_its_tunnels_and_concurrent_connections_are_capped() {
    let site = site().await;
    let (gate, proxy) = gate(true);
    let run = gate.begin(Some(grant())).unwrap();
    // four tunnels held open, the fifth refused
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        stream
            .write_all(format!("CONNECT {site} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = [0u8; 39];
        stream.read_exact(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        held.push(stream);
    }
    let fifth = ask(proxy, format!("CONNECT {site} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(fifth.starts_with("HTTP/1.1 429"), "{fifth}");
    let reached = run.finish();
    assert!(reached.iter().any(|d| {
        d.refused
            .as_deref()
            .is_some_and(|r| r.contains("4 connections"))
    }));
    // the run ended: every held tunnel is closed by the proxy
    for mut stream in held {
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "a tunnel outlived its run");
    }
}
