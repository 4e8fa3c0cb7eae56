#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A client that trusts `pem` only.
fn client_trusting(pem: &str) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(certificate.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A TLS exchange between a client trusting `trusted` and a server with `server`, for `name`.
async fn handshake(trusted: &str, server: Arc<ServerConfig>, name: &str) -> Result<String, String> {
    let (near, far) = tokio::io::duplex(64 * 1024);
    let serve = tokio::spawn(async move {
        let mut tls = TlsAcceptor::from(server).accept(far).await.ok()?;
        tls.write_all(b"hello from the leaf").await.ok()?;
        tls.shutdown().await.ok()
    });
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let result = async {
        let mut tls = client_trusting(trusted)
            .connect(name, near)
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        tls.read_to_string(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer)
    }
    .await;
    let _ = serve.await;
    result
}

use rustls::pki_types::ServerName;

#[tokio::test]
async fn a_leaf_of_the_session_ca_is_trusted_by_a_client_that_trusts_the_ca() {
    let ca = SessionCa::new().unwrap();
    assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
    let server = ca.server_config("API.example.org.").unwrap();
    assert_eq!(server.alpn_protocols, [b"http/1.1".to_vec()]);
    assert_eq!(
        handshake(ca.pem(), Arc::clone(&server), "api.example.org").await,
        Ok("hello from the leaf".to_owned())
    );
    // the leaf names its host only
    let wrong = handshake(ca.pem(), server, "other.example.org").await;
    assert!(wrong.is_err(), "{wrong:?}");
    // an IP literal gets an IP address name
    let by_ip = ca.server_config("127.0.0.1").unwrap();
    assert_eq!(
        handshake(ca.pem(), by_ip, "127.0.0.1").await,
        Ok("hello from the leaf".to_owned())
    );
}

#[tokio::test]
async fn another_session_s_ca_is_not_trusted() {
    let (ours, theirs) = (SessionCa::new().unwrap(), SessionCa::new().unwrap());
    assert_ne!(ours.pem(), theirs.pem(), "a CA per session");
    let server = theirs.server_config("api.example.org").unwrap();
    let refused = handshake(ours.pem(), server, "api.example.org").await;
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn leaves_are_minted_once_per_host_and_the_cache_is_bounded() {
    let ca = SessionCa::new().unwrap();
    let first = ca.server_config("a.example").unwrap();
    let again = ca.server_config("A.example.").unwrap();
    assert!(Arc::ptr_eq(&first, &again), "kept per host");
    for n in 0..MAX_LEAVES + 5 {
        ca.server_config(&format!("h{n}.example")).unwrap();
    }
    assert!(ca.lock().len() <= MAX_LEAVES);
}

#[test]
fn the_extra_ca_file_must_hold_certificates() {
    let ca = SessionCa::new().unwrap();
    assert_eq!(extra_roots_from_pem(ca.pem().as_bytes()).unwrap().len(), 1);
    for bad in [
        &b""[..],
        b"not pem at all",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n",
    ] {
        let err = extra_roots_from_pem(bad).unwrap_err().to_string();
        assert!(err.starts_with("egress_extra_ca_file:"), "{err}");
    }
}
