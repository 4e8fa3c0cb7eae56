//! The README's architecture as a test: dependencies point inward, and a crate that must not know
//! a backend, a transport or an I/O library does not name it. Read from `cargo metadata`, so a
//! new edge in any Cargo.toml fails here before it spreads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Crates that may not be named (as normal dependencies) by a crate, and why.
const FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "toolgate-domain",
        &[
            "tokio", "sqlx", "rusqlite", "axum", "hyper", "reqwest", "rmcp", "tracing",
        ],
        "the domain is pure: values and rules, no I/O",
    ),
    (
        "toolgate-vault",
        &[
            "tokio",
            "sqlx",
            "rusqlite",
            "axum",
            "hyper",
            "reqwest",
            "rmcp",
            "tracing",
            "toolgate-store",
            "toolgate-app",
            "toolgate-server",
        ],
        "the vault is cryptography and its key file: it never sees storage or a transport",
    ),
    (
        "toolgate-web",
        &[
            "toolgate-server",
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-sandbox-manager",
            "toolgate-vault",
            "sqlx",
            "rusqlite",
            "rmcp",
            "axum",
        ],
        "the web client implements app's seam behind the egress guard and knows nothing else",
    ),
    (
        "toolgate-database",
        &[
            "toolgate-server",
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "toolgate-web",
            "rusqlite",
            "reqwest",
            "rmcp",
            "axum",
        ],
        "the database client implements app's seam behind the egress guard and knows nothing \
         else (SQLite files are the sessions' business, not this client's)",
    ),
    (
        "toolgate-providers",
        &[
            "toolgate-server",
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "toolgate-database",
            "sqlx",
            "rusqlite",
            "rmcp",
            "axum",
        ],
        "the model client implements app's seam behind the egress guard and knows nothing else",
    ),
    (
        "toolgate-mail",
        &[
            "toolgate-server",
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "sqlx",
            "rusqlite",
            "rmcp",
            "axum",
        ],
        "the mailer implements app's mail seam (SMTP or the outbox) and knows nothing else",
    ),
    (
        "toolgate-payments",
        &[
            "toolgate-server",
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "sqlx",
            "rusqlite",
            "rmcp",
            "axum",
        ],
        "the Stripe client implements app's payments seam and knows nothing else",
    ),
    (
        "toolgate-dashboard",
        &[
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-server",
            "toolgate-sandbox-manager",
            "toolgate-mail",
            "toolgate-payments",
            "toolgate-vault",
            "sqlx",
            "rusqlite",
            "rmcp",
            "reqwest",
            "lettre",
        ],
        "the dashboard is pages over app's owner use cases: no storage, mail or payment client",
    ),
    (
        "toolgate-egress",
        &[
            "tokio",
            "reqwest",
            "hyper",
            "sqlx",
            "toolgate-app",
            "toolgate-store",
        ],
        "the egress policy is pure: addresses and ranges, no I/O",
    ),
    (
        "toolgate-store",
        &["sqlx", "rusqlite", "axum", "hyper", "rmcp", "toolgate-app"],
        "the storage traits know no backend and no transport",
    ),
    (
        "toolgate-app",
        &[
            "rmcp",
            "axum",
            "hyper",
            "http",
            "sqlx",
            "rusqlite",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-server",
            "toolgate-sandbox-manager",
            "rustix",
            "reqwest",
            "toolgate-web",
            "toolgate-database",
            "toolgate-providers",
            "toolgate-mail",
            "toolgate-payments",
            "lettre",
        ],
        "the use cases know the store's traits and the sandbox seam, not HTTP, MCP, SQL or \
         what runs the sessions",
    ),
    (
        "toolgate-oauth",
        &[
            "axum",
            "hyper",
            "rmcp",
            "sqlx",
            "rusqlite",
            "reqwest",
            "toolgate-server",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-dashboard",
        ],
        "the authorization server is logic over the store's traits and app's web seam: the HTTP \
         layer decodes its requests, a backend stores its state",
    ),
    (
        "toolgate-server",
        &[
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-store",
            "sqlx",
            "rusqlite",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "toolgate-sandbox-harden",
        ],
        "HTTP and MCP know the app, never a backend or the sandbox",
    ),
    (
        "toolgate-sandbox",
        &[
            "toolgate-sandbox-manager",
            "toolgate-sandbox-harden",
            "toolgate-app",
            "toolgate-store",
            "rustix",
            "axum",
            "rmcp",
            "sqlx",
        ],
        "the sandbox seam is values and a trait: no implementation, no service",
    ),
    (
        "toolgate-sandbox-manager",
        &[
            "toolgate-app",
            "toolgate-server",
            "toolgate-store",
            "axum",
            "rmcp",
            "sqlx",
        ],
        "the in-process sandbox serves the seam, and knows nothing of the service around it",
    ),
    (
        "toolgate-sandbox-harden",
        &[
            "tokio",
            "toolgate-app",
            "toolgate-server",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
        ],
        "the confinement library runs in a forked child: no runtime, no service",
    ),
    (
        "toolgate-store-sqlite",
        &["toolgate-app", "toolgate-server", "axum", "rmcp"],
        "a backend serves the store's traits only",
    ),
    (
        "toolgate-store-postgres",
        &["toolgate-app", "toolgate-server", "axum", "rmcp"],
        "a backend serves the store's traits only",
    ),
];

