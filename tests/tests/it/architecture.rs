//! ARCHITECTURE.md against the repository: every path it names exists, and its crate graph is exactly the
//! graph of normal dependencies between the workspace's crates (so the picture cannot drift from the code).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md at the repository root")
}

/// The backticked spans of `text` that name a repository path: a `/` inside, no space, and either a
/// trailing `/` or a file extension (API groups such as `autoscaling.tailor.dev/v1` have neither).
fn paths(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.contains('/') && !s.contains(' ') && !s.starts_with("../"))
        .filter(|s| {
            s.ends_with('/')
                || Path::new(s).extension().is_some_and(|e| {
                    ["rs", "md", "sh", "py", "toml", "yaml", "txt"]
                        .contains(&e.to_string_lossy().as_ref())
                })
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_path_in_architecture_md_exists() {
    let text = architecture();
    let named = paths(&text);
    assert!(named.len() > 20, "too few paths found: {named:?}");
    let missing: Vec<_> = named.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

/// Workspace members as (package name, normal dependencies on other `tailor-*` crates).
fn workspace_graph() -> BTreeSet<(String, String)> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("[workspace] members");
    let mut edges = BTreeSet::new();
    for member in members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
    {
        let toml = std::fs::read_to_string(root().join(member).join("Cargo.toml")).unwrap();
        let name = toml
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .expect("package name")
            .to_owned();
        let mut section = "";
        for line in toml.lines() {
            if line.starts_with('[') {
                section = line;
            } else if section == "[dependencies]"
                && let Some(dep) = line
                    .split_whitespace()
                    .next()
                    .filter(|d| d.starts_with("tailor-"))
            {
                edges.insert((name.clone(), dep.to_owned()));
            }
        }
    }
    edges
}

#[test]
fn crate_graph_in_architecture_md_is_the_workspace_graph() {
    let text = architecture();
    let block = text
        .split("```mermaid")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a mermaid block for the crate graph");
    let drawn: BTreeSet<(String, String)> = block
        .lines()
        .filter_map(|l| l.trim().split_once(" --> "))
        .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()))
        .collect();
    let actual = workspace_graph();
    let not_drawn: Vec<_> = actual.difference(&drawn).collect();
    let not_real: Vec<_> = drawn.difference(&actual).collect();
    assert!(
        not_drawn.is_empty() && not_real.is_empty(),
        "ARCHITECTURE.md's crate graph differs from Cargo.toml: missing edges {not_drawn:?}, edges that do not exist {not_real:?}"
    );
}
