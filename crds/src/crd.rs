//! The CustomResourceDefinitions, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};

/// Both CRDs, VPA first. The checkpoint CRD has no subresources, like upstream's.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut checkpoint = VerticalPodAutoscalerCheckpoint::crd();
    for version in &mut checkpoint.spec.versions {
        version.subresources = None;
    }
    vec![VerticalPodAutoscaler::crd(), checkpoint]
}

/// File name of a CRD in `crds/yaml/` and the chart: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// A CRD as a YAML document.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(crd)
}

/// Both CRDs as one multi-document YAML stream (what `tailor crds` prints).
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
