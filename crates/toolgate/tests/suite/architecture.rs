//! The README's architecture as a test: for every workspace crate, the workspace crates it may
//! depend on (an allow-list: any other edge fails, naming it), and for the crates that must not
//! know a backend, a transport or an I/O library, the outside crates they must not name. Read
//! from `cargo metadata`, so a new edge in any Cargo.toml fails here before it spreads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Every workspace crate, the workspace crates it may depend on (normal dependencies), and why.
/// A crate that is not listed fails too: a new crate states its place here.
const ALLOWED: &[(&str, &[&str], &str)] = &[
    (
        "toolgate-domain",
        &[],
        "the domain is values and rules: it stands on nothing",
    ),
    (
        "toolgate-egress",
        &[],
        "the egress policy is addresses and ranges: it stands on nothing",
    ),
    (
        "toolgate-vault",
        &["toolgate-domain"],
        "the vault is cryptography and its key file: it never sees storage or a transport",
    ),
    (
        "toolgate-store",
        &["toolgate-domain", "toolgate-oauth"],
        "the storage traits know the domain, and OAuth's replay and rotation rule (pure), which \
         they apply once for every backend over its compare-and-set primitives",
    ),
    (
        "toolgate-store-sqlite",
        &["toolgate-domain", "toolgate-store"],
        "a backend serves the store's traits only",
    ),
    (
        "toolgate-store-postgres",
        &["toolgate-domain", "toolgate-store"],
        "a backend serves the store's traits only",
    ),
    (
        "toolgate-ports",
        &["toolgate-domain"],
        "the ports are traits and values that adapters implement: no use case, no adapter",
    ),
    (
        "toolgate-oauth",
        &["toolgate-domain"],
        "the OAuth protocol is rules without I/O: no storage, no application, no port",
    ),
    (
        "toolgate-sandbox",
        &["toolgate-domain"],
        "the sandbox seam is values and a trait: no implementation, no service",
    ),
    (
        "toolgate-run-to-end",
        &[],
        "carrying a call's work to its end is a runtime's helper: it stands on nothing of ours",
    ),
    (
        "toolgate-egress-proxy",
        &["toolgate-sandbox", "toolgate-egress", "toolgate-fetch"],
        "the sessions' way out applies a run's grant (the seam's values) under the egress guard, \
         mirrors the operator's package index with the service's client of configured \
         endpoints, and knows nothing of accounts, storage or the service around it",
    ),
    (
        "toolgate-sandbox-manager",
        &[
            "toolgate-sandbox",
            "toolgate-egress-proxy",
            "toolgate-run-to-end",
        ],
        "the in-process sandbox serves the seam, each session's network through its proxy, and \
         knows nothing of the service around it",
    ),
    (
        "toolgate-checkpoints",
        &["toolgate-domain", "toolgate-sandbox", "toolgate-vault"],
        "the checkpoint store serves the sandbox's CheckpointStore seam, sealing with the vault, \
         and knows nothing of what runs the sessions or of the service around it",
    ),
    (
        "toolgate-node",
        &["toolgate-domain", "toolgate-sandbox", "toolgate-store"],
        "the channel between front ends and nodes carries the sandbox seam and places sessions \
         through the store's Placement; it knows nothing of what runs the sessions, of a \
         backend, or of the service around it",
    ),
    (
        "toolgate-sandbox-harden",
        &[],
        "the confinement library runs in a forked child: no runtime, no service",
    ),
    (
        "toolgate-app",
        &[
            "toolgate-domain",
            "toolgate-store",
            "toolgate-ports",
            "toolgate-oauth",
            "toolgate-sandbox",
            "toolgate-vault",
            "toolgate-egress",
        ],
        "the use cases know the store's traits, the ports, the OAuth protocol, the sandbox seam \
         and the vault (and the egress policy's host patterns, pure), never an adapter, a \
         backend or what runs the sessions",
    ),
    (
        "toolgate-fetch",
        &["toolgate-domain", "toolgate-ports", "toolgate-egress"],
        "the fetch client implements the Fetcher port behind the egress guard and knows nothing else",
    ),
    (
        "toolgate-providers",
        &[
            "toolgate-domain",
            "toolgate-ports",
            "toolgate-egress",
            "toolgate-vault",
            "toolgate-fetch",
        ],
        "the model and search client implements the Models and Searches ports behind the egress \
         guard (reading pages with the fetch client) and knows nothing else",
    ),
    (
        "toolgate-database",
        &[
            "toolgate-domain",
            "toolgate-ports",
            "toolgate-egress",
            "toolgate-vault",
        ],
        "the database client implements the Databases port behind the egress guard and knows \
         nothing else (SQLite files are the sessions' business, not this client's)",
    ),
    (
        "toolgate-mail",
        &["toolgate-domain", "toolgate-ports", "toolgate-vault"],
        "the mailer implements the Mailer port (SMTP or the outbox) and knows nothing else; the \
         vault's redactor keeps the SMTP password out of its errors",
    ),
    (
        "toolgate-payments",
        &["toolgate-domain", "toolgate-ports", "toolgate-vault"],
        "the Stripe client implements the Payments port and knows nothing else; the vault's \
         redactor keeps the secret key out of its errors",
    ),
    (
        "toolgate-dashboard",
        &[
            "toolgate-domain",
            "toolgate-app",
            "toolgate-ports",
            "toolgate-oauth",
        ],
        "the dashboard is pages over the app's use cases: no storage, mail or payment client",
    ),
    (
        "toolgate-server",
        &[
            "toolgate-domain",
            "toolgate-app",
            "toolgate-dashboard",
            "toolgate-oauth",
            "toolgate-run-to-end",
        ],
        "HTTP and MCP know the app (and the pages merged into the router), never a backend, an \
         adapter or the sandbox",
    ),
    (
        "toolgate",
        &[
            "toolgate-domain",
            "toolgate-store",
            "toolgate-store-sqlite",
            "toolgate-store-postgres",
            "toolgate-ports",
            "toolgate-app",
            "toolgate-server",
            "toolgate-vault",
            "toolgate-egress",
            "toolgate-fetch",
            "toolgate-providers",
            "toolgate-database",
            "toolgate-mail",
            "toolgate-payments",
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "toolgate-egress-proxy",
            "toolgate-checkpoints",
            "toolgate-node",
        ],
        "the binary is the only crate that names concrete backends and adapters, and wires them \
         into the app (the confinement library is loaded by the sandbox's children, not linked)",
    ),
    (
        "toolgate-bench",
        &[
            "toolgate-sandbox",
            "toolgate-sandbox-manager",
            "toolgate-checkpoints",
            "toolgate-vault",
            "toolgate-egress-proxy",
            "toolgate-egress",
        ],
        "the benchmark drives the binary over HTTP, and the session manager in process for the \
         sandbox's figures (with the checkpoint store, sealed by a vault, for the durable ones, \
         and the sessions' proxy for the egress ones)",
    ),
];

