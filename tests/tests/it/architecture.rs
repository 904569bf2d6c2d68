//! The prose about the crates against the repository, so that it cannot drift from the code:
//!
//! - ARCHITECTURE.md: every path it names exists; its crates table lists exactly the workspace's crates, each
//!   with its directory; its crate graph, drawn in Mermaid and as a text list, is exactly the graph of normal
//!   dependencies between the workspace's crates; the crates it calls pure declare no kube client, tokio or
//!   hyper and depend only on pure crates.
//! - README.md's Layout table: exactly the workspace's crates with their directories, and every path a row
//!   names exists.
//! - Every sentence of ARCHITECTURE.md, README.md and docs/design/principles.md that says which crate depends
//!   on which (see [`dependency_claims`]) is true of the Cargo manifests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn architecture() -> String {
    read("ARCHITECTURE.md")
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

/// One workspace member, read from its Cargo.toml.
struct Member {
    /// The directory, as `[workspace] members` lists it (`recommender/engine`).
    dir: String,
    name: String,
    /// `[dependencies]` (normal, non-dev): each name with the rest of its line (`{ workspace = true, … }`).
    deps: BTreeMap<String, String>,
}

fn members() -> Vec<Member> {
    let manifest = read("Cargo.toml");
    let list = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("[workspace] members");
    list.split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|dir| {
            let toml = read(&format!("{dir}/Cargo.toml"));
            let name = toml
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .expect("package name")
                .to_owned();
            let mut deps = BTreeMap::new();
            let mut section = "";
            for line in toml.lines() {
                if line.starts_with('[') {
                    section = line;
                } else if section == "[dependencies]"
                    && let Some((dep, spec)) = line.split_once('=')
                    && !line.trim_start().starts_with('#')
                {
                    deps.insert(dep.trim().to_owned(), spec.trim().to_owned());
                }
            }
            Member {
                dir: dir.to_owned(),
                name,
                deps,
            }
        })
        .collect()
}

/// Workspace members as (package name, normal dependency on another `tailor-*` crate).
fn workspace_graph() -> BTreeSet<(String, String)> {
    members()
        .into_iter()
        .flat_map(|m| {
            m.deps
                .into_keys()
                .filter(|d| d.starts_with("tailor-"))
                .map(move |d| (m.name.clone(), d))
        })
        .collect()
}

fn crate_names() -> BTreeSet<String> {
    members().into_iter().map(|m| m.name).collect()
}

/// The body of the fenced block that follows the first occurrence of `after` in `text` (a line starting
/// with three backticks).
fn fenced_after<'a>(text: &'a str, after: &str) -> &'a str {
    let rest = &text[text
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} not found"))..];
    rest.split("```")
        .nth(1)
        .and_then(|b| b.split_once('\n'))
        .map(|(_, body)| body)
        .unwrap_or_else(|| panic!("no fenced block after {after:?}"))
}

fn compare_graphs(what: &str, drawn: &BTreeSet<(String, String)>) {
    let actual = workspace_graph();
    let not_drawn: Vec<_> = actual.difference(drawn).collect();
    let not_real: Vec<_> = drawn.difference(&actual).collect();
    assert!(
        not_drawn.is_empty() && not_real.is_empty(),
        "{what} differs from Cargo.toml: missing edges {not_drawn:?}, edges that do not exist {not_real:?}"
    );
}

#[test]
fn crate_graph_in_architecture_md_is_the_workspace_graph() {
    let text = architecture();
    let block = fenced_after(&text, "```mermaid");
    let drawn: BTreeSet<(String, String)> = block
        .lines()
        .filter_map(|l| l.trim().split_once(" --> "))
        .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()))
        .collect();
    compare_graphs("ARCHITECTURE.md's Mermaid crate graph", &drawn);
}

