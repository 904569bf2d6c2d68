//! Admission of Tailor VPA objects (docs/design/upstream-admission.md §4): decode, validate with `tailor-core`,
//! reject like the API server's `NewInvalid`, default `spec.updatePolicy`.

use json_patch::Patch;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::Status;
use kube::core::admission::Operation;
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use serde_json::json;
use serde_json::value::RawValue;
use tailor_core::text::cut;
use tailor_core::validation::{
    ErrorKind, FeatureGates, FieldError, MAX_ERROR_TEXT, MAX_LISTED_ERRORS, ValidationOptions,
    default_update_policy, invalid_message, needs_update_policy_default, validate, validate_status,
};
use tailor_crds::{ResourceList, VerticalPodAutoscaler};

use crate::review::{Response, Review};
use tailor_core::quantity::Amount;
use tailor_core::sizing::add_op;

/// Kind used in rejection messages when the request does not name one.
const DEFAULT_KIND: &str = "VerticalPodAutoscaler";

/// Go's message for a string that is not a quantity.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// What happened to a VPA review (for metrics and logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VpaOutcome {
    /// Accepted; `defaulted` when the `updatePolicy` default was added.
    Accepted {
        /// Whether a defaulting patch was returned.
        defaulted: bool,
    },
    /// Rejected with this message.
    Denied(String),
}

/// Why the object in a request could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

fn quantity_error(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut i = usize::from(matches!(bytes.first(), Some(b'+') | Some(b'-')));
    let digits_start = i;
    while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
        i += 1;
    }
    let has_digits = i > digits_start;
    while i < bytes.len() && b"eEinumkKMGTP".contains(&bytes[i]) {
        i += 1;
    }
    if i < bytes.len() && matches!(bytes[i], b'+' | b'-') {
        i += 1;
    }
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    if has_digits && i == bytes.len() {
        "unable to parse quantity's suffix".into()
    } else {
        QUANTITY_FORMAT.into()
    }
}

fn check(q: &Quantity) -> Result<(), DecodeError> {
    Amount::parse(q)
        .map(|_| ())
        .map_err(|_| DecodeError(quantity_error(&q.0)))
}

fn check_list(list: Option<&ResourceList>) -> Result<(), DecodeError> {
    list.into_iter().flatten().try_for_each(|(_, q)| check(q))
}

/// Every quantity in the object must parse, as Go's decoder requires.
fn check_quantities(vpa: &VerticalPodAutoscaler) -> Result<(), DecodeError> {
    let boost_quantity = |b: Option<&tailor_crds::StartupBoost>| {
        b.and_then(|b| b.cpu.as_ref())
            .and_then(|c| c.quantity.as_ref())
            .map_or(Ok(()), check)
    };
    boost_quantity(vpa.spec.startup_boost.as_ref())?;
    for p in vpa
        .spec
        .resource_policy
        .iter()
        .flat_map(|p| p.container_policies.iter().flatten())
    {
        check_list(p.min_allowed.as_ref())?;
        check_list(p.max_allowed.as_ref())?;
        p.oom_bump_up_ratio.as_ref().map_or(Ok(()), check)?;
        p.oom_min_bump_up.as_ref().map_or(Ok(()), check)?;
        boost_quantity(p.startup_boost.as_ref())?;
    }
    for r in vpa
        .status
        .iter()
        .filter_map(|s| s.recommendation.as_ref())
        .flat_map(|r| r.container_recommendations.iter().flatten())
    {
        check_list(Some(&r.target))?;
        check_list(r.lower_bound.as_ref())?;
        check_list(r.upper_bound.as_ref())?;
        check_list(r.uncapped_target.as_ref())?;
    }
    Ok(())
}

