//! The `/scale` lookup for targets of kinds outside the well-known set (Argo Rollouts, custom controllers):
//! API discovery finds the resource, then `status.selector` of its scale subresource is the pod selector.

use kube::api::{Api, DynamicObject, GroupVersionKind};
use kube::{Client, discovery};

use crate::index::ScaleInfo;
use tailor_core::target::controller_owner;

/// Why a target's `/scale` selector could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// Discovery does not know the kind: the API server serves no such group, version or kind. Said as the
    /// API server's REST mapper says it (upstream's message), not as the HTTP error discovery met.
    #[error("no matches for kind {kind:?} in group {group:?}")]
    UnknownKind {
        /// The target's kind.
        kind: String,
        /// The target's API group (empty for the core group).
        group: String,
    },
    /// Discovery failed.
    #[error("{target}: {source}")]
    Discovery {
        /// `Kind namespace/name`.
        target: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The resource cannot be read (no `get` verb).
    #[error("{kind} cannot be read")]
    NotReadable {
        /// The target's kind.
        kind: String,
    },
    /// The scale subresource could not be read.
    #[error("{target}: {source}")]
    Get {
        /// `Kind namespace/name`.
        target: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The scale subresource has no `status.selector`.
    #[error("{target} has no selector in its scale subresource")]
    NoSelector {
        /// `Kind namespace/name`.
        target: String,
    },
}

async fn scale_of(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<k8s_openapi::api::autoscaling::v1::Scale, ScaleError> {
    let target = || format!("{kind} {namespace}/{name}");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|source| {
            if absent(&source) {
                ScaleError::UnknownKind {
                    kind: kind.into(),
                    group: group.into(),
                }
            } else {
                ScaleError::Discovery {
                    target: target(),
                    source,
                }
            }
        })?;
    if !caps.supports_operation(discovery::verbs::GET) {
        return Err(ScaleError::NotReadable { kind: kind.into() });
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.get_scale(name).await.map_err(|source| ScaleError::Get {
        target: target(),
        source,
    })
}

/// Reads `status.selector` of the `/scale` subresource of `kind` `namespace/name` in `api_version`.
pub async fn scale_selector(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<String, ScaleError> {
    let target = || format!("{kind} {namespace}/{name}");
    scale_of(client, api_version, kind, namespace, name)
        .await?
        .status
        .and_then(|s| s.selector)
        .ok_or_else(|| ScaleError::NoSelector { target: target() })
}

/// Reads `spec.replicas` of the `/scale` subresource of `kind` `namespace/name` in `api_version` (0 when
/// unset).
pub async fn scale_replicas(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<i32, ScaleError> {
    Ok(scale_of(client, api_version, kind, namespace, name)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(0))
}

/// Whether a client error says that what was asked for does not exist (rather than a failure worth retrying).
fn absent(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 404,
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

impl ScaleError {
    /// Whether the target has no readable `/scale` subresource (its kind is unknown to discovery, cannot be
    /// read, or the object or subresource does not exist) rather than a failure worth retrying.
    pub fn is_absent(&self) -> bool {
        match self {
            ScaleError::Discovery { source, .. } | ScaleError::Get { source, .. } => absent(source),
            ScaleError::UnknownKind { .. }
            | ScaleError::NotReadable { .. }
            | ScaleError::NoSelector { .. } => true,
        }
    }
}

/// What the index needs of a controller of another kind: the controller owner and selector of its `/scale`
/// subresource (upstream reads the owner from the scale object's metadata too). A selector text that does not
/// parse leaves the selector unset.
pub async fn scale_info(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<ScaleInfo, ScaleError> {
    let scale = scale_of(client, api_version, kind, namespace, name).await?;
    let selector = match scale.status.and_then(|s| s.selector) {
        Some(text) => match tailor_core::label_selector::parse(&text) {
            Ok(selector) => Some(selector),
            Err(e) => {
                tracing::warn!(target = %format!("{kind} {namespace}/{name}"), error = %e, "unusable /scale selector");
                None
            }
        },
        None => None,
    };
    Ok(ScaleInfo {
        owner: controller_owner(scale.metadata.owner_references.as_ref()).cloned(),
        selector,
    })
}

/// What an object of a custom kind (any API group but the core one) that selects pods through
/// `spec.selector` — a label selector object as Argo Rollouts have, or its text form — tells in place of its
/// `/scale` subresource: the selector and the object's controller owner. For manifests and snapshots read
/// without a cluster.
pub fn custom_controller(object: &serde_json::Value) -> Option<ScaleInfo> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
    use serde_json::Value;
    let api_version = object.get("apiVersion").and_then(Value::as_str)?;
    if !api_version.contains('/') {
        return None; // the core group has no custom kinds
    }
    let selector = match object.pointer("/spec/selector")? {
        Value::String(text) => tailor_core::label_selector::parse(text).ok()?,
        selector @ Value::Object(_) => {
            serde_json::from_value::<LabelSelector>(selector.clone()).ok()?
        }
        _ => return None,
    };
    let owners: Option<Vec<OwnerReference>> = object
        .pointer("/metadata/ownerReferences")
        .and_then(|o| serde_json::from_value(o.clone()).ok());
    Some(ScaleInfo {
        owner: controller_owner(owners.as_ref()).cloned(),
        selector: Some(selector),
    })
}

/// The key a [`StaticScaleLookup`](crate::index::StaticScaleLookup) files `object` under: kind,
/// namespace, name.
pub fn static_key(object: &serde_json::Value) -> (String, String, String) {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}
