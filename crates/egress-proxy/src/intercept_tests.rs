//! Secrets at the edge end to end: a loopback HTTPS site with a CA of the test's own (which the
//! proxy trusts as the operator's extra CA), a proxy gate on loopback, and a client that trusts
//! the session's CA, as a session's code does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use toolgate_egress::EgressPolicy;
use toolgate_sandbox::{EdgeSecret, EgressGrant};

use crate::{EgressProxy, ProxySettings, SessionGate, listen_on_loopback};

const VALUE: &str = "ghp_the-real-token-value";

/// What the site received: each request head, as text.
type Seen = Arc<Mutex<Vec<String>>>;

/// A loopback site: HTTPS with a certificate of `ca` (or plain HTTP without), answering every
/// request on a connection (keep-alive) with `hello` — chunked for a POST.
async fn site(tls: Option<Arc<ServerConfig>>) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let seen = Arc::clone(&kept);
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    Some(config) => {
                        if let Ok(stream) = TlsAcceptor::from(config).accept(stream).await {
                            answer(stream, seen).await;
                        }
                    }
                    None => answer(stream, seen).await,
                }
            });
        }
    });
    (address, seen)
}

async fn answer(mut stream: impl AsyncRead + tokio::io::AsyncWrite + Unpin, seen: Seen) {
    let mut buffer = Vec::new();
    loop {
        let Some(end) = find(&buffer, b"\r\n\r\n") else {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end + 4);
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        while buffer.len() < length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            buffer.extend_from_slice(&chunk[..n]);
        }
        let body: Vec<u8> = buffer.drain(..length).collect();
        let post = head.starts_with("POST");
        seen.lock()
            .unwrap()
            .push(format!("{head}\n\n{}", String::from_utf8_lossy(&body)));
        let reply: &[u8] = if post {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        };
        stream.write_all(reply).await.unwrap();
    }
}

