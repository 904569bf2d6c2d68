//! Standalone mode (`--vpa-dir`): the index's objects — Tailor VPAs, LimitRanges, the well-known workloads
//! and custom controllers with a `spec.selector` standing in for the `/scale` subresource — read from
//! manifest files instead of reflectors, through the shared reader ([`tailor_kube::manifests`]: YAML or
//! JSON, `List`s included, streamed; a directory recursively, in name order). Objects of other kinds (pods,
//! services, upstream `autoscaling.k8s.io` VPAs, …) are skipped and counted.

use std::path::{Path, PathBuf};

use tailor_kube::manifests::index_objects::{IndexObject, ManifestIndex};
use tailor_kube::manifests::{self, Keep, ManifestError, Object, Position, Walk};

/// What was loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The objects for the index.
    pub objects: ManifestIndex,
    /// Files read.
    pub files: usize,
    /// Objects of kinds the index does not use.
    pub skipped: usize,
}

/// What the webhook keeps of one object.
enum Kept {
    Index(Box<IndexObject>),
    Skipped { upstream: bool },
}

impl Keep for Kept {
    fn keep(object: Object) -> Result<Self, String> {
        match IndexObject::of(&object) {
            Some(kept) => kept.map(|o| Kept::Index(Box::new(unversioned(o)))),
            None => Ok(Kept::Skipped {
                upstream: object.group() == tailor_crds::UPSTREAM_GROUP,
            }),
        }
    }
}

/// `o` without the resourceVersion an exported manifest may carry: a file edited without changing it is still
/// a new version, so the webhook's patch memo must tell the reloaded object apart by identity
/// ([`crate::pod::Version`]).
fn unversioned(mut o: IndexObject) -> IndexObject {
    match &mut o {
        IndexObject::Vpa(vpa) => vpa.metadata.resource_version = None,
        IndexObject::LimitRange(lr) => lr.metadata.resource_version = None,
        IndexObject::Workload(..) | IndexObject::Custom { .. } => {}
    }
    o
}

impl Loaded {
    /// Objects kept, all kinds together.
    pub fn count(&self) -> usize {
        self.objects.count()
    }

    fn add(&mut self, file: &Path, at: Position, kept: Kept) {
        match kept {
            Kept::Index(object) => self.objects.add(*object),
            Kept::Skipped { upstream } => {
                if upstream {
                    tracing::warn!(file = %file.display(), at = %at,
                        "upstream autoscaling.k8s.io object ignored (convert it with `tailor convert`)");
                }
                self.skipped += 1;
            }
        }
    }
}

/// Loads every manifest under `dir` (or the single file `dir`).
pub fn load_dir(dir: &Path) -> Result<Loaded, ManifestError> {
    let mut loaded = Loaded::default();
    for path in manifests::manifest_files(&[PathBuf::from(dir)], Walk::Recursive)? {
        manifests::read_file(&path, |at, kept| loaded.add(&path, at, kept))?;
        loaded.files += 1;
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFESTS: &str = r#"
apiVersion: autoscaling.tailor.dev/v1
kind: VerticalPodAutoscaler
metadata: {name: web, namespace: default, resourceVersion: "41"}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: LimitRange
    metadata: {name: lr, namespace: default, resourceVersion: "7"}
    spec: {limits: [{type: Container, max: {cpu: "2"}}]}
  - apiVersion: v1
    kind: Service
    metadata: {name: web, namespace: default}
---
apiVersion: autoscaling.k8s.io/v1
kind: VerticalPodAutoscaler
metadata: {name: upstream, namespace: default}
---
"#;

    fn load_text(name: &str, text: &str) -> Result<Loaded, ManifestError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), text).unwrap();
        load_dir(dir.path())
    }

    #[test]
    fn loads_multi_document_files_and_lists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/all.yaml"), MANIFESTS).unwrap();
        std::fs::write(dir.path().join("README.md"), "not a manifest").unwrap();
        let loaded = load_dir(dir.path()).unwrap();
        assert_eq!(loaded.files, 1);
        assert_eq!(loaded.objects.vpas().len(), 1);
        assert_eq!(loaded.objects.limit_ranges().len(), 1);
        assert_eq!(loaded.skipped, 2);
        // A file's resourceVersion says nothing about its content: dropped (the patch memo goes by identity).
        assert_eq!(loaded.objects.vpas()[0].metadata.resource_version, None);
        assert_eq!(
            loaded.objects.limit_ranges()[0].metadata.resource_version,
            None
        );
        // The VPA, the LimitRange and the Deployment.
        assert_eq!(loaded.count(), 3);
    }

    #[test]
    fn a_yaml_stream_of_json_documents_loads() {
        let text = "{\"apiVersion\": \"autoscaling.tailor.dev/v1\", \"kind\": \"VerticalPodAutoscaler\",\n \"metadata\": {\"name\": \"web\", \"namespace\": \"default\"},\n \"spec\": {\"targetRef\": {\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"name\": \"web\"}}}\n---\n{\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"metadata\": {\"name\": \"web\", \"namespace\": \"default\"},\n \"spec\": {\"selector\": {\"matchLabels\": {\"app\": \"web\"}}}}\n";
        let loaded = load_text("all.json", text).unwrap();
        assert_eq!(loaded.objects.vpas().len(), 1);
        assert_eq!(loaded.count(), 2);
    }

    #[test]
    fn custom_kinds_with_a_selector_stand_in_for_scale() {
        let text = r#"
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  namespace: shop
  ownerReferences: [{apiVersion: example.com/v1, kind: WidgetSet, name: ws, uid: "1", controller: true}]
spec: {selector: "app=w,tier in (a,b)"}
---
apiVersion: example.com/v1
kind: Gadget
metadata: {name: g, namespace: shop}
spec: {selector: 42}
"#;
        let loaded = load_text("custom.yaml", text).unwrap();
        let scale = &loaded.objects.scale().objects;
        assert_eq!(scale.len(), 2, "{scale:?}");
        assert_eq!(loaded.skipped, 1);
        let rollout = &scale[&("Rollout".into(), "shop".into(), "web".into())];
        assert_eq!(
            rollout
                .selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some([("app".to_owned(), "web".to_owned())].into())
        );
        assert!(rollout.owner.is_none());
        let widget = &scale[&("Widget".into(), "shop".into(), "w".into())];
        assert_eq!(widget.owner.as_ref().map(|o| o.name.as_str()), Some("ws"));
        let expressions = widget
            .selector
            .as_ref()
            .and_then(|s| s.match_expressions.clone())
            .unwrap_or_default();
        assert_eq!(expressions.len(), 2);
        assert_eq!(expressions[1].operator, "In");
    }

    #[test]
    fn errors_name_the_file_and_document() {
        let dir = tempfile::tempdir().unwrap();
        let bad = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: e}\nspec: {replicas: many}\n";
        std::fs::write(dir.path().join("bad.yaml"), bad).unwrap();
        let err = load_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("bad.yaml") && err.contains("document 2") && err.contains("\"e\""),
            "{err}"
        );
        std::fs::write(dir.path().join("bad.yaml"), "a: [").unwrap();
        assert!(
            load_dir(dir.path())
                .unwrap_err()
                .to_string()
                .contains("invalid YAML")
        );
    }
}