/// Decodes the object of a request into a Tailor VPA (whatever its `apiVersion` says), with Go's quantity
/// checks.
fn decode_object(object: Option<&RawValue>) -> Result<VerticalPodAutoscaler, DecodeError> {
    let object = object.ok_or_else(|| DecodeError("request has no object".into()))?;
    let vpa: VerticalPodAutoscaler =
        serde_json::from_str(object.get()).map_err(|e| DecodeError(e.to_string()))?;
    check_quantities(&vpa)?;
    Ok(vpa)
}

fn cause_type(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Required(_) => "FieldValueRequired",
        ErrorKind::Invalid(..) => "FieldValueInvalid",
        ErrorKind::Unsupported(..) => "FieldValueNotSupported",
        ErrorKind::Forbidden(_) => "FieldValueForbidden",
        ErrorKind::TooMany(..) => "FieldValueTooMany",
    }
}

/// The rejection `Status` for validation errors, like the API server's `NewInvalid`.
pub fn invalid_status(kind: &str, name: &str, errors: &[FieldError]) -> Status {
    // At most MAX_LISTED_ERRORS causes, each cut to MAX_ERROR_TEXT; the message counts the rest.
    let causes = errors
        .iter()
        .take(MAX_LISTED_ERRORS)
        .map(|e| {
            let full = e.to_string();
            let prefix = format!("{}: ", e.field);
            StatusCause {
                reason: cause_type(&e.kind).into(),
                message: cut(full.strip_prefix(&prefix).unwrap_or(&full), MAX_ERROR_TEXT),
                field: cut(&e.field, MAX_ERROR_TEXT),
            }
        })
        .collect();
    rejection(kind, name, invalid_message(kind, name, errors), causes)
}

/// The rejection `Status` for an object that cannot be decoded (`.: Internal error: <msg>`).
pub fn internal_error_status(kind: &str, name: &str, message: &str) -> Status {
    let detail = format!("Internal error: {}", cut(message, MAX_ERROR_TEXT));
    let text = format!(
        "{kind}.{} {:?} is invalid: .: {detail}",
        tailor_crds::GROUP,
        cut(name, MAX_ERROR_TEXT)
    );
    let causes = vec![StatusCause {
        reason: "InternalError".into(),
        message: detail,
        field: ".".into(),
    }];
    rejection(kind, name, text, causes)
}

fn rejection(kind: &str, name: &str, message: String, causes: Vec<StatusCause>) -> Status {
    Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        message,
        metadata: None,
        reason: "Invalid".into(),
        details: Some(StatusDetails {
            name: name.to_owned(),
            group: tailor_crds::GROUP.to_owned(),
            kind: kind.to_owned(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        }),
    }
}

fn deny(
    req: &crate::review::Request<'_>,
    status: Status,
    warnings: Vec<String>,
) -> (Response, VpaOutcome) {
    let message = status.message.clone();
    let mut response = req.response();
    response.allowed = false;
    response.result = status;
    if !warnings.is_empty() {
        response.warnings = Some(bounded_warnings(warnings));
    }
    (response, VpaOutcome::Denied(message))
}

/// At most [`MAX_LISTED_ERRORS`] warnings, each cut to [`MAX_ERROR_TEXT`], the rest counted in a last one.
fn bounded_warnings(warnings: Vec<String>) -> Vec<String> {
    let total = warnings.len();
    let mut out: Vec<String> = warnings
        .into_iter()
        .take(MAX_LISTED_ERRORS)
        .map(|w| cut(&w, MAX_ERROR_TEXT))
        .collect();
    if total > MAX_LISTED_ERRORS {
        out.push(format!("and {} more warnings", total - MAX_LISTED_ERRORS));
    }
    out
}

/// The defaulting patch for a VPA without `spec.updatePolicy`.
pub fn defaulting_patch(vpa: &VerticalPodAutoscaler) -> Option<Patch> {
    needs_update_policy_default(&vpa.spec).then(|| {
        let value = serde_json::to_value(default_update_policy())
            .unwrap_or_else(|_| json!({"updateMode": "Recreate"}));
        Patch(vec![add_op("/spec/updatePolicy", value)])
    })
}

