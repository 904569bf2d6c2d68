use super::*;

/// Keeps kind and name of every object; refuses objects named `bad`.
#[derive(Debug, PartialEq)]
struct Seen(String, String);

impl Keep for Seen {
    fn keep(object: Object) -> Result<Self, String> {
        if object.name() == "bad" {
            return Err("refused".into());
        }
        Ok(Seen(object.kind.clone(), object.name().to_owned()))
    }
}

/// Refuses everything.
struct Refuse;

impl Keep for Refuse {
    fn keep(_: Object) -> Result<Self, String> {
        Err("refused".into())
    }
}

fn read_all(text: &str) -> Result<Vec<(Position, Seen)>, ManifestError> {
    let mut out = Vec::new();
    read_text("f", text, |at, seen| out.push((at, seen)))?;
    Ok(out)
}

fn names(text: &str) -> Vec<String> {
    read_all(text)
        .unwrap()
        .into_iter()
        .map(|(_, Seen(kind, name))| format!("{kind}/{name}"))
        .collect()
}

const PODS: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}"#;

#[test]
fn every_format_gives_the_same_objects() {
    let list_json = r#"{"apiVersion": "v1", "items": [
        {"kind": "Pod", "metadata": {"name": "a"}}, {"kind": "Pod", "metadata": {"name": "b"}}],
        "kind": "List", "metadata": {}}"#;
    let list_yaml = "apiVersion: v1\nitems:\n- kind: Pod\n  metadata: {name: a}\n- kind: Pod\n  metadata: {name: b}\nkind: List\n";
    let stream_yaml =
        "---\nkind: Pod\nmetadata: {name: a}\n---\n---\nkind: Pod\nmetadata: {name: b}\n";
    let stream_of_json = "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}\n---\n{\"kind\": \"Pod\", \"metadata\": {\"name\": \"b\"}}\n";
    let json_values = "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}\n{\"kind\": \"PodList\", \"items\": [{\"kind\": \"Pod\", \"metadata\": {\"name\": \"b\"}}]}";
    let array = "[{\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}, {\"kind\": \"Pod\", \"metadata\": {\"name\": \"b\"}}]";
    let flow_yaml = "{kind: Pod, metadata: {name: a}}\n---\n{kind: Pod, metadata: {name: b}}\n";
    for text in [
        list_json,
        list_yaml,
        stream_yaml,
        stream_of_json,
        json_values,
        array,
        flow_yaml,
    ] {
        assert_eq!(names(text), ["Pod/a", "Pod/b"], "{text}");
    }
    assert_eq!(names(PODS), ["Pod/a"]);
    assert!(names("").is_empty() && names("---\n# nothing\n").is_empty());
}

#[test]
fn a_list_whose_kind_comes_first_or_last_is_a_list_and_other_items_are_fields() {
    let kind_first = "kind: List\nitems:\n- {kind: Pod, metadata: {name: a}}\n";
    assert_eq!(names(kind_first), ["Pod/a"]);
    let not_a_list =
        "items:\n- {kind: Pod, metadata: {name: a}}\nkind: Widget\nmetadata: {name: w}\n";
    assert_eq!(names(not_a_list), ["Widget/w"]);
    let no_items = "kind: List\nitems: {}\n";
    assert_eq!(names(no_items), ["List/"]);
}

#[test]
fn errors_name_the_file_the_document_and_the_item() {
    let err = read_all("kind: Pod\nmetadata: {name: a}\n---\nkind: List\nitems:\n- {kind: Pod, metadata: {name: b}}\n- {kind: Pod, metadata: {name: bad}}\n")
        .unwrap_err()
        .to_string();
    assert_eq!(err, "f: document 2, item 2: refused (Pod \"bad\")");
    let err = read_all("kind: Pod\n---\na: [\n").unwrap_err().to_string();
    assert!(
        err.starts_with("f: document 2: invalid YAML: ") && err.contains("line"),
        "{err}"
    );
    let err = read_all("{\"kind\": \"Pod\"}\n---\n{\"a\": }")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("f: document 2: invalid JSON: ") && err.contains("line 3"),
        "{err}"
    );
    let refuse_all = |text: &str| {
        read_text::<Refuse>("f", text, |_, _| {})
            .unwrap_err()
            .to_string()
    };
    assert_eq!(refuse_all("{}"), "f: document 1: refused");
    assert_eq!(
        refuse_all("metadata: {name: p}"),
        "f: document 1: refused (\"p\")"
    );
    let err = read_all("\"just text\"").unwrap_err().to_string();
    assert!(err.contains("expected a Kubernetes object"), "{err}");
}

#[test]
fn an_oversized_object_is_refused_with_its_document() {
    let big = format!(
        "kind: Pod\n---\nkind: ConfigMap\ndata: {{a: \"{}\"}}\n",
        "x".repeat(MAX_OBJECT_BYTES)
    );
    let err = read_all(&big).unwrap_err().to_string();
    assert!(
        err.starts_with("f: document 2: object larger than"),
        "{err}"
    );
}

#[test]
fn files_and_directories_are_read_by_the_same_rules() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::create_dir_all(d.join("..data")).unwrap();
    std::fs::write(d.join("b.yaml"), PODS).unwrap();
    std::fs::write(d.join("sub/a.json"), PODS).unwrap();
    std::fs::write(d.join("..data/c.yaml"), PODS).unwrap();
    std::fs::write(d.join("notes.txt"), "not a manifest").unwrap();
    let files = manifest_files(&[d.to_owned()], Walk::Recursive).unwrap();
    assert_eq!(files, [d.join("b.yaml"), d.join("sub/a.json")]);
    let flat = manifest_files(&[d.to_owned(), d.join("sub")], Walk::Flat).unwrap();
    assert_eq!(flat, [d.join("b.yaml"), d.join("sub/a.json")]);
    let mut seen = Vec::new();
    read_file(&files[1], |_, s: Seen| seen.push(s)).unwrap();
    assert_eq!(seen, [Seen("Pod".into(), "a".into())]);
    let err = manifest_files(&[d.join("missing")], Walk::Flat)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("reading ") && err.contains("missing"),
        "{err}"
    );
}