/// Waits until the run has recorded `n` connections (a connection is recorded as it ends,
/// which the proxy sees a moment after the client closed it).
async fn wait_recorded(run: &crate::RunEgress, n: usize) {
    while run.recorded() < n {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The test's CA and a site certificate for localhost and 127.0.0.1.
fn test_pki() -> (String, Arc<ServerConfig>) {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
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
    (ca.pem(), Arc::new(config))
}

/// A gate on loopback whose proxy trusts `extra_ca` and lets loopback be reached.
fn gate(extra_ca: &str) -> (SessionGate, SocketAddr) {
    let policy = EgressPolicy::new(&["127.0.0.0/8".to_owned(), "::1".to_owned()]).unwrap();
    let proxy = EgressProxy::new(ProxySettings {
        policy: Arc::new(policy),
        extra_roots: crate::extra_roots_from_pem(extra_ca.as_bytes()).unwrap(),
        index: None,
    });
    let mut gate = proxy.gate();
    gate.serve(listen_on_loopback().unwrap()).unwrap();
    let address = gate.env()["HTTP_PROXY"]
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    (gate, address)
}

fn grant_binding_token_to(host: &str) -> EgressGrant {
    EgressGrant {
        secrets: vec![EdgeSecret {
            name: "TOKEN".into(),
            value: VALUE.into(),
            hosts: vec![host.into()],
        }],
        ..EgressGrant::default()
    }
}

/// A TLS connection through the proxy's tunnel to `host:port`, trusting `ca` only.
async fn tunnel(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    ca: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let connect = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
    stream.write_all(connect.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    while find(&reply, b"\r\n\r\n").is_none() {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        reply.push(byte[0]);
    }
    assert!(reply.starts_with(b"HTTP/1.1 200"), "{reply:?}");
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .unwrap()
}

/// One response read whole (until `until` is in it, or the connection ends).
async fn response(stream: &mut (impl AsyncRead + Unpin), until: &str) -> String {
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&text).contains(until) {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8(text).unwrap()
}

#[tokio::test]
async fn a_bound_secret_reaches_its_host_inside_tls_and_the_tunnel_keeps_alive() {
    let (test_ca, site_tls) = test_pki();
    let (site, seen) = site(Some(site_tls)).await;
    let (gate, proxy) = gate(&test_ca);
    let run = gate
        .begin(Some(grant_binding_token_to("localhost")))
        .unwrap();
    let session_ca = gate.ca_pem().unwrap().to_owned();
    assert_eq!(gate.env()["TOOLGATE_EGRESS_CA"], session_ca);

    let mut tls = tunnel(proxy, "localhost", site.port(), &session_ca).await;
    let get = "GET /user HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \
               {{secret:TOKEN}}\r\n\r\n";
    tls.write_all(get.as_bytes()).await.unwrap();
    let first = response(&mut tls, "hello").await;
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    // the same tunnel again: a body sent, a chunked answer
    let post = "POST /repos HTTP/1.1\r\nHost: localhost\r\nX-Key: {{secret:TOKEN}}\r\n\
                Content-Length: 4\r\n\r\nbody";
    tls.write_all(post.as_bytes()).await.unwrap();
    let second = response(&mut tls, "0\r\n\r\n").await;
    assert!(
        second.contains("3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"),
        "{second}"
    );
    drop(tls);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen[0].contains(&format!("Authorization: Bearer {VALUE}")),
        "{seen:?}"
    );
    assert!(
        seen[1].contains(&format!("X-Key: {VALUE}")) && seen[1].ends_with("body"),
        "{seen:?}"
    );
    wait_recorded(&run, 1).await;
    let reached = run.finish();
    assert_eq!(reached.len(), 1, "{reached:?}");
    assert_eq!(reached[0].kind, "https");
    assert!(reached[0].refused.is_none(), "{reached:?}");
    assert!(reached[0].bytes_sent > 0 && reached[0].bytes_received > 0);
}

#[tokio::test]
async fn a_secret_sent_to_a_host_it_is_not_bound_to_is_refused_and_not_sent() {
    let (test_ca, site_tls) = test_pki();
    let (site, seen) = site(Some(site_tls)).await;
    let (gate, proxy) = gate(&test_ca);
    let run = gate
        .begin(Some(grant_binding_token_to("localhost")))
        .unwrap();
    let session_ca = gate.ca_pem().unwrap().to_owned();

    // the same site by another name: 127.0.0.1 is not a host the secret is bound to
    let mut tls = tunnel(proxy, "127.0.0.1", site.port(), &session_ca).await;
    let get = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {{secret:TOKEN}}\r\n\r\n";
    tls.write_all(get.as_bytes()).await.unwrap();
    let answer = response(&mut tls, "\n\n").await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{answer}");
    assert!(
        answer.contains("TOKEN") && answer.contains("127.0.0.1") && answer.contains("not sent"),
        "{answer}"
    );
    assert!(!answer.contains(VALUE), "{answer}");
    // a request without a placeholder in the same run goes through, terminated too
    let mut tls = tunnel(proxy, "127.0.0.1", site.port(), &session_ca).await;
    tls.write_all(b"GET /plain HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert!(
        response(&mut tls, "hello")
            .await
            .starts_with("HTTP/1.1 200")
    );

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        1,
        "only the request without a placeholder: {seen:?}"
    );
    assert!(seen[0].starts_with("GET /plain"), "{seen:?}");
    wait_recorded(&run, 2).await;
    let reached = run.finish();
    assert!(
        reached
            .iter()
            .any(|d| d.refused.as_deref().is_some_and(|r| r.contains("TOKEN"))),
        "{reached:?}"
    );
}

#[tokio::test]
async fn without_bound_secrets_tunnels_stay_raw() {
    let (test_ca, site_tls) = test_pki();
    let (site, seen) = site(Some(site_tls)).await;
    let (gate, proxy) = gate(&test_ca);
    let run = gate.begin(Some(EgressGrant::default())).unwrap();
    // the code sees the site's own certificate: it trusts the test's CA, not the session's
    let mut tls = tunnel(proxy, "localhost", site.port(), &test_ca).await;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nX: {{secret:TOKEN}}\r\n\r\n")
        .await
        .unwrap();
    assert!(
        response(&mut tls, "hello")
            .await
            .starts_with("HTTP/1.1 200")
    );
    drop(tls);
    assert!(seen.lock().unwrap()[0].contains("X: {{secret:TOKEN}}"));
    wait_recorded(&run, 1).await;
    assert_eq!(run.finish()[0].kind, "connect");
}

#[tokio::test]
async fn plain_http_requests_get_the_same_substitution() {
    let (test_ca, _) = test_pki();
    let (site, seen) = site(None).await;
    let (gate, proxy) = gate(&test_ca);
    let _run = gate
        .begin(Some(grant_binding_token_to("localhost")))
        .unwrap();
    for (host, status) in [("localhost", "200"), ("127.0.0.1", "403")] {
        let mut stream = TcpStream::connect(proxy).await.unwrap();
        let request = format!(
            "GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}\r\nX-Key: {{{{secret:TOKEN}}}}\r\n\r\n",
            port = site.port()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = response(&mut stream, "\r\n\r\n").await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains(&format!("X-Key: {VALUE}")), "{seen:?}");
}

#[tokio::test]
async fn framing_that_could_smuggle_a_request_is_refused_inside_a_tunnel() {
    let (test_ca, site_tls) = test_pki();
    let (site, seen) = site(Some(site_tls)).await;
    let (gate, proxy) = gate(&test_ca);
    let _run = gate
        .begin(Some(grant_binding_token_to("localhost")))
        .unwrap();
    let session_ca = gate.ca_pem().unwrap().to_owned();
    for head in [
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: +4\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n",
    ] {
        let mut tls = tunnel(proxy, "localhost", site.port(), &session_ca).await;
        tls.write_all(head.as_bytes()).await.unwrap();
        // bounded, so that a proxy that passed the head on fails here instead of hanging
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            response(&mut tls, "\r\n\r\n"),
        )
        .await
        .unwrap_or_else(|_| panic!("{head:?}: no answer"));
        assert!(answer.starts_with("HTTP/1.1 400"), "{head:?}: {answer}");
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn the_runs_byte_limit_holds_inside_a_terminated_tunnel() {
    let (test_ca, site_tls) = test_pki();
    let (site, seen) = site(Some(site_tls)).await;
    let (gate, proxy) = gate(&test_ca);
    let mut grant = grant_binding_token_to("localhost");
    grant.limits.max_bytes = 120;
    let run = gate.begin(Some(grant)).unwrap();
    let session_ca = gate.ca_pem().unwrap().to_owned();
    let mut tls = tunnel(proxy, "localhost", site.port(), &session_ca).await;
    let get = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    for _ in 0..4 {
        if tls.write_all(get.as_bytes()).await.is_err() {
            break;
        }
        if response(&mut tls, "hello").await.is_empty() {
            break;
        }
    }
    wait_recorded(&run, 1).await;
    let reached = run.finish();
    let refused = reached[0].refused.as_deref().unwrap_or_default();
    assert!(refused.contains("limit of 120 bytes"), "{reached:?}");
    assert!(seen.lock().unwrap().len() < 4, "the limit cut the tunnel");
}