/// Reviews a Tailor VPA `CREATE`/`UPDATE` or status write (docs/design/upstream-admission.md §4.1): denies
/// undecodable, oversized or invalid objects, returns warnings, and defaults `spec.updatePolicy`.
pub fn review_vpa(review: &Review<'_>, gates: FeatureGates) -> (Response, VpaOutcome) {
    let req = &review.request;
    let kind = req
        .request_kind
        .as_ref()
        .map(|k| k.kind.to_string())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| DEFAULT_KIND.to_owned());
    // List lengths first, on the raw text: a list of a million entries is refused before it is decoded.
    if let Some(raw) = review.object {
        match crate::review_budgets::check_vpa(raw) {
            Ok(errors) if !errors.is_empty() => {
                return deny(req, invalid_status(&kind, &req.name, &errors), Vec::new());
            }
            Ok(_) => {}
            Err(e) => {
                return deny(
                    req,
                    internal_error_status(&kind, &req.name, &e.to_string()),
                    Vec::new(),
                );
            }
        }
    }
    let vpa = match decode_object(review.object) {
        Ok(vpa) => vpa,
        Err(e) => {
            return deny(
                req,
                internal_error_status(&kind, &req.name, &e.0),
                Vec::new(),
            );
        }
    };
    let old = if req.operation == Operation::Update {
        match decode_object(review.old_object) {
            Ok(old) => Some(old),
            Err(e) => {
                return deny(
                    req,
                    internal_error_status(&kind, &req.name, &e.0),
                    Vec::new(),
                );
            }
        }
    } else {
        None
    };
    // The spec is validated on writes of the object; a write of the status subresource (when a configuration
    // routes one here) is judged by its status alone, so that a spec admitted while the webhook was away never
    // freezes the recommender's status writes. The chart's configuration, like upstream's, sends no status
    // writes at all.
    let validation = if req.sub_resource.as_deref() == Some("status") {
        vpa.status.as_ref().map(validate_status).unwrap_or_default()
    } else {
        let options = ValidationOptions::new(gates, old.as_ref().map(|o| &o.spec));
        validate(&vpa.spec, &options)
    };
    if !validation.is_valid() {
        return deny(
            req,
            invalid_status(&kind, &req.name, &validation.errors),
            validation.warnings,
        );
    }
    let mut warnings = validation.warnings;
    // Tailor's limit policy (docs/limit-policy.md): a value that does not parse is not refused (the pods keep
    // their ratio, and the webhook and the updater report it), but the writer hears of it at once.
    if req.sub_resource.is_none()
        && let Err(e) = tailor_core::sizing::LimitPolicy::of(&vpa)
    {
        warnings.push(format!(
            "{e}; pods keep their limit/request ratio until it is fixed"
        ));
    }
    let mut response = req.response();
    if !warnings.is_empty() {
        response.warnings = Some(bounded_warnings(warnings));
    }
    let mut defaulted = false;
    let status_write = req.sub_resource.is_some();
    if let Some(patch) = defaulting_patch(&vpa).filter(|_| !status_write) {
        match response.clone().with_patch(patch) {
            Ok(r) => {
                response = r;
                defaulted = true;
            }
            // Serialising a fixed patch cannot fail; admit without the default if it ever does.
            Err(_) => defaulted = false,
        }
    }
    (response, VpaOutcome::Accepted { defaulted })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use tailor_testkit::fixtures::VpaFixture;

    /// The review body the API server would send.
    fn request_value(operation: &str, object: Value, old: Option<Value>) -> Value {
        let mut req = json!({
            "uid": "u1",
            "kind": {"group": "autoscaling.tailor.dev", "version": "v1", "kind": "VerticalPodAutoscaler"},
            "resource": {"group": "autoscaling.tailor.dev", "version": "v1", "resource": "verticalpodautoscalers"},
            "requestKind": {"group": "autoscaling.tailor.dev", "version": "v1", "kind": "VerticalPodAutoscaler"},
            "name": "web", "namespace": "default", "operation": operation, "userInfo": {}, "object": object
        });
        if let Some(old) = old {
            req["oldObject"] = old;
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
    }

    fn request(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        serde_json::to_vec(&request_value(operation, object, old)).unwrap()
    }

    fn review(body: &[u8], gates: FeatureGates) -> (Response, VpaOutcome) {
        review_vpa(&crate::review::decode(body).unwrap(), gates)
    }

    fn vpa(spec: Value) -> Value {
        VpaFixture::new("default", "web").spec(spec).json()
    }

    fn target() -> Value {
        json!({"kind": "Deployment", "name": "web"})
    }

    #[test]
    fn missing_update_policy_is_defaulted() {
        let req = request("CREATE", vpa(json!({"targetRef": target()})), None);
        let (resp, outcome) = review(&req, FeatureGates::default());
        assert!(resp.allowed);
        assert_eq!(outcome, VpaOutcome::Accepted { defaulted: true });
        let patch: Value =
            serde_json::from_slice(&resp.patch.as_ref().unwrap().json().unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/updatePolicy", "value": {"updateMode": "Recreate"}}])
        );
    }

    #[test]
    fn a_limit_policy_that_does_not_parse_is_admitted_with_a_warning() {
        let spec = json!({"targetRef": target(), "updatePolicy": {"updateMode": "Recreate"}});
        let mut object = vpa(spec);
        object["metadata"]["annotations"] =
            json!({"tailor.dev/limit-policy": "cpu=unset,gpu=unset"});
        let (resp, outcome) = review(
            &request("CREATE", object.clone(), None),
            FeatureGates::default(),
        );
        assert!(resp.allowed);
        assert_eq!(outcome, VpaOutcome::Accepted { defaulted: false });
        assert_eq!(
            resp.warnings,
            Some(vec![
                "annotation tailor.dev/limit-policy, entry 2 \"gpu=unset\": resource \"gpu\" is not cpu or \
                 memory; pods keep their limit/request ratio until it is fixed"
                    .to_owned()
            ])
        );
        object["metadata"]["annotations"] = json!({"tailor.dev/limit-policy": "cpu=unset"});
        let (resp, _) = review(&request("CREATE", object, None), FeatureGates::default());
        assert_eq!(resp.warnings, None);
    }

    #[test]
    fn invalid_object_is_rejected_like_new_invalid() {
        let spec = json!({"targetRef": target(), "updatePolicy": {"updateMode": "Auto", "minReplicas": 0}});
        let (resp, outcome) = review(&request("CREATE", vpa(spec), None), FeatureGates::default());
        assert!(!resp.allowed);
        assert!(matches!(outcome, VpaOutcome::Denied(_)));
        let status = &resp.result;
        assert_eq!(status.code, 422);
        assert_eq!(status.reason, "Invalid");
        assert_eq!(
            status.message,
            "VerticalPodAutoscaler.autoscaling.tailor.dev \"web\" is invalid: \
             spec.updatePolicy.minReplicas: Invalid value: 0: minReplicas has to be positive"
        );
        let details = status.details.as_ref().unwrap();
        assert_eq!(details.group, "autoscaling.tailor.dev");
        assert_eq!(details.kind, "VerticalPodAutoscaler");
        assert_eq!(details.causes.len(), 1);
        assert_eq!(details.causes[0].field, "spec.updatePolicy.minReplicas");
        assert_eq!(details.causes[0].reason, "FieldValueInvalid");
        // The deprecation warning of mode Auto still reaches the client.
        assert_eq!(resp.warnings.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn undecodable_quantity_is_an_internal_error() {
        let spec = json!({"targetRef": target(), "updatePolicy": {"updateMode": "Auto"},
            "resourcePolicy": {"containerPolicies": [{"containerName": "*", "oomBumpUpRatio": "not-a-number"}]}});
        let (resp, _) = review(&request("CREATE", vpa(spec), None), FeatureGates::default());
        assert!(!resp.allowed);
        assert_eq!(
            resp.result.message,
            format!(
                "VerticalPodAutoscaler.autoscaling.tailor.dev \"web\" is invalid: .: Internal error: {QUANTITY_FORMAT}"
            )
        );
    }

    #[test]
    fn update_ratchets_gated_fields() {
        let spec = json!({"targetRef": target(), "updatePolicy": {"updateMode": "Recreate", "evictAfterOOMSeconds": 60}});
        let create = request("CREATE", vpa(spec.clone()), None);
        assert!(!review(&create, FeatureGates::default()).0.allowed);
        let update = request("UPDATE", vpa(spec.clone()), Some(vpa(spec)));
        let (resp, outcome) = review(&update, FeatureGates::default());
        assert!(resp.allowed, "{}", resp.result.message);
        assert_eq!(outcome, VpaOutcome::Accepted { defaulted: false });
        assert!(resp.patch.is_none());
    }

    #[test]
    fn numbers_are_quantities() {
        let spec = json!({"targetRef": target(), "updatePolicy": {"updateMode": "Recreate"},
            "resourcePolicy": {"containerPolicies": [{"containerName": "*", "minAllowed": {"memory": 104857600}}]}});
        assert!(
            review(&request("CREATE", vpa(spec), None), FeatureGates::default())
                .0
                .allowed
        );
    }

    #[test]
    fn status_writes_with_negative_recommendations_are_refused() {
        let spec = json!({"targetRef": target()});
        let with_status = |cpu: &str| {
            let mut v = vpa(spec.clone());
            v["status"] = json!({"recommendation": {"containerRecommendations": [
                {"containerName": "app", "target": {"cpu": cpu, "memory": "100Mi"}}]}});
            v
        };
        let status_update = |cpu: &str| {
            let mut req = request_value("UPDATE", with_status(cpu), Some(with_status("1")));
            req["request"]["subResource"] = json!("status");
            review(&serde_json::to_vec(&req).unwrap(), FeatureGates::default())
        };
        let (resp, _) = status_update("-1");
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains(
                "status.recommendation.containerRecommendations[0].target.cpu: Invalid value: \"-1\": must be greater than or equal to 0"
            ),
            "{}",
            resp.result.message
        );
        let (resp, outcome) = status_update("250m");
        assert!(resp.allowed, "{}", resp.result.message);
        // A status write is never given the spec's defaulting patch.
        assert_eq!(outcome, VpaOutcome::Accepted { defaulted: false });
        // Writes to the main resource ignore status, as the API server does.
        let (resp, _) = review(
            &request("UPDATE", with_status("-1"), Some(with_status("1"))),
            FeatureGates::default(),
        );
        assert!(resp.allowed);
    }

    /// A spec the webhook would refuse (applied while it was down) does not stop the recommender's status
    /// writes: a status write is judged by its status alone.
    #[test]
    fn a_status_write_is_not_refused_for_the_spec() {
        let spec = json!({"targetRef": target(), "resourcePolicy": {"containerPolicies": [
            {"containerName": "app", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}}]}});
        let mut object = vpa(spec);
        object["status"] = json!({"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "1", "memory": "100Mi"}}]}});
        let mut req = request_value("UPDATE", object.clone(), Some(object.clone()));
        req["request"]["subResource"] = json!("status");
        let (resp, _) = review(&serde_json::to_vec(&req).unwrap(), FeatureGates::default());
        assert!(resp.allowed, "{}", resp.result.message);
        // The same object written to the main resource is refused, naming the field.
        let (resp, _) = review(
            &request("UPDATE", object.clone(), Some(object)),
            FeatureGates::default(),
        );
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .contains("spec.resourcePolicy.containerPolicies[0].maxAllowed[cpu]"),
            "{}",
            resp.result.message
        );
    }
}
