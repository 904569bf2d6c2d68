//! Writes the manifest reader benchmark's input (docs/decisions/manifest-reader.md): `--deployments`
//! Deployments, each with `--revisions` ReplicaSet revisions, a Tailor VPA and `--pods` running pods, every
//! object of realistic size (`tailor_tests::workload_objects`), twice under `--out`: `yaml/` as multi-document
//! YAML streams and `json/` as `kubectl get -o json` Lists (indented as kubectl does), one file per kind and
//! `--list-deployments` Deployments (500: as `kubectl get` per group of namespaces, and within what the
//! readers before the shared one accepted: 512 MiB per snapshot file, 64 MiB of YAML scalars per file).
//! Prints the bytes written per format. Run through `hack/bench-manifests.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark harness: a panic is its failure report

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use tailor_tests::workload_objects::{objects, pod};

struct Args {
    deployments: usize,
    revisions: usize,
    template_bytes: usize,
    pods: usize,
    list_deployments: usize,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        deployments: 5_000,
        revisions: 10,
        template_bytes: 4_096,
        pods: 1,
        list_deployments: 500,
        out: PathBuf::new(),
    };
    const USAGE: &str = "usage: manifest_files --out DIR [--deployments N] [--revisions R] \
                         [--template-bytes B] [--pods P] [--list-deployments L]";
    let refuse = |message: String| -> ! {
        eprintln!("{message}\n{USAGE}");
        std::process::exit(2)
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let text = pair
            .get(1)
            .cloned()
            .unwrap_or_else(|| refuse(format!("{} needs a value", pair[0])));
        let value = || -> usize {
            text.parse()
                .unwrap_or_else(|_| refuse(format!("{} needs a number", pair[0])))
        };
        match pair[0].as_str() {
            "--deployments" => a.deployments = value(),
            "--revisions" => a.revisions = value(),
            "--template-bytes" => a.template_bytes = value(),
            "--pods" => a.pods = value(),
            "--list-deployments" => a.list_deployments = value().max(1),
            "--out" => a.out = PathBuf::from(&text),
            other => refuse(format!("unknown argument {other}")),
        }
    }
    if a.out.as_os_str().is_empty() {
        refuse("--out is required".into());
    }
    a
}

const KINDS: [&str; 4] = ["deployments", "replicasets", "vpas", "pods"];

/// One output file per kind, format and chunk.
struct Outputs {
    out: PathBuf,
    yaml: Vec<BufWriter<File>>,
    json: Vec<BufWriter<File>>,
    /// Whether the JSON List of each kind has an item yet (for the commas).
    started: [bool; 4],
}

fn open(dir: &Path, suffix: &str, format: &str) -> Vec<BufWriter<File>> {
    std::fs::create_dir_all(dir).unwrap();
    KINDS
        .iter()
        .map(|k| BufWriter::new(File::create(dir.join(format!("{k}{suffix}.{format}"))).unwrap()))
        .collect()
}

impl Outputs {
    fn create(out: &Path) -> Self {
        Outputs {
            out: out.to_owned(),
            yaml: Vec::new(),
            json: Vec::new(),
            started: [false; 4],
        }
    }

    /// Ends the files being written and starts those of chunk `chunk`.
    fn next_chunk(&mut self, chunk: usize) {
        self.finish_json();
        for mut w in self.yaml.drain(..) {
            w.flush().unwrap();
        }
        self.yaml = open(&self.out.join("yaml"), &format!("-{chunk}"), "yaml");
        self.json = open(&self.out.join("json"), &format!("-{chunk}"), "json");
        self.started = [false; 4];
        for w in &mut self.json {
            w.write_all(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n")
                .unwrap();
        }
    }

    fn finish_json(&mut self) {
        for mut w in self.json.drain(..) {
            w.write_all(b"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
                .unwrap();
            w.flush().unwrap();
        }
    }

    fn write(&mut self, kind: usize, object: &Value) {
        let yaml = &mut self.yaml[kind];
        yaml.write_all(b"---\n").unwrap();
        serde_saphyr::to_io_writer(yaml, object).unwrap();
        let json = &mut self.json[kind];
        if self.started[kind] {
            json.write_all(b",\n").unwrap();
        }
        self.started[kind] = true;
        let mut text = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        object
            .serialize(&mut serde_json::Serializer::with_formatter(
                &mut text, formatter,
            ))
            .unwrap();
        // Items sit two levels deep in kubectl's List.
        for (n, line) in text.split(|b| *b == b'\n').enumerate() {
            if n > 0 {
                json.write_all(b"\n").unwrap();
            }
            json.write_all(b"        ").unwrap();
            json.write_all(line).unwrap();
        }
    }

    fn finish(mut self) {
        self.finish_json();
        for mut w in self.yaml {
            w.flush().unwrap();
        }
    }
}

fn main() {
    let a = args();
    let mut out = Outputs::create(&a.out);
    for i in 0..a.deployments {
        if i % a.list_deployments == 0 {
            out.next_chunk(i / a.list_deployments + 1);
        }
        let ns = format!("team-{}", i % 100);
        for o in objects(&ns, i, a.revisions, a.template_bytes) {
            let kind = match o["kind"].as_str() {
                Some("Deployment") => 0,
                Some("ReplicaSet") => 1,
                _ => 2,
            };
            out.write(kind, &o);
        }
        for k in 0..a.pods {
            out.write(3, &pod(&ns, i, k, a.revisions, a.template_bytes));
        }
    }
    out.finish();
    for format in ["yaml", "json"] {
        let bytes: u64 = std::fs::read_dir(a.out.join(format))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        println!("{format}_mib={:.1}", bytes as f64 / 1048576.0);
    }
}
