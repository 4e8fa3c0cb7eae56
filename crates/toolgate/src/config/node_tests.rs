#![allow(clippy::unwrap_used)]
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::super::tests::{given, refused};
use super::*;

/// A self-signed certificate (its own CA) and its key (mode 600), as the three TLS flags.
fn tls_flags(dir: &Path) -> Vec<String> {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    [
        "--node-tls-cert".to_owned(),
        path(&cert),
        "--node-tls-key".to_owned(),
        path(&key),
        "--node-tls-ca".to_owned(),
        path(&cert),
    ]
    .to_vec()
}

fn token_file(dir: &Path) -> String {
    let file = dir.join("node.token");
    std::fs::write(&file, "t".repeat(64)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file.to_str().unwrap().to_owned()
}

#[test]
fn the_three_tls_files_make_the_front_ends_channel_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    let mut args = vec!["--sandbox", "on", "--nodes", "https://127.0.0.1:7070"];
    args.extend(["--node-token-file", &token]);
    let flags = tls_flags(dir.path());
    args.extend(flags.iter().map(String::as_str));
    let nodes = NodesConfig::from_settings(&given(&args)).unwrap().unwrap();
    assert!(nodes.tls.is_some());
    // without them the front end speaks h2c, as before
    let plain = given(&[
        "--sandbox",
        "on",
        "--nodes",
        "http://127.0.0.1:7070",
        "--node-token-file",
        &token,
    ]);
    assert!(
        NodesConfig::from_settings(&plain)
            .unwrap()
            .unwrap()
            .tls
            .is_none()
    );
}

#[test]
fn a_tls_key_others_may_read_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    let flags = tls_flags(dir.path());
    std::fs::set_permissions(
        dir.path().join("key.pem"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut args = vec!["--sandbox", "on", "--nodes", "https://127.0.0.1:7070"];
    args.extend(["--node-token-file", &token]);
    args.extend(flags.iter().map(String::as_str));
    assert_eq!(refused(&args), "node_tls_key");
}

#[test]
fn a_node_takes_all_three_tls_files_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    let flags = tls_flags(dir.path());
    // each one left out is named
    for (left_out, setting) in [
        (0, "node_tls_cert"),
        (2, "node_tls_key"),
        (4, "node_tls_ca"),
    ] {
        let mut args = vec!["--node-token-file", token.as_str()];
        for (n, flag) in flags.iter().enumerate() {
            if n != left_out && n != left_out + 1 {
                args.push(flag);
            }
        }
        let Err(err) = NodeConfig::from_settings(&given(&args)) else {
            panic!("{args:?} was accepted");
        };
        assert_eq!(err.setting(), setting, "{err}");
        assert!(err.to_string().contains("all three"), "{err}");
    }
    // `node --drain` reads them too, and dials the node over TLS on loopback
    let mut args = vec![
        "--node-token-file",
        token.as_str(),
        "--listen",
        "0.0.0.0:7070",
    ];
    args.extend(flags.iter().map(String::as_str));
    let target = drain_target(&given(&args)).unwrap();
    assert_eq!(target.url, "https://127.0.0.1:7070");
    assert!(target.tls.is_some());
    let plain = drain_target(&given(&["--node-token-file", &token])).unwrap();
    assert_eq!(plain.url, "http://127.0.0.1:7070");
}