/// The text list under the Mermaid graph: one line per crate, `tailor-x  ──> a, b, c   (note)   [pure]`, the
/// crates it depends on without their `tailor-` prefix, the list ended by two spaces. Returns the edges, the
/// crates listed and the crates marked `[pure]`.
fn text_graph() -> (
    BTreeSet<(String, String)>,
    BTreeSet<String>,
    BTreeSet<String>,
) {
    let text = architecture();
    let block = fenced_after(&text, "The same graph as a list");
    let (mut edges, mut listed, mut pure) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let name = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        assert!(
            name.starts_with("tailor-"),
            "ARCHITECTURE.md's text graph: a line that names no crate first: {line:?}"
        );
        if let Some((_, deps)) = line.split_once("──>") {
            let deps = deps.trim_start();
            let list = deps.split("  ").next().unwrap_or_default();
            for dep in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
                edges.insert((name.clone(), format!("tailor-{dep}")));
            }
        }
        if line.ends_with("[pure]") {
            pure.insert(name.clone());
        }
        listed.insert(name);
    }
    (edges, listed, pure)
}

#[test]
fn text_crate_graph_in_architecture_md_is_the_workspace_graph() {
    let (edges, listed, _) = text_graph();
    compare_graphs("ARCHITECTURE.md's text crate graph", &edges);
    assert_eq!(
        listed,
        crate_names(),
        "ARCHITECTURE.md's text crate graph must list every workspace crate once"
    );
}

