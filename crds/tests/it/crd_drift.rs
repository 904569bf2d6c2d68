//! The committed CRD YAML (crds/yaml/ and the chart's crds/) must be exactly what the Rust types generate.

use std::path::PathBuf;

use tailor_crds::crd;

#[test]
fn committed_crds_match_the_types() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in ["crds/yaml", "charts/tailor/crds"] {
        for def in crd::crds() {
            let path = root.join(dir).join(crd::file_name(&def));
            let committed = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let generated = crd::to_yaml(&def).expect("render CRD");
            assert!(
                committed == generated,
                "{} is out of date: run `cargo run -p tailor-crds --bin crdgen`",
                path.display()
            );
        }
    }
}

#[test]
fn crds_have_the_upstream_shape() {
    let defs = crd::crds();
    let vpa = &defs[0];
    assert_eq!(
        vpa.metadata.name.as_deref(),
        Some("verticalpodautoscalers.autoscaling.tailor.dev")
    );
    assert_eq!(vpa.spec.scope, "Namespaced");
    assert_eq!(
        vpa.spec.names.short_names.as_deref(),
        Some(&["tvpa".to_string()][..])
    );
    assert_eq!(
        vpa.spec.names.categories.as_deref(),
        Some(&["tailor".to_string()][..])
    );
    let v1 = &vpa.spec.versions[0];
    assert!(v1.served && v1.storage);
    assert!(
        v1.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<&str> = v1
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Mode",
            "CPU",
            "Mem",
            "Provided",
            "Age",
            "MinReplicas",
            "OOMSeconds"
        ]
    );

    let checkpoint = &defs[1];
    assert_eq!(
        checkpoint.spec.names.short_names.as_deref(),
        Some(&["tvpacheckpoint".to_string()][..])
    );
    assert!(checkpoint.spec.versions[0].subresources.is_none());

    let yaml = crd::to_yaml(vpa).unwrap();
    assert!(yaml.contains("(self.type == 'Factor') == has(self.factor)"));
    assert!(yaml.contains("(self.type == 'Quantity') == has(self.quantity)"));
}
