//! The TLS of secrets added at the edge. Each session has a CA of its own, made with its gate:
//! its certificate goes into the session (the only place that trusts it), its private key never
//! leaves this process. A run holding a secret bound to hosts has its HTTPS tunnels terminated
//! with a leaf certificate of that CA for the tunnel's host (minted on first use, kept by the
//! gate); the requests go on over the proxy's own TLS client, which trusts the public roots
//! (webpki-roots) and the operator's `egress_extra_ca_file`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Hosts whose leaf a gate keeps; past it the cache starts again empty.
const MAX_LEAVES: usize = 256;
/// How long a minted certificate is valid (a session lives hours at most).
const VALID_FOR_DAYS: i64 = 7;

/// Why the TLS of the edge could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A certificate or key could not be made.
    #[error("a certificate could not be made: {0}")]
    Mint(String),
    /// The operator's extra CA file is not usable.
    #[error("egress_extra_ca_file: {0}")]
    ExtraCa(String),
}

/// A session's CA and the leaves it minted.
pub(crate) struct SessionCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pem: String,
    /// One key for every leaf of this session: minting a leaf then costs one signature.
    leaf_key: KeyPair,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCa").finish_non_exhaustive()
    }
}

impl SessionCa {
    /// A new CA (ECDSA P-256), valid from a day ago (clocks differ) for [`VALID_FOR_DAYS`].
    pub(crate) fn new() -> Result<Self, TlsSetupError> {
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "toolgate session egress CA");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params);
        let key = KeyPair::generate().map_err(mint)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(mint)?;
        let pem = issuer.pem();
        Ok(Self {
            issuer,
            pem,
            leaf_key: KeyPair::generate().map_err(mint)?,
            leaves: Mutex::default(),
        })
    }

    /// The CA's certificate, PEM.
    pub(crate) fn pem(&self) -> &str {
        &self.pem
    }

    /// The server side of a tunnel to `host`: a leaf for it, minted once per gate.
    pub(crate) fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsSetupError> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(config) = self.lock().get(&host) {
            return Ok(Arc::clone(config));
        }
        let mut params = CertificateParams::new(vec![host.clone()]).map_err(mint)?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host.as_str());
        params.distinguished_name = name;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params);
        let leaf = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(mint)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(mint)?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.issuer.der().clone()], key)
            .map_err(mint)?;
        // HTTP/2 inside a tunnel is not spoken: clients fall back to HTTP/1.1
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut leaves = self.lock();
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host, Arc::clone(&config));
        Ok(config)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ServerConfig>>> {
        self.leaves.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The proxy's TLS client towards the hosts: public roots plus `extra` (the operator's CAs).
pub(crate) fn upstream_config(extra: &[CertificateDer<'static>]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    // parsed already by `extra_roots_from_pem`; a certificate rustls still refuses is skipped
    let _ = roots.add_parsable_certificates(extra.iter().cloned());
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|_| ClientConfig::builder());
    let mut config = builder.with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// The certificates of a PEM file's text (the operator's `egress_extra_ca_file`).
pub fn extra_roots_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsSetupError::ExtraCa("not a PEM file of certificates".to_owned()))?;
    if certificates.is_empty() {
        return Err(TlsSetupError::ExtraCa(
            "the file holds no PEM certificate".to_owned(),
        ));
    }
    let mut check = RootCertStore::empty();
    let (_, refused) = check.add_parsable_certificates(certificates.iter().cloned());
    if refused > 0 {
        return Err(TlsSetupError::ExtraCa(format!(
            "{refused} of its certificates cannot be used as a CA"
        )));
    }
    Ok(certificates)
}

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(VALID_FOR_DAYS);
}

fn mint(err: impl std::fmt::Display) -> TlsSetupError {
    TlsSetupError::Mint(err.to_string())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
#[path = "ca_tests.rs"]
mod tests;
