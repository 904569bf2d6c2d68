//! Self-managed certificates against a mocked API server (typed scenarios of `tailor-testkit`): the exact
//! calls for an empty chart-created Secret, for a Secret that already holds a usable certificate, and for
//! losing the update race to another replica.

use std::time::Duration;

use base64::Engine as _;
use http::{Method, StatusCode};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use serde_json::json;
use tailor_admission::{
    certs::{self, CertResolver, certified_key_from_pem},
    selfmanaged::{CA_CRT, EXPIRY_ANNOTATION, SelfManaged, TLS_CRT, TLS_KEY},
};
use tailor_testkit::scenario::{ApiServer, Reply, Scenario, Step, api_server};

fn self_managed() -> (SelfManaged, ApiServer) {
    let (client, api) = api_server("tailor");
    let sm = SelfManaged {
        client,
        namespace: "tailor".into(),
        secret: "tailor-admission-tls".into(),
        webhook_config: "tailor-admission".into(),
        service: "tailor-admission".into(),
    };
    (sm, api.within(Duration::from_secs(10)))
}

const SECRET_PATH: &str = "/api/v1/namespaces/tailor/secrets/tailor-admission-tls";
const CONFIG_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/tailor-admission";

fn empty_secret() -> Secret {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "tailor-admission-tls", "namespace": "tailor", "resourceVersion": "7"}}))
    .unwrap()
}

fn secret_with(ca: &str, cert: &str, key: &str) -> Secret {
    let data = [(CA_CRT, ca), (TLS_CRT, cert), (TLS_KEY, key)];
    let data = data.map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())));
    Secret {
        data: Some(data.into_iter().collect()),
        ..empty_secret()
    }
}

fn webhook_config(ca_bundle: Option<&str>) -> MutatingWebhookConfiguration {
    let mut client_config = json!({"service": {"namespace": "tailor", "name": "tailor-admission", "path": "/mutate-pods"}});
    if let Some(ca) = ca_bundle {
        client_config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let webhook = |name: &str| {
        json!({"name": name, "clientConfig": client_config, "admissionReviewVersions": ["v1"],
        "sideEffects": "None"})
    };
    serde_json::from_value(json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "tailor-admission", "resourceVersion": "3"},
        "webhooks": [webhook("pods.admission.tailor.dev"), webhook("vpa.admission.tailor.dev")]}))
    .unwrap()
}

/// The GET of the Secret, answered with `secret`.
fn read_secret(secret: &Secret) -> Step {
    Step::get(SECRET_PATH).reply(Reply::object(secret))
}

/// The GET of the webhook configuration, answered with one whose caBundle is `ca_bundle`.
fn read_config(ca_bundle: Option<&str>) -> Step {
    Step::get(CONFIG_PATH).reply(Reply::object(&webhook_config(ca_bundle)))
}

#[tokio::test]
async fn empty_secret_gets_a_certificate_and_the_config_its_ca() {
    let (sm, api) = self_managed();
    let patch = Step::patch(CONFIG_PATH).check(|sent| {
        let webhooks = sent.body["webhooks"].as_array().unwrap();
        assert_eq!(webhooks.len(), 2);
        assert_eq!(webhooks[0]["name"], "pods.admission.tailor.dev");
        assert_eq!(webhooks[1]["name"], "vpa.admission.tailor.dev");
    });
    let write = Step::put(SECRET_PATH).check(|sent| {
        assert_eq!(
            sent.body["metadata"]["resourceVersion"], "7",
            "optimistic concurrency"
        );
        assert!(sent.body["metadata"]["annotations"][EXPIRY_ANNOTATION].is_string());
    });
    let scenario = Scenario::new("an empty chart-created Secret")
        .then(read_secret(&empty_secret()))
        // The CA is published before the Secret is written.
        .then(read_config(None))
        .then(patch.reply(Reply::object(&webhook_config(None))))
        .then(write.echo());
    let (material, api) = api.verify(scenario, sm.ensure_secret()).await;
    let material = material.unwrap();

    let patch = api.body_of(Method::PATCH, CONFIG_PATH);
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(
            patch["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(bundle, material.ca_pem);
    let written = api.body_of(Method::PUT, SECRET_PATH);
    let stored = |k: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(written["data"][k].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(stored(CA_CRT), material.ca_pem);
    assert_eq!(stored(TLS_CRT), material.cert_pem);
    assert_eq!(stored(TLS_KEY), material.key_pem);
    // The certificate is for the Service's DNS names, and it loads.
    certified_key_from_pem(&material.cert_pem, &material.key_pem, "stored").unwrap();
    let pem = String::from_utf8(material.cert_pem.clone()).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
}

#[tokio::test]
async fn a_usable_secret_is_served_and_a_reset_config_is_repaired() {
    let g = certs::generate(&certs::service_dns_names("tailor-admission", "tailor"), 365).unwrap();
    let other = certs::generate(&["x".into()], 1).unwrap();
    let (sm, api) = self_managed();
    let resolver = CertResolver::new(
        certified_key_from_pem(other.cert_pem.as_bytes(), other.key_pem.as_bytes(), "x").unwrap(),
    );
    let usable = secret_with(&g.ca_cert_pem, &g.cert_pem, &g.key_pem);
    // `helm upgrade` re-applied the configuration without caBundle: patch it back.
    let patch = Step::patch(CONFIG_PATH)
        .check(|sent| assert_eq!(sent.body["webhooks"].as_array().unwrap().len(), 2));
    let scenario = Scenario::new("a usable Secret, a configuration reset by helm upgrade")
        .then(read_secret(&usable))
        .then(read_config(None))
        .then(patch.reply(Reply::object(&webhook_config(Some(&g.ca_cert_pem)))));
    let (reconciled, _) = api.verify(scenario, sm.reconcile(&resolver)).await;
    reconciled.unwrap();
    let served = certified_key_from_pem(g.cert_pem.as_bytes(), g.key_pem.as_bytes(), "g").unwrap();
    assert_eq!(resolver.current().cert, served.cert);

    // Everything in place: one read of each, no writes.
    let (sm, api) = self_managed();
    let scenario = Scenario::new("everything in place")
        .then(read_secret(&usable))
        .then(read_config(Some(&g.ca_cert_pem)));
    let (reconciled, _) = api.verify(scenario, sm.reconcile(&resolver)).await;
    reconciled.unwrap();
}

#[tokio::test]
async fn losing_the_race_serves_the_winners_certificate() {
    let winner =
        certs::generate(&certs::service_dns_names("tailor-admission", "tailor"), 365).unwrap();
    let (sm, api) = self_managed();
    let conflict = failure_conflict();
    let scenario = Scenario::new("another replica writes the Secret first")
        .then(read_secret(&empty_secret()))
        .then(read_config(None))
        .then(Step::patch(CONFIG_PATH).reply(Reply::object(&webhook_config(None))))
        .then(Step::put(SECRET_PATH).reply(conflict))
        .then(read_secret(&secret_with(
            &winner.ca_cert_pem,
            &winner.cert_pem,
            &winner.key_pem,
        )));
    let (material, _) = api.verify(scenario, sm.ensure_secret()).await;
    assert_eq!(material.unwrap().cert_pem, winner.cert_pem.as_bytes());
}

/// The 409 the API server answers an update under a stale resourceVersion.
fn failure_conflict() -> Reply {
    let mut conflict = tailor_testkit::scenario::failure(StatusCode::CONFLICT, "Conflict");
    conflict.message = Some("the object has been modified".into());
    Reply::status(&conflict)
}
