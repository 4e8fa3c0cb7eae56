//! No file circles: within each crate, the top-level modules (`src/x.rs` or `src/x/`) that name
//! each other through `crate::…` form no cycle, so each module can be read after the ones it
//! uses. A circle (the writer's jobs knowing the mirror that queues them, which knows the jobs)
//! is how two rooms grow into one; this finds the first one and names its modules. Tests and
//! comments are left out: a test may reach anywhere, and a comment's link is no dependency.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules of the same crate it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The workspace's `crates/` directory.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file beneath `dir` that is not a test file.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                sources(&path, found);
            }
        } else if name.ends_with(".rs") && !name.contains("test") {
            found.push(path);
        }
    }
}

/// The top-level module a file of `src` belongs to (`lib`/`main` for the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap();
    let first = first.as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The code of a file before its first `#[cfg(test)]`, without comment lines.
fn code(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names `code` reaches as `crate::name` or inside `crate::{a, b::c}`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                names.insert(first_segment(item.trim()));
            }
        } else {
            names.insert(first_segment(rest));
        }
    }
    names.retain(|name| !name.is_empty());
    names
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The module graph of one crate's `src`.
fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let module = module_of(src, &file);
        let names = named_modules(&code(&std::fs::read_to_string(&file).unwrap()));
        graph.entry(module.clone()).or_default().extend(
            names
                .into_iter()
                .filter(|name| *name != module && name != "lib" && name != "main"),
        );
    }
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    for names in graph.values_mut() {
        names.retain(|name| known.contains(name));
    }
    graph
}

/// A cycle of `graph`, as the modules on it, if there is one.
fn a_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|seen| seen == node) {
            return Some(path[at..].to_vec());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_a_circle_of_modules() {
    let mut circles = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    assert!(crates.len() > 10, "found the crates: {crates:?}");
    for src in crates {
        if let Some(cycle) = a_cycle(&graph_of(&src)) {
            circles.push(format!("{}: {}", src.display(), cycle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "modules that name each other: {circles:#?}"
    );
}

/// The check itself: a circle of three is found, a chain is not.
#[test]
fn a_circle_is_found_and_a_chain_is_not() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut graph = Graph::new();
        for (from, to) in pairs {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    };
    let chain = edges(&[
        ("admit", "jobs"),
        ("allowance", "jobs"),
        ("admit", "allowance"),
    ]);
    assert_eq!(a_cycle(&chain), None);
    let circle = edges(&[
        ("admit", "allowance"),
        ("allowance", "jobs"),
        ("jobs", "admit"),
    ]);
    assert_eq!(a_cycle(&circle).map(|c| c.len()), Some(3));
    let read = named_modules("use crate::{jobs::Key, standing};\nlet x = crate::admit::run();");
    assert_eq!(
        read.into_iter().collect::<Vec<_>>(),
        ["admit", "jobs", "standing"]
    );
}