/// Outside crates that may not be named (as normal dependencies) by a crate, and why.
const FORBIDDEN_EXTERNAL: &[(&str, &[&str], &str)] = &[
    (
        "toolgate-domain",
        &[
            "tokio", "sqlx", "rusqlite", "axum", "hyper", "reqwest", "rmcp", "tracing",
        ],
        "the domain is pure: values and rules, no I/O",
    ),
    (
        "toolgate-egress",
        &["tokio", "reqwest", "hyper", "sqlx"],
        "the egress policy is pure: addresses and ranges, no I/O",
    ),
    (
        "toolgate-vault",
        &[
            "tokio", "sqlx", "rusqlite", "axum", "hyper", "reqwest", "rmcp", "tracing",
        ],
        "the vault is cryptography and its key file: it never sees storage or a transport",
    ),
    (
        "toolgate-store",
        &["sqlx", "rusqlite", "axum", "hyper", "rmcp"],
        "the storage traits know no backend and no transport",
    ),
    (
        "toolgate-store-sqlite",
        &["axum", "rmcp"],
        "a backend serves the store's traits only",
    ),
    (
        "toolgate-store-postgres",
        &["axum", "rmcp"],
        "a backend serves the store's traits only",
    ),
    (
        "toolgate-ports",
        &[
            "sqlx", "rusqlite", "axum", "hyper", "http", "reqwest", "rmcp", "lettre", "tracing",
            "rustix",
        ],
        "the ports are traits and values: no transport, no client, no database",
    ),
    (
        "toolgate-oauth",
        &[
            "tokio", "axum", "hyper", "http", "rmcp", "sqlx", "rusqlite", "reqwest", "tracing",
        ],
        "the OAuth protocol is rules without I/O: the HTTP layer decodes its requests, the app \
         runs its use cases over the store",
    ),
    (
        "toolgate-sandbox",
        &["rustix", "axum", "rmcp", "sqlx"],
        "the sandbox seam is values and a trait: no implementation, no service",
    ),
    (
        "toolgate-egress-proxy",
        &["axum", "rmcp", "sqlx", "rusqlite"],
        "the proxy speaks HTTP/1.1 heads and tunnels itself: no web framework, no database",
    ),
    (
        "toolgate-sandbox-manager",
        &["axum", "rmcp", "sqlx"],
        "the in-process sandbox serves the seam, and knows nothing of the service around it",
    ),
    (
        "toolgate-checkpoints",
        &["axum", "rmcp", "sqlx", "rusqlite"],
        "the checkpoint store keeps sealed images in a directory or a bucket: no service, no \
         database",
    ),
    (
        "toolgate-node",
        &["axum", "rmcp", "sqlx", "rusqlite", "rustix"],
        "the node channel carries the seam over HTTP/2: no service, no database, no sandbox \
         internals",
    ),
    (
        "toolgate-sandbox-harden",
        &["tokio"],
        "the confinement library runs in a forked child: no runtime, no service",
    ),
    (
        "toolgate-app",
        &[
            "rmcp", "axum", "hyper", "http", "sqlx", "rusqlite", "rustix", "reqwest", "lettre",
        ],
        "the use cases know the store's traits, the ports and the sandbox seam, not HTTP, MCP, \
         SQL or what runs the sessions",
    ),
    (
        "toolgate-fetch",
        &["sqlx", "rusqlite", "rmcp", "axum"],
        "the fetch client implements the Fetcher port behind the egress guard and knows nothing else",
    ),
    (
        "toolgate-providers",
        &["sqlx", "rusqlite", "rmcp", "axum"],
        "the model client implements the Models and Searches ports and knows nothing else",
    ),
    (
        "toolgate-database",
        &["rusqlite", "reqwest", "rmcp", "axum"],
        "the database client implements the Databases port and knows nothing else",
    ),
    (
        "toolgate-mail",
        &["sqlx", "rusqlite", "rmcp", "axum"],
        "the mailer implements the Mailer port (SMTP or the outbox) and knows nothing else",
    ),
    (
        "toolgate-payments",
        &["sqlx", "rusqlite", "rmcp", "axum"],
        "the Stripe client implements the Payments port and knows nothing else",
    ),
    (
        "toolgate-dashboard",
        &["sqlx", "rusqlite", "rmcp", "reqwest", "lettre"],
        "the dashboard is pages over the app's use cases: no storage, mail or payment client",
    ),
    (
        "toolgate-server",
        &["sqlx", "rusqlite"],
        "HTTP and MCP know the app, never a backend",
    ),
];

