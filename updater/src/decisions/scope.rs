//! Which pods the webhook sizes, as the chart registers it (docs/decisions/webhook-scope.md): the updater
//! disrupts only those. A pod the webhook never sees comes back from an eviction with its old requests and is
//! evicted again, forever; so the updater leaves alone the namespaces the webhook configuration excludes (the
//! release namespace, `kube-system`, `admission.webhook.excludeNamespaces`) and the pods its `objectSelector`
//! does not select, and says why.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Longest `--webhook-object-selector` text read.
pub const MAX_SELECTOR_JSON: usize = 16 * 1024;
/// Most namespaces in `--webhook-excluded-namespaces`.
pub const MAX_EXCLUDED_NAMESPACES: usize = 1_000;

/// The pods the webhook is registered for. The default (nothing excluded, every pod selected) is upstream's
/// updater, which does not look.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WebhookScope {
    /// Namespaces the webhook configuration excludes.
    pub excluded_namespaces: Vec<String>,
    /// The webhook's `objectSelector` (`None`: every pod).
    pub object_selector: Option<LabelSelector>,
    /// The webhook's extra `namespaceSelector` terms (`None`: every namespace not excluded), evaluated on
    /// the namespace's labels.
    pub namespace_selector: Option<LabelSelector>,
}

/// A bad `--webhook-*` flag.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// The object selector is not a JSON label selector.
    #[error("--webhook-object-selector: {0}")]
    Selector(String),
    /// Too many namespaces.
    #[error("--webhook-excluded-namespaces: more than {MAX_EXCLUDED_NAMESPACES} namespaces")]
    TooManyNamespaces,
}

/// Comma-separated namespace names (blanks ignored), at most [`MAX_EXCLUDED_NAMESPACES`].
pub fn parse_namespaces(text: &str) -> Result<Vec<String>, ScopeError> {
    let excluded: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if excluded.len() > MAX_EXCLUDED_NAMESPACES {
        return Err(ScopeError::TooManyNamespaces);
    }
    Ok(excluded)
}

/// A label selector as JSON; `None` for an empty text or a selector that selects everything. A selector
/// that cannot be evaluated is refused (not read as "no pod").
pub fn parse_selector(text: &str) -> Result<Option<LabelSelector>, ScopeError> {
    let text = text.trim();
    if text.len() > MAX_SELECTOR_JSON {
        return Err(ScopeError::Selector(format!(
            "longer than {MAX_SELECTOR_JSON} bytes"
        )));
    }
    if text.is_empty() {
        return Ok(None);
    }
    let selector: LabelSelector =
        serde_json::from_str(text).map_err(|e| ScopeError::Selector(e.to_string()))?;
    tailor_core::target::selector_matches(&selector, &BTreeMap::new())
        .map_err(|e| ScopeError::Selector(e.to_string()))?;
    Ok(non_empty(selector))
}

/// The name the chart gives Tailor's pod webhook in its MutatingWebhookConfiguration.
pub const POD_WEBHOOK_NAME: &str = "pods.admission.tailor.dev";
/// The namespace label the API server sets on every namespace, which the chart's exclusions use.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A selector that selects everything is no selector.
fn non_empty(selector: LabelSelector) -> Option<LabelSelector> {
    let empty = selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty);
    (!empty).then_some(selector)
}

impl WebhookScope {
    /// The scope of a registered pod webhook: its `namespaceSelector`'s `kubernetes.io/metadata.name NotIn`
    /// terms are the excluded namespaces (at most [`MAX_EXCLUDED_NAMESPACES`]), its other terms the namespace
    /// selector, its `objectSelector` the object selector. What `tailor plan` reads from a snapshot holding
    /// the configuration, so that it plans for the webhook as registered without the chart's flags.
    pub fn of_webhook(
        webhook: &k8s_openapi::api::admissionregistration::v1::MutatingWebhook,
    ) -> WebhookScope {
        let mut excluded = Vec::new();
        let namespace_selector = webhook.namespace_selector.clone().and_then(|mut s| {
            if let Some(terms) = s.match_expressions.as_mut() {
                terms.retain(|t| {
                    let exclusion = t.key == NAMESPACE_NAME_LABEL && t.operator == "NotIn";
                    if exclusion {
                        excluded.extend(t.values.iter().flatten().cloned());
                    }
                    !exclusion
                });
            }
            non_empty(s)
        });
        excluded.truncate(MAX_EXCLUDED_NAMESPACES);
        WebhookScope {
            excluded_namespaces: excluded,
            object_selector: webhook.object_selector.clone().and_then(non_empty),
            namespace_selector,
        }
    }

    /// The scope from the flags' texts: comma-separated namespaces, and a label selector as JSON (the
    /// chart renders `admission.webhook.objectSelector` with `toJson`; empty or `{}`: every pod).
    pub fn parse(excluded_namespaces: &str, object_selector: &str) -> Result<Self, ScopeError> {
        Ok(WebhookScope {
            excluded_namespaces: parse_namespaces(excluded_namespaces)?,
            object_selector: parse_selector(object_selector)?,
            namespace_selector: None,
        })
    }