/// The crates a sentence `Pure crates (…): `a`, `b`.` of ARCHITECTURE.md names.
fn pure_crates() -> BTreeSet<String> {
    let text = architecture();
    let line = text
        .lines()
        .find(|l| l.starts_with("Pure crates"))
        .expect("ARCHITECTURE.md: a line starting \"Pure crates\"");
    let (_, names) = line.split_once("):").expect("Pure crates (…): `a`, `b`");
    names
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn pure_crates_declare_no_kube_client_tokio_or_hyper() {
    let pure = pure_crates();
    let (_, _, marked) = text_graph();
    assert_eq!(
        pure, marked,
        "ARCHITECTURE.md: the crates called pure and those marked [pure] in the text graph differ"
    );
    assert!(pure.len() >= 3, "too few pure crates found: {pure:?}");
    let impure = [
        "tokio",
        "hyper",
        "hyper-util",
        "axum",
        "kube-client",
        "kube-runtime",
    ];
    for member in members().iter().filter(|m| pure.contains(&m.name)) {
        for (dep, spec) in &member.deps {
            assert!(
                !impure.contains(&dep.as_str()),
                "{} is called pure but depends on {dep}",
                member.name
            );
            // The workspace's `kube` has only the derive macros: a member asks for the client or runtime.
            assert!(
                dep != "kube" || !(spec.contains("client") || spec.contains("runtime")),
                "{} is called pure but asks for kube's client: {spec}",
                member.name
            );
            assert!(
                !dep.starts_with("tailor-") || pure.contains(dep),
                "{} is called pure but depends on {dep}, which is not",
                member.name
            );
        }
    }
}

/// The rows of the Markdown table that follows `heading` in `text`: each row's cells, trimmed (header and
/// separator rows left out).
fn table_rows(text: &str, heading: &str) -> Vec<Vec<String>> {
    let rest = &text[text
        .find(heading)
        .unwrap_or_else(|| panic!("{heading:?} not found"))..];
    rest.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The workspace's crates as (name, directory with a trailing `/`).
fn crates_with_dirs() -> BTreeSet<(String, String)> {
    members()
        .into_iter()
        .map(|m| (m.name, format!("{}/", m.dir)))
        .collect()
}

fn backticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

#[test]
fn crates_table_in_architecture_md_lists_every_workspace_crate() {
    let listed: BTreeSet<(String, String)> = table_rows(&architecture(), "## Crates")
        .iter()
        .map(|row| {
            let name = backticked(&row[0]).first().copied().unwrap_or_default();
            let dir = backticked(&row[1]).first().copied().unwrap_or_default();
            (name.to_owned(), dir.to_owned())
        })
        .collect();
    assert_eq!(
        listed,
        crates_with_dirs(),
        "ARCHITECTURE.md's crates table (crate, directory) differs from the workspace"
    );
}

#[test]
fn layout_table_in_readme_lists_every_workspace_crate_and_existing_paths() {
    let readme = read("README.md");
    let rows = table_rows(&readme, "## Layout");
    let listed: BTreeSet<(String, String)> = rows
        .iter()
        .map(|row| match backticked(&row[0])[..] {
            [name, dir] => (name.to_owned(), dir.to_owned()),
            _ => panic!(
                "README.md's Layout: a first cell that is not `crate` (`dir/`): {:?}",
                row[0]
            ),
        })
        .collect();
    assert_eq!(
        listed,
        crates_with_dirs(),
        "README.md's Layout table (crate, directory) differs from the workspace"
    );
    // Paths a row names resolve from the repository root or from the row's crate directory.
    let mut missing = Vec::new();
    for row in &rows {
        let dir = backticked(&row[0])[1];
        for path in paths(&row[1..].join(" ")) {
            if !root().join(&path).exists() && !root().join(dir).join(&path).exists() {
                missing.push(path);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README.md's Layout names paths that do not exist: {missing:?}"
    );
}

/// Words for a crate in prose, besides its backticked name (matched in lower case, as whole words).
const ALIASES: [(&str, &[&str]); 6] = [
    (
        "the three components",
        &["tailor-recommender", "tailor-updater", "tailor-admission"],
    ),
    ("the recommender", &["tailor-recommender"]),
    ("the controller", &["tailor-recommender"]),
    ("the updater", &["tailor-updater"]),
    ("the webhook", &["tailor-admission"]),
    ("the cli", &["tailor-cli"]),
];

/// The crates `text` names, in order: backticked workspace crate names and the [`ALIASES`] ("the updater's"
/// counts, "the client" is not "the CLI"), each with the byte offset where it starts in `text.to_lowercase()`.
fn crates_named(text: &str, names: &BTreeSet<String>) -> Vec<(usize, String)> {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for name in names {
        let quoted = format!("`{name}`");
        found.extend(
            lower
                .match_indices(&quoted)
                .map(|(at, _)| (at, name.clone())),
        );
    }
    for (alias, crates) in ALIASES {
        for (at, _) in lower.match_indices(alias) {
            let whole_word = lower[at + alias.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric());
            if whole_word {
                found.extend(crates.iter().map(|c| (at, (*c).to_owned())));
            }
        }
    }
    found.sort();
    found
}

/// Splits prose into clauses: at `.`, `;` and `:` followed by a space or the end (never inside backticks);
/// parenthesised asides are left out (they name examples, not claims).
fn clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let (mut in_code, mut depth) = (false, 0usize);
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let next_blank = chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        match c {
            _ if depth > 0 && !in_code && c == '(' => depth += 1,
            _ if depth > 0 && !in_code && c == ')' => depth -= 1,
            '`' => {
                in_code = !in_code;
                if depth == 0 {
                    current.push(c);
                }
            }
            _ if depth > 0 => {}
            '(' if !in_code => depth += 1,
            '.' | ';' | ':' if !in_code && next_blank => out.push(std::mem::take(&mut current)),
            '\n' => current.push(' '),
            _ => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|c| !c.is_empty())
        .collect()
}

/// What one clause claims about the graph: `(from, to, depends)`, where `from` and `to` are crates and
/// `depends` says whether `from` must or must not depend on `to`.
type Claim = (String, String, bool);

/// The claims of a clause with the word "depend" or "depends" in it (`None` without), read as follows:
///
/// - the crates named before the verb are the subjects; when none is, `row_crate` (the crate of the table
///   row the clause is in), else the clause claims nothing checkable ("how the crates depend on each other");
/// - "… never depend on each other" (or "do not"): no subject depends on another;
/// - otherwise each crate named after the verb is depended on, unless a negation ("not", "never", "neither",
///   "nor", "no") stands before it in the clause;
/// - a clause with a subject but nothing readable after the verb fails the test: rephrase it.
fn dependency_claims(
    clause: &str,
    names: &BTreeSet<String>,
    row_crate: Option<&str>,
) -> Option<Vec<Claim>> {
    let lower = clause.to_lowercase();
    let verb = lower
        .match_indices("depend")
        .find(|(at, _)| {
            let after = &lower[at + "depend".len()..];
            let starts_word = !lower[..*at].ends_with(|c: char| c.is_alphanumeric());
            starts_word && (after.starts_with(' ') || after.starts_with("s "))
        })?
        .0;
    let named = crates_named(clause, names);
    let mut subjects: Vec<String> = named
        .iter()
        .filter(|(at, _)| *at < verb)
        .map(|(_, c)| c.clone())
        .collect();
    if subjects.is_empty() {
        subjects.extend(row_crate.map(str::to_owned));
    }
    if subjects.is_empty() {
        return Some(Vec::new());
    }
    let negated = |upto: usize| {
        lower[..upto]
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| ["not", "never", "neither", "nor", "no"].contains(&w))
    };
    let mut claims = Vec::new();
    if lower[verb..].contains("on each other") {
        assert!(
            negated(verb),
            "a clause claims crates depend on each other: {clause:?}"
        );
        for a in &subjects {
            for b in subjects.iter().filter(|b| *b != a) {
                claims.push((a.clone(), b.clone(), false));
            }
        }
        return Some(claims);
    }
    for (at, object) in named.iter().filter(|(at, _)| *at > verb) {
        for subject in &subjects {
            claims.push((subject.clone(), object.clone(), !negated(*at)));
        }
    }
    assert!(
        !claims.is_empty(),
        "a clause about dependencies that this test cannot read (name the crates, or say \"never depend on \
         each other\"): {clause:?}"
    );
    Some(claims)
}

/// The clauses of a Markdown file's prose (fenced code blocks left out), each with the crate of the table row
/// it is in, when the row's first cell names one.
fn prose_clauses(text: &str, names: &BTreeSet<String>) -> Vec<(String, Option<String>)> {
    let prose = text.split("```").step_by(2).collect::<Vec<_>>().join("\n");
    let mut out = Vec::new();
    let mut paragraph = String::new();
    for line in prose.lines().chain([""]) {
        if line.starts_with('|') || line.trim().is_empty() {
            out.extend(clauses(&paragraph).into_iter().map(|c| (c, None)));
            paragraph.clear();
        }
        if line.starts_with('|') {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            let row_crate = cells
                .first()
                .and_then(|c| backticked(c).first().copied())
                .filter(|n| names.contains(*n))
                .map(str::to_owned);
            for cell in cells.iter().skip(1) {
                out.extend(clauses(cell).into_iter().map(|c| (c, row_crate.clone())));
            }
        } else {
            paragraph.push_str(line);
            paragraph.push('\n');
        }
    }
    out
}

#[test]
fn sentences_about_dependencies_are_true_of_the_manifests() {
    let names = crate_names();
    let graph = workspace_graph();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in ["ARCHITECTURE.md", "README.md", "docs/design/principles.md"] {
        for (clause, row_crate) in prose_clauses(&read(file), &names) {
            let Some(claims) = dependency_claims(&clause, &names, row_crate.as_deref()) else {
                continue;
            };
            for (from, to, depends) in claims {
                checked += 1;
                let real = graph.contains(&(from.clone(), to.clone()));
                if real != depends {
                    wrong.push(format!(
                        "{file}: {clause:?} says {from} {} on {to}; its Cargo.toml says it {}",
                        if depends {
                            "depends"
                        } else {
                            "does not depend"
                        },
                        if real { "does" } else { "does not" }
                    ));
                }
            }
        }
    }
    assert!(checked >= 10, "too few dependency claims read: {checked}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