/// Seams another host could stand behind: of tokio they may take the channels their values
/// travel through, nothing that runs (no runtime, sockets or processes: those belong to an
/// implementation).
const CHANNEL_ONLY_SEAMS: &[&str] = &["toolgate-sandbox", "toolgate-ports"];

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

/// The edges between workspace crates that [`ALLOWED`] does not list, and the crates it does
/// not know (or knows but the workspace lacks), each as a line naming it.
fn unlisted_edges(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let allowed: BTreeMap<&str, (&[&str], &str)> = ALLOWED
        .iter()
        .map(|(krate, deps, why)| (*krate, (*deps, *why)))
        .collect();
    let mut broken = Vec::new();
    for listed in allowed.keys() {
        if !graph.contains_key(*listed) {
            broken.push(format!(
                "{listed} is in the allow-list but not in the workspace"
            ));
        }
    }
    for (krate, deps) in graph {
        let Some((may, why)) = allowed.get(krate.as_str()) else {
            broken.push(format!(
                "{krate} is not in the allow-list: add it with the workspace crates it may use"
            ));
            continue;
        };
        for dep in deps
            .iter()
            .filter(|dep| graph.contains_key(*dep) && !may.contains(&dep.as_str()))
        {
            broken.push(format!("{krate} -> {dep}: not allowed ({why})"));
        }
    }
    broken
}

