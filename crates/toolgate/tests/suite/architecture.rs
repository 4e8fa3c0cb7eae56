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
        ],
        "the use cases know the store's traits, not HTTP, MCP or SQL",
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
            "toolgate-sandbox-harden",
        ],
        "HTTP and MCP know the app, never a backend or the sandbox manager",
    ),
    (
        "toolgate-sandbox-harden",
        &["tokio", "toolgate-app", "toolgate-server"],
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

/// Edges the rules forbid that exist until a named piece of work removes them. The test fails
/// when one of them is gone, so the exception goes with it.
const NOT_YET: &[(&str, &str, &str)] = &[(
    "toolgate-app",
    "toolgate-sandbox",
    "issue 10, point 3: app should know a Sessions trait, not the in-process manager",
)];

/// Each workspace crate's normal (not dev, not build) dependencies, by name.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
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
    metadata["packages"]
        .as_array()
        .unwrap()
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
    for (krate, dep, work) in NOT_YET {
        assert!(
            graph.get(*krate).is_some_and(|deps| deps.contains(*dep)),
            "{krate} -> {dep} is gone ({work}): remove it from NOT_YET and forbid it"
        );
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
