//! Mutual TLS on the node channel, an option beside the token: each side presents its own
//! certificate and accepts only one chained to the deployment's CA. TLS 1.3 only, ALPN `h2`,
//! with the build's one crypto provider (ring). The files are PEM; an error names the file and
//! what is wrong with it, never anything it holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::token::{PrivateFileError, read_private};

/// The one application protocol spoken over TLS.
const ALPN_H2: &[u8] = b"h2";

/// The three PEM files of one side: its certificate chain, its private key (mode 600 or
/// stricter, as the token file) and the CA that signs the other side's certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// this side's certificate, then any intermediates
    pub cert: PathBuf,
    /// its private key (PKCS#8, PKCS#1 or SEC1)
    pub key: PathBuf,
    /// the CA the other side's certificate must chain to
    pub ca: PathBuf,
}

/// Which of the three files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// [`TlsFiles::cert`]
    Cert,
    /// [`TlsFiles::key`]
    Key,
    /// [`TlsFiles::ca`]
    Ca,
}

/// Why the channel's TLS could not be set up. The message names the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// a file could not be read
    #[error("{path} cannot be read: {source}")]
    Read {
        /// which file
        file: TlsFile,
        /// its path
        path: String,
        /// why
        source: std::io::Error,
    },
    /// the key file may be read by others than its owner
    #[error("{path} may be read by others than its owner (chmod 600 it)")]
    Exposed {
        /// its path
        path: String,
    },
    /// a file holds nothing usable of what it should
    #[error("{path} holds no usable {what}")]
    Unusable {
        /// which file
        file: TlsFile,
        /// its path
        path: String,
        /// what it should hold
        what: &'static str,
    },
    /// the certificate, key and CA do not make a TLS configuration (e.g. the key is not the
    /// certificate's)
    #[error("the TLS certificate {cert} and key {key} cannot be used: {reason}")]
    Config {
        /// the certificate file
        cert: String,
        /// the key file
        key: String,
        /// rustls's reason (it never holds key material)
        reason: String,
    },
}

impl TlsError {
    /// The file the error is about (a configuration error is the certificate's).
    pub fn file(&self) -> TlsFile {
        match self {
            Self::Read { file, .. } | Self::Unusable { file, .. } => *file,
            Self::Exposed { .. } => TlsFile::Key,
            Self::Config { .. } => TlsFile::Cert,
        }
    }
}

/// The node's side: TLS 1.3, `h2`, a client certificate chained to the CA required.
#[derive(Clone)]
pub struct ServerTls(pub(crate) tokio_rustls::TlsAcceptor);

/// The front end's side: presents its certificate, and accepts a node's only when it chains to
/// the CA and names the host of the node's URL.
#[derive(Clone)]
pub struct ClientTls(pub(crate) tokio_rustls::TlsConnector);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls(…)")
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls(…)")
    }
}

/// What the three files hold, read and checked.
struct Loaded {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: Arc<RootCertStore>,
}

impl TlsFiles {
    /// The node's TLS, from these files.
    pub fn server(&self) -> Result<ServerTls, TlsError> {
        let loaded = self.load()?;
        let provider = provider();
        let verifier =
            WebPkiClientVerifier::builder_with_provider(loaded.roots, Arc::clone(&provider))
                .build()
                .map_err(|e| self.config_error(e))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| self.config_error(e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(loaded.chain, loaded.key)
            .map_err(|e| self.config_error(e))?;
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(ServerTls(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }

    /// A front end's TLS, from these files.
    pub fn client(&self) -> Result<ClientTls, TlsError> {
        let loaded = self.load()?;
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| self.config_error(e))?
            .with_root_certificates(loaded.roots)
            .with_client_auth_cert(loaded.chain, loaded.key)
            .map_err(|e| self.config_error(e))?;
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(ClientTls(tokio_rustls::TlsConnector::from(Arc::new(
            config,
        ))))
    }

    fn load(&self) -> Result<Loaded, TlsError> {
        let chain = certificates(TlsFile::Cert, &self.cert)?;
        let key = read_private(&self.key).map_err(|error| match error {
            PrivateFileError::Read(source) => TlsError::Read {
                file: TlsFile::Key,
                path: shown(&self.key),
                source,
            },
            PrivateFileError::Exposed => TlsError::Exposed {
                path: shown(&self.key),
            },
        })?;
        // the PEM parser's own errors may quote a line of the file: none of it is shown
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| TlsError::Unusable {
            file: TlsFile::Key,
            path: shown(&self.key),
            what: "PEM private key (PKCS#8, PKCS#1 or SEC1)",
        })?;
        let mut roots = RootCertStore::empty();
        for ca in certificates(TlsFile::Ca, &self.ca)? {
            roots.add(ca).map_err(|_| TlsError::Unusable {
                file: TlsFile::Ca,
                path: shown(&self.ca),
                what: "CA certificate",
            })?;
        }
        Ok(Loaded {
            chain,
            key,
            roots: Arc::new(roots),
        })
    }

    fn config_error(&self, reason: impl std::fmt::Display) -> TlsError {
        TlsError::Config {
            cert: shown(&self.cert),
            key: shown(&self.key),
            reason: reason.to_string(),
        }
    }
}

impl ClientTls {
    /// The name a node's certificate must carry to be taken for the node at `host` (a DNS
    /// name, or an IP address, which needs an IP SAN).
    pub(crate) fn server_name(host: &str) -> Option<ServerName<'static>> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        ServerName::try_from(bare.to_owned()).ok()
    }
}

/// Every PEM certificate in `path`: at least one, and nothing unreadable.
fn certificates(file: TlsFile, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unusable = || TlsError::Unusable {
        file,
        path: shown(path),
        what: "PEM certificate",
    };
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        file,
        path: shown(path),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| unusable())?;
    if chain.is_empty() {
        return Err(unusable());
    }
    Ok(chain)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}