#[test]
fn workspace_crates_depend_only_on_what_their_allow_list_names() {
    let broken = unlisted_edges(&normal_dependencies());
    assert!(
        broken.is_empty(),
        "edges outside the allow-list:\n{}",
        broken.join("\n")
    );
}

/// The check itself, on a workspace that uses exactly what the list allows: an edge from an
/// adapter to the application, and a crate nobody listed, are found and named.
#[test]
fn an_edge_outside_the_allow_list_is_named() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = ALLOWED
        .iter()
        .map(|(krate, deps, _)| {
            let deps = deps.iter().map(|dep| (*dep).to_owned()).collect();
            ((*krate).to_owned(), deps)
        })
        .collect();
    assert!(unlisted_edges(&graph).is_empty());
    graph
        .get_mut("toolgate-fetch")
        .unwrap()
        .insert("toolgate-app".to_owned());
    graph.insert("toolgate-new".to_owned(), BTreeSet::new());
    let broken = unlisted_edges(&graph);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken
            .iter()
            .any(|b| b.starts_with("toolgate-new is not in the allow-list")),
        "{broken:?}"
    );
    assert!(
        broken
            .iter()
            .any(|b| b.starts_with("toolgate-fetch -> toolgate-app: not allowed")),
        "{broken:?}"
    );
}

#[test]
fn crates_name_no_io_library_they_must_not_know() {
    let graph = normal_dependencies();
    let mut broken = Vec::new();
    for (krate, forbidden, why) in FORBIDDEN_EXTERNAL {
        let deps = graph
            .get(*krate)
            .unwrap_or_else(|| panic!("{krate} is not in the workspace: update this test"));
        for dep in deps.iter().filter(|dep| forbidden.contains(&dep.as_str())) {
            broken.push(format!("{krate} -> {dep}: {why}"));
        }
    }
    assert!(broken.is_empty(), "forbidden edges:\n{}", broken.join("\n"));
}

/// A seam may use tokio's channels (a run's output, a model's streamed answer) but nothing that
/// runs: no runtime, no sockets, no processes. Those belong to an implementation. One exception,
/// checked in its sources: `toolgate-sandbox` takes `rt` for the task-local that carries a
/// request's stage clock (`stages.rs`, the opt-in `Server-Timing`), and uses nothing else of it.
#[test]
fn the_seams_take_only_tokios_channels() {
    let packages = packages();
    for name in CHANNEL_ONLY_SEAMS {
        let seam = packages
            .iter()
            .find(|package| package["name"] == *name)
            .unwrap_or_else(|| panic!("{name} is in the workspace"));
        let tokio = seam["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|dep| dep["name"] == "tokio" && dep["kind"].is_null());
        let Some(tokio) = tokio else {
            continue;
        };
        assert_eq!(tokio["uses_default_features"], false, "{name}: {tokio}");
        let allowed: &[&str] = if *name == "toolgate-sandbox" {
            &["rt", "sync"]
        } else {
            &["sync"]
        };
        let mut features: Vec<&str> = tokio["features"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        features.sort_unstable();
        assert_eq!(features, allowed, "{name}: {tokio}");
    }
    // what `rt` would allow beyond the task-local: none of it in the seam's sources
    let sources = concat!(env!("CARGO_MANIFEST_DIR"), "/../sandbox/src");
    for entry in std::fs::read_dir(sources).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for runs in [
            "tokio::spawn",
            "tokio::task::spawn",
            "tokio::runtime",
            "tokio::net",
            "tokio::process",
            "spawn_blocking",
        ] {
            assert!(
                !text.contains(runs),
                "{} uses {runs}: a seam runs nothing",
                path.display()
            );
        }
    }
}
