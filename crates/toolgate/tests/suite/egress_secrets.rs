//! Secrets added at the edge, end to end: a real sandboxed session `requests.get`s a loopback
//! HTTPS site (a CA of the test's own, trusted by the proxy as `egress_extra_ca_file`) with
//! `{{secret:NAME}}` in a header; the site receives the value, the session never holds it,
//! and the same placeholder to a host the secret is not bound to is refused and not sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;
use crate::sandbox::{is_error, text};

const VALUE: &str = "ghp_edge-secret-0123456789abcdef";

/// Request heads the site saw.
type Seen = Arc<Mutex<Vec<String>>>;

/// The test's CA (PEM) and an HTTPS site on 127.0.0.1 with a certificate of it, answering each
/// request (keep-alive) with the `Authorization` it got, as sites that reflect headers do.
async fn https_site() -> (String, SocketAddr, Seen) {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&kept));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buffer = Vec::new();
                loop {
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut chunk = [0u8; 4096];
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
                    buffer.drain(..end + 4);
                    let auth = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Authorization: "))
                        .unwrap_or("none")
                        .to_owned();
                    seen.lock().unwrap().push(head);
                    let body = format!("you sent {auth}");
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tls.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (ca.pem(), address, seen)
}

fn network(result: &Value) -> Vec<Value> {
    result["structuredContent"]["python"]["network"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_session_uses_a_secret_bound_to_a_host_without_ever_holding_it() {
    let (test_ca, site, seen) = https_site().await;
    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca_dir.path().join("test-ca.pem");
    std::fs::write(&ca_file, test_ca).unwrap();
    let f = fixture_with(&[
        "--egress-allow-private",
        "127.0.0.1",
        "--egress-extra-ca-file",
        ca_file.to_str().unwrap(),
    ])
    .await;
    for (name, value, host) in [
        ("GH_TOKEN", VALUE, "127.0.0.1"),
        ("ELSEWHERE", "elsewhere-value-42", "api.example.org"),
    ] {
        let set = f
            .write(json!({"secret_set": {"name": name, "value": value, "hosts": [host]}}))
            .await;
        assert!(!is_error(&set), "{set}");
    }
    let digest = hex::encode(Sha256::digest(VALUE.as_bytes()));
    let port = site.port();
    let code = format!(
        "import requests, os, hashlib\n\
         r = requests.get('https://127.0.0.1:{port}/user', \
         headers={{'Authorization': 'Bearer {{{{secret:GH_TOKEN}}}}'}})\n\
         print(r.status_code, r.text)\n\
         held = any(hashlib.sha256(v.encode()).hexdigest() == '{digest}' or 'GH_TOKEN' in k \
         for k, v in os.environ.items())\n\
         print('held', held, 'TOOLGATE_EGRESS_CA' in os.environ)\n\
         u = requests.get('https://127.0.0.1:{port}/leak', \
         headers={{'Authorization': '{{{{secret:ELSEWHERE}}}}'}})\n\
         print(u.status_code, 'ELSEWHERE' in u.text, 'not sent' in u.text)"
    );
    let result = f.write(json!({"code": code, "session_id": "edge"})).await;
    assert!(!is_error(&result), "{result}");
    let shown = text(&result);
    assert!(
        !shown.contains(VALUE),
        "the echoed value is redacted: {shown}"
    );
    let stdout = result["structuredContent"]["python"]["stdout"]
        .as_str()
        .unwrap();
    assert_eq!(
        stdout.trim().lines().collect::<Vec<_>>(),
        [
            "200 you sent Bearer [REDACTED:GH_TOKEN]",
            "held False False",
            "403 True True"
        ],
        "{result}"
    );
    // a run of no named session: the value is redacted because the run was given it
    let once = format!(
        "import requests\n\
         print(requests.get('https://127.0.0.1:{port}/again', \
         headers={{'Authorization': '{{{{secret:GH_TOKEN}}}}'}}).text)"
    );
    let again = f.write(json!({"code": once})).await;
    assert!(!is_error(&again), "{again}");
    assert_eq!(
        again["structuredContent"]["python"]["stdout"], "you sent [REDACTED:GH_TOKEN]\n",
        "{again}"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the refused request was not sent: {seen:?}");
    assert!(
        seen[1].contains(&format!("Authorization: {VALUE}")),
        "{seen:?}"
    );
    assert!(
        seen[0].starts_with("GET /user") && seen[0].contains(&format!("Bearer {VALUE}")),
        "{seen:?}"
    );
    // both tunnels were terminated: one carried the secret, one was refused
    let reached = network(&result);
    assert!(
        reached.len() == 2 && reached.iter().all(|r| r["kind"] == "https"),
        "{result}"
    );
    assert!(
        reached
            .iter()
            .any(|r| r.get("refused").is_none() && r["bytes_received"].as_u64() > Some(0)),
        "{result}"
    );
    assert!(
        reached.iter().any(|r| r["refused"]
            .as_str()
            .is_some_and(|m| m.contains("ELSEWHERE"))),
        "{result}"
    );
    // a bound secret is never handed to code as a variable either
    let asked = f
        .write(json!({"code": "import os\nos.environ.get('GH_TOKEN')", "secrets": ["GH_TOKEN"]}))
        .await;
    assert!(is_error(&asked), "{asked}");
    assert!(
        text(&asked).contains("bound to hosts") && !text(&asked).contains(VALUE),
        "{asked}"
    );
}