    /// Why the webhook never sees pods of `namespace`, if it does not. `labels` are the namespace's (`None`:
    /// not known, which only matters with a namespace selector: then the namespace is left alone too).
    pub fn namespace_excluded(
        &self,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Option<String> {
        if self.excluded_namespaces.iter().any(|n| n == namespace) {
            return Some(format!("the webhook does not serve namespace {namespace}"));
        }
        let selector = self.namespace_selector.as_ref()?;
        let Some(labels) = labels else {
            return Some(format!(
                "the labels of namespace {namespace} are not known, and the webhook selects namespaces by label"
            ));
        };
        match tailor_core::target::selector_matches(selector, labels) {
            Ok(true) => None,
            Ok(false) => Some(format!(
                "the webhook's namespaceSelector does not select namespace {namespace}"
            )),
            Err(e) => Some(format!("the webhook's namespaceSelector: {e}")),
        }
    }

    /// Whether the namespace labels are needed (a namespace selector is set).
    pub fn needs_namespace_labels(&self) -> bool {
        self.namespace_selector.is_some()
    }

    /// Why the webhook never sees a pod with `labels`, if it does not (its `objectSelector`).
    pub fn pod_excluded(&self, labels: &BTreeMap<String, String>) -> Option<String> {
        let selector = self.object_selector.as_ref()?;
        match tailor_core::target::selector_matches(selector, labels) {
            Ok(true) => None,
            Ok(false) => Some("the webhook's objectSelector does not select the pod".into()),
            Err(e) => Some(format!("the webhook's objectSelector: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excluded_namespaces_and_the_object_selector_are_read_from_the_flags() {
        let scope = WebhookScope::parse(
            "tailor, kube-system,,",
            r#"{"matchExpressions":[{"key":"tailor.dev/skip","operator":"DoesNotExist"}]}"#,
        )
        .expect("scope");
        assert_eq!(scope.excluded_namespaces, ["tailor", "kube-system"]);
        assert!(scope.namespace_excluded("kube-system", None).is_some());
        assert!(scope.namespace_excluded("shop", None).is_none());
        let plain = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let skipped = BTreeMap::from([("tailor.dev/skip".to_owned(), "1".to_owned())]);
        assert_eq!(scope.pod_excluded(&plain), None);
        assert!(scope.pod_excluded(&skipped).is_some());
    }

    #[test]
    fn a_namespace_selector_is_evaluated_on_the_namespace_labels() {
        let scope = WebhookScope {
            namespace_selector: parse_selector(r#"{"matchLabels":{"tailor.dev/enabled":"true"}}"#)
                .expect("selector"),
            ..WebhookScope::default()
        };
        let on = BTreeMap::from([("tailor.dev/enabled".to_owned(), "true".to_owned())]);
        assert_eq!(scope.namespace_excluded("shop", Some(&on)), None);
        let off = BTreeMap::new();
        let why = scope
            .namespace_excluded("shop", Some(&off))
            .expect("excluded");
        assert!(why.contains("namespaceSelector"), "{why}");
        // Unknown labels: left alone.
        assert!(scope.namespace_excluded("shop", None).is_some());
    }

    #[test]
    fn an_empty_selector_selects_every_pod_and_a_broken_one_is_refused() {
        let scope = WebhookScope::parse("", "{}").expect("scope");
        assert_eq!(scope, WebhookScope::default());
        assert!(WebhookScope::parse("", "app=web").is_err());
        assert!(
            WebhookScope::parse(
                "",
                r#"{"matchExpressions":[{"key":"a","operator":"In","values":[]}]}"#
            )
            .is_err()
        );
    }
}

#[cfg(test)]
mod webhook_tests {
    use super::*;

    #[test]
    fn the_scope_of_the_charts_pod_webhook() {
        let webhook: k8s_openapi::api::admissionregistration::v1::MutatingWebhook =
            serde_json::from_value(serde_json::json!({
                "name": POD_WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"service": {"namespace": "tailor", "name": "tailor-admission"}},
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["tailor", "kube-system"]},
                    {"key": "team", "operator": "In", "values": ["shop"]}
                ]},
                "objectSelector": {"matchLabels": {"sized": "yes"}}
            }))
            .unwrap();
        let scope = WebhookScope::of_webhook(&webhook);
        assert_eq!(scope.excluded_namespaces, ["tailor", "kube-system"]);
        assert!(scope.namespace_excluded("kube-system", None).is_some());
        let shop: BTreeMap<String, String> = [("team".to_string(), "shop".to_string())].into();
        assert_eq!(scope.namespace_excluded("web", Some(&shop)), None);
        assert!(
            scope
                .namespace_excluded("web", Some(&BTreeMap::new()))
                .is_some()
        );
        assert!(scope.pod_excluded(&BTreeMap::new()).is_some());
        // Only the chart's exclusions: no namespace selector is left.
        let plain: k8s_openapi::api::admissionregistration::v1::MutatingWebhook =
            serde_json::from_value(serde_json::json!({
                "name": POD_WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "clientConfig": {"url": "https://x"},
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["tailor"]}
                ]},
                "objectSelector": {}
            }))
            .unwrap();
        let scope = WebhookScope::of_webhook(&plain);
        assert_eq!(scope.namespace_selector, None);
        assert_eq!(scope.object_selector, None);
        assert!(!scope.needs_namespace_labels());
    }
}
