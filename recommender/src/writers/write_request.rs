//! Writes whose response object is not needed: the loop's status patches and checkpoint applies.
//!
//! `kube::Api::patch` and `patch_status` decode the object the API server sends back (a whole VPA, a whole
//! checkpoint with its histograms) into typed values, which the loop then drops: at thousands of writes per
//! loop that decoding was a visible share of the loop's CPU. These functions send the same request (same
//! path, query and body) and check only the outcome: an error status still becomes [`kube::Error::Api`]
//! with the server's `Status`, exactly as through `Api`; a success body is read (so that the connection
//! can be reused) but not parsed.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::core::{NamespaceResourceScope, Request};
use kube::{Client, Resource};
use serde::Serialize;

/// The request `Api::<K>::namespaced(client, namespace)` would send for `patch` (no `subresource`) or
/// `patch_<subresource>`.
fn patch_request<K, P>(
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> Result<http::Request<Vec<u8>>, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
    P: Serialize + Debug,
{
    let request = Request::new(K::url_path(&K::DynamicType::default(), Some(namespace)));
    let mut req = match subresource {
        Some(sub) => request.patch_subresource(sub, name, pp, patch),
        None => request.patch(name, pp, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    // The operation name kube's own methods attach (read by tracing layers).
    req.extensions_mut().insert(match subresource {
        Some("status") => "patch_status",
        Some(_) => "patch_subresource",
        None => "patch",
    });
    Ok(req)
}

/// Sends a PATCH of the namespaced object `name` of kind `K` (or of its `subresource`) and returns only
/// whether it succeeded.
pub async fn patch_discarding<K, P>(
    client: &Client,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    pp: &PatchParams,
    patch: &Patch<P>,
) -> Result<(), kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
    P: Serialize + Debug,
{
    let req = patch_request::<K, P>(namespace, name, subresource, pp, patch)?;
    client.request_text(req).await.map(drop)
}

/// Sends a DELETE of the namespaced object `name` of kind `K` (default options) without decoding the object
/// that comes back (so an object that would not decode, a bad checkpoint, is deleted all the same);
/// `false` when it was already gone (404).
pub async fn delete_discarding<K>(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<bool, kube::Error>
where
    K: Resource<Scope = NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let mut req = Request::new(K::url_path(&K::DynamicType::default(), Some(namespace)))
        .delete(name, &kube::api::DeleteParams::default())
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("delete");
    match client.request_text(req).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailor_crds::{VerticalPodAutoscaler, VerticalPodAutoscalerCheckpoint};

    #[test]
    fn requests_are_the_ones_api_sends() {
        let pp = PatchParams::apply("tailor").force();
        let body = serde_json::json!({"a": 1});
        let req = patch_request::<VerticalPodAutoscalerCheckpoint, _>(
            "ns",
            "cp",
            None,
            &pp,
            &Patch::Apply(&body),
        )
        .unwrap();
        assert_eq!(req.method(), http::Method::PATCH);
        let want = Request::new(VerticalPodAutoscalerCheckpoint::url_path(&(), Some("ns")))
            .patch("cp", &pp, &Patch::Apply(&body))
            .unwrap();
        assert_eq!(req.uri(), want.uri());
        assert_eq!(req.headers(), want.headers());
        assert_eq!(req.body(), want.body());

        let pp = PatchParams::default();
        let req = patch_request::<VerticalPodAutoscaler, _>(
            "ns",
            "v",
            Some("status"),
            &pp,
            &Patch::Merge(&body),
        )
        .unwrap();
        let want = Request::new(VerticalPodAutoscaler::url_path(&(), Some("ns")))
            .patch_subresource("status", "v", &pp, &Patch::Merge(&body))
            .unwrap();
        assert_eq!(req.uri(), want.uri());
        assert_eq!(
            req.uri().path(),
            "/apis/autoscaling.tailor.dev/v1/namespaces/ns/verticalpodautoscalers/v/status"
        );
        assert_eq!(req.body(), want.body());
    }
}