/// The workspace's packages, as `cargo metadata` reads their manifests.
fn packages() -> Vec<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .args(["--manifest-path", manifest])
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "{output:?}");
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    metadata["packages"].as_array().unwrap().clone()
}

/// Each workspace crate's normal (not dev, not build) dependencies, by name.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    packages()
        .iter()
        .map(|package| {
            let names = package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dep| dep["kind"].is_null())
                .map(|dep| dep["name"].as_str().unwrap().to_owned())
                .collect();
            (package["name"].as_str().unwrap().to_owned(), names)
        })
        .collect()
}

#[test]
fn dependencies_point_inward() {
    let graph = normal_dependencies();
    let mut broken = Vec::new();
    for (krate, forbidden, why) in FORBIDDEN {
        let deps = graph
            .get(*krate)
            .unwrap_or_else(|| panic!("{krate} is not in the workspace: update this test"));
        for dep in deps.iter().filter(|dep| forbidden.contains(&dep.as_str())) {
            broken.push(format!("{krate} -> {dep}: {why}"));
        }
    }
    assert!(broken.is_empty(), "forbidden edges:\n{}", broken.join("\n"));
}

#[test]
fn only_the_binary_and_tools_name_a_concrete_backend() {
    let graph = normal_dependencies();
    let backends = ["toolgate-store-sqlite", "toolgate-store-postgres"];
    let naming: Vec<&String> = graph
        .iter()
        .filter(|(_, deps)| backends.iter().any(|b| deps.contains(*b)))
        .map(|(krate, _)| krate)
        .collect();
    assert_eq!(naming, ["toolgate"], "crates naming a backend: {naming:?}");
}

/// The sandbox seam may use tokio's channels (a run's output) but nothing that runs: no runtime,
/// no sockets, no processes. Those belong to an implementation.
#[test]
fn the_sandbox_seam_takes_only_tokios_channels() {
    let packages = packages();
    let seam = packages
        .iter()
        .find(|package| package["name"] == "toolgate-sandbox")
        .expect("the sandbox seam is in the workspace");
    let tokio = seam["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|dep| dep["name"] == "tokio" && dep["kind"].is_null())
        .expect("the seam names tokio for its channels");
    assert_eq!(tokio["uses_default_features"], false, "{tokio}");
    assert_eq!(tokio["features"], serde_json::json!(["sync"]), "{tokio}");
}
