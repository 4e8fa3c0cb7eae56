//! Certificates for the mutual TLS tests, made in the test: a CA, and certificates it signs
//! for a node (server, with an IP SAN for 127.0.0.1) or a front end (client), each written as
//! PEM files beside a `TlsFiles` naming them.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use toolgate_node::TlsFiles;

/// What a certificate is for.
#[derive(Debug, Clone, Copy)]
pub enum Role {
    /// a node: serverAuth, valid for 127.0.0.1
    Node,
    /// a front end: clientAuth
    FrontEnd,
}

/// A CA in `dir`, its certificate in `<name>-ca.pem`.
pub struct Ca {
    dir: PathBuf,
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub file: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let file = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&file, issuer.pem()).unwrap();
        Self {
            dir: dir.to_owned(),
            name: name.to_owned(),
            issuer,
            file,
        }
    }

    /// A certificate this CA signs for `role`, as `<ca>-<who>.pem` and its key `.key` (0600),
    /// with `trusted` as the CA the other side must chain to.
    pub fn issue(&self, who: &str, role: Role, trusted: &Ca) -> TlsFiles {
        let names: &[&str] = match role {
            Role::Node => &["127.0.0.1", "localhost"],
            Role::FrontEnd => &[],
        };
        self.issue_named(who, role, trusted, names)
    }

    /// [`Ca::issue`], with `names` as its subject alternative names.
    pub fn issue_named(&self, who: &str, role: Role, trusted: &Ca, names: &[&str]) -> TlsFiles {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, who);
        params.extended_key_usages = vec![match role {
            Role::Node => ExtendedKeyUsagePurpose::ServerAuth,
            Role::FrontEnd => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let stem = self.dir.join(format!("{}-{who}", self.name));
        let (cert_file, key_file) = (stem.with_extension("pem"), stem.with_extension("key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        TlsFiles {
            cert: cert_file,
            key: key_file,
            ca: trusted.file.clone(),
        }
    }
}
