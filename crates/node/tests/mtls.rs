//! The channel over mutual TLS on loopback, with certificates made here: a run crosses and the
//! token is still required; a client with no certificate, with one another CA signed, speaking
//! plaintext h2c, or stalling in the handshake is refused (that connection only) while the node
//! goes on serving good front ends; a node whose certificate another CA signed is refused by the
//! front end; and the PEM files are checked, their errors naming the file and nothing in it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pki;
mod scripted;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use toolgate_node::{NodeLink, NodeToken, TlsError, TlsFile, TlsFiles};
use toolgate_sandbox::SandboxSessions;

use pki::{Ca, Role};
use scripted::{Scripted, bash, books, front_end_with, node_with, token};

/// A deployment's CA with a node's and a front end's certificates, and a rogue CA beside it.
struct Deployment {
    _dir: tempfile::TempDir,
    ca: Ca,
    rogue: Ca,
    node: TlsFiles,
    front: TlsFiles,
}

fn deployment() -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "deploy");
    let rogue = Ca::new(dir.path(), "rogue");
    let node = ca.issue("node", Role::Node, &ca);
    let front = ca.issue("front", Role::FrontEnd, &ca);
    Deployment {
        _dir: dir,
        ca,
        rogue,
        node,
        front,
    }
}

/// One run through a front end holding `client` against the node at `url`: its stdout.
async fn one_run(
    b: &scripted::Books,
    url: &str,
    client: &TlsFiles,
    session: &str,
) -> Result<String, toolgate_sandbox::SandboxSessionsError> {
    let tls = client.client().unwrap();
    let (remote, _fleet) = front_end_with(b, &[url], token(), Some(&tls)).await;
    let mut request = bash(&b.account, Some(session), "echo");
    let (output, _chunks) = mpsc::channel(1024);
    request.output = Some(output);
    remote.run(request).await.map(|done| done.outcome.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_crosses_over_mutual_tls_and_the_token_is_still_required() {
    let d = deployment();
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) =
        node_with(Arc::clone(&sessions), Some(d.node.server().unwrap())).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert_eq!(one_run(&b, &url, &d.front, "s1").await.unwrap(), "echoed");
    assert_eq!(sessions.seen.lock().unwrap().len(), 1);
    // a good certificate with the wrong token gets nothing: both factors are required
    let wrong = NodeToken::parse(&"w".repeat(48)).unwrap();
    let link = NodeLink::new(&url, wrong, Some(d.front.client().unwrap())).unwrap();
    let refused = link.drain().await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
    // the right token over the same TLS reaches the node
    let link = NodeLink::new(&url, token(), Some(d.front.client().unwrap())).unwrap();
    assert_eq!(link.drain().await.unwrap().hibernated, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_a_good_certificate_are_refused_and_the_node_keeps_serving() {
    let d = deployment();
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    let (url, _stop, _task) =
        node_with(Arc::clone(&sessions), Some(d.node.server().unwrap())).await;
    let address = url.trim_start_matches("https://").to_owned();

    // a peer that connects and says nothing is dropped once the handshake's time is up
    let mut stalled = tokio::net::TcpStream::connect(&address).await.unwrap();

    // no client certificate: the node's CA is trusted, nothing is presented
    let roots = {
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(&d.ca.file).unwrap();
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        roots
    };
    let mut anonymous = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    anonymous.alpn_protocols = vec![b"h2".to_vec()];
    let answered = lease_over_tls(&address, Arc::new(anonymous)).await;
    assert!(
        answered.is_err(),
        "a client without a certificate got {answered:?}"
    );

    // a certificate another CA signed (the client trusts the node's CA all the same)
    let stranger = d.rogue.issue("stranger", Role::FrontEnd, &d.ca);
    let link = NodeLink::new(&url, token(), Some(stranger.client().unwrap())).unwrap();
    let refused = link.drain().await.unwrap_err();
    assert!(
        refused.to_string().contains("cannot be reached"),
        "{refused}"
    );

    // plaintext h2c with the right token
    let plain = NodeLink::new(&format!("http://{address}"), token(), None).unwrap();
    let refused = plain.drain().await.unwrap_err();
    assert!(
        refused.to_string().contains("cannot be reached"),
        "{refused}"
    );

    // none of them reached the sessions, and a good front end is served still
    assert!(sessions.seen.lock().unwrap().is_empty());
    assert_eq!(
        one_run(&b, &url, &d.front, "after").await.unwrap(),
        "echoed"
    );

    // the stalled peer's connection was closed by the node (the handshake is bounded)
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(30), stalled.read(&mut byte))
        .await
        .expect("the node still holds a peer that never finished its handshake");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
}

/// A lease request over TLS with `config` and the right token: what came back, or why not.
async fn lease_over_tls(
    address: &str,
    config: Arc<rustls::ClientConfig>,
) -> Result<http::StatusCode, String> {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, driver) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .map_err(|e| format!("h2: {e}"))?;
    tokio::spawn(driver);
    let asked = toolgate_node::wire::LeaseRequest {
        incarnation: None,
        valid_for_ms: 0,
        revoke: false,
    };
    let request = http::Request::post(format!(
        "https://{address}{}lease",
        toolgate_node::wire::PREFIX
    ))
    .header(
        http::header::AUTHORIZATION,
        format!("Bearer {}", "n".repeat(48)),
    )
    .body(http_body_util::Full::new(bytes::Bytes::from(
        serde_json::to_vec(&asked).unwrap(),
    )))
    .unwrap();
    let answer = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    Ok(answer.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_certificate_another_ca_signed_is_refused_by_the_front_end() {
    let d = deployment();
    let b = books().await;
    let sessions = Arc::new(Scripted::default());
    // an impostor: its own certificate from the rogue CA, trusting the deployment's front ends
    let impostor = d.rogue.issue("impostor", Role::Node, &d.ca);
    let (url, _stop, _task) =
        node_with(Arc::clone(&sessions), Some(impostor.server().unwrap())).await;
    let link = NodeLink::new(&url, token(), Some(d.front.client().unwrap())).unwrap();
    let refused = link.drain().await.unwrap_err();
    assert!(refused.to_string().contains("TLS"), "{refused}");
    assert!(one_run(&b, &url, &d.front, "s").await.is_err());
    assert!(sessions.seen.lock().unwrap().is_empty());
    // a genuine node's certificate that does not name the address dialled is refused too
    let elsewhere = d.ca.issue_named(
        "elsewhere",
        Role::Node,
        &d.ca,
        &["node-b.example", "10.9.9.9"],
    );
    let (url, _stop2, _task2) =
        node_with(Arc::clone(&sessions), Some(elsewhere.server().unwrap())).await;
    let link = NodeLink::new(&url, token(), Some(d.front.client().unwrap())).unwrap();
    let refused = link.drain().await.unwrap_err();
    assert!(refused.to_string().contains("TLS"), "{refused}");
    assert!(sessions.seen.lock().unwrap().is_empty());
}

#[test]
fn the_files_are_checked_and_their_errors_show_nothing_of_them() {
    let d = deployment();
    d.node.server().unwrap();
    d.front.client().unwrap();

    // a key others may read is refused, as the token file is
    std::fs::set_permissions(&d.front.key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let exposed = d.front.client().unwrap_err();
    assert!(matches!(exposed, TlsError::Exposed { .. }), "{exposed}");
    assert_eq!(exposed.file(), TlsFile::Key);
    assert!(
        exposed
            .to_string()
            .contains(&d.front.key.display().to_string())
    );
    std::fs::set_permissions(&d.front.key, std::fs::Permissions::from_mode(0o600)).unwrap();

    // a missing file is named
    let missing = TlsFiles {
        ca: d.front.ca.with_file_name("none.pem"),
        ..d.front.clone()
    };
    let error = missing.client().unwrap_err();
    assert_eq!(error.file(), TlsFile::Ca);
    assert!(error.to_string().contains("none.pem"), "{error}");

    // a key file that is no key: named, its content never shown
    let garbage = d.front.key.with_file_name("garbage.key");
    std::fs::write(
        &garbage,
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LXNlY3JldC1zZWNyZXQ=\n-----END NOT A KEY-----\n",
    )
    .unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o600)).unwrap();
    let bad_key = TlsFiles {
        key: garbage,
        ..d.front.clone()
    };
    let error = bad_key.client().unwrap_err();
    assert_eq!(error.file(), TlsFile::Key);
    assert!(!error.to_string().contains("c2VjcmV0"), "{error}");

    // a certificate file with no certificate, and a key that is not the certificate's
    let not_pem = TlsFiles {
        cert: d.front.key.clone(),
        ..d.front.clone()
    };
    assert_eq!(not_pem.client().unwrap_err().file(), TlsFile::Cert);
    let mismatched = TlsFiles {
        key: d.node.key.clone(),
        ..d.front.clone()
    };
    let error = mismatched.client().unwrap_err();
    assert!(matches!(error, TlsError::Config { .. }), "{error}");
    let key_text = std::fs::read_to_string(&d.node.key).unwrap();
    let key_body = key_text.lines().nth(1).unwrap();
    assert!(!error.to_string().contains(key_body), "{error}");
}
