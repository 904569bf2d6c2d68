//! Self-managed certificates against a mocked API server (kube-rs `Client` over a tower-test service): the
//! exact calls for an empty chart-created Secret, for a Secret that already holds a usable certificate, and for
//! losing the update race to another replica.

use base64::Engine as _;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tailor_admission::{
    certs::{self, CertResolver, certified_key_from_pem},
    selfmanaged::{CA_CRT, EXPIRY_ANNOTATION, SelfManaged, TLS_CRT, TLS_KEY},
};

use crate::mock_api::respond;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn self_managed() -> (SelfManaged, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "tailor");
    let sm = SelfManaged {
        client,
        namespace: "tailor".into(),
        secret: "tailor-admission-tls".into(),
        webhook_config: "tailor-admission".into(),
        service: "tailor-admission".into(),
    };
    (sm, handle)
}

const SECRET_PATH: &str = "/api/v1/namespaces/tailor/secrets/tailor-admission-tls";
const CONFIG_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/tailor-admission";

async fn expect(
    handle: &mut Handle,
    method: Method,
    path: &str,
) -> (Value, tower_test::mock::SendResponse<Response<Body>>) {
    let (req, send) =
        tokio::time::timeout(std::time::Duration::from_secs(10), handle.next_request())
            .await
            .expect("the expected API call did not come")
            .expect("service dropped");
    assert_eq!(req.method(), method, "{}", req.uri());
    assert_eq!(req.uri().path(), path);
    let body = req.into_body().collect_bytes().await.unwrap();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    (body, send)
}

fn empty_secret() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "tailor-admission-tls", "namespace": "tailor", "resourceVersion": "7"}})
}

fn secret_with(ca: &str, cert: &str, key: &str) -> Value {
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut s = empty_secret();
    s["data"] = json!({CA_CRT: b(ca), TLS_CRT: b(cert), TLS_KEY: b(key)});
    s
}

fn webhook_config(ca_bundle: Option<&str>) -> Value {
    let mut client_config = json!({"service": {"namespace": "tailor", "name": "tailor-admission", "path": "/mutate-pods"}});
    if let Some(ca) = ca_bundle {
        client_config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let webhook = |name: &str| {
        json!({"name": name, "clientConfig": client_config, "admissionReviewVersions": ["v1"],
        "sideEffects": "None"})
    };
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "tailor-admission", "resourceVersion": "3"},
        "webhooks": [webhook("pods.admission.tailor.dev"), webhook("vpa.admission.tailor.dev")]})
}

#[tokio::test]
async fn empty_secret_gets_a_certificate_and_the_config_its_ca() {
    let (sm, mut handle) = self_managed();
    let task = tokio::spawn(async move { sm.ensure_secret().await });

    let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
    respond(send, StatusCode::OK, empty_secret());
    // The CA is published before the Secret is written.
    let (_, send) = expect(&mut handle, Method::GET, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(None));
    let (patch, send) = expect(&mut handle, Method::PATCH, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(None));
    let webhooks = patch["webhooks"].as_array().unwrap();
    assert_eq!(webhooks.len(), 2);
    assert_eq!(webhooks[0]["name"], "pods.admission.tailor.dev");
    assert_eq!(webhooks[1]["name"], "vpa.admission.tailor.dev");
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(webhooks[0]["clientConfig"]["caBundle"].as_str().unwrap())
        .unwrap();
    let (written, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
    assert_eq!(
        written["metadata"]["resourceVersion"], "7",
        "optimistic concurrency"
    );
    assert!(written["metadata"]["annotations"][EXPIRY_ANNOTATION].is_string());
    respond(send, StatusCode::OK, written.clone());

    let material = task.await.unwrap().unwrap();
    assert_eq!(bundle, material.ca_pem);
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
    let (sm, mut handle) = self_managed();
    let resolver = CertResolver::new(
        certified_key_from_pem(other.cert_pem.as_bytes(), other.key_pem.as_bytes(), "x").unwrap(),
    );
    let r = resolver.clone();
    let task = tokio::spawn(async move { sm.reconcile(&r).await });

    let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
    respond(
        send,
        StatusCode::OK,
        secret_with(&g.ca_cert_pem, &g.cert_pem, &g.key_pem),
    );
    // `helm upgrade` re-applied the configuration without caBundle: patch it back.
    let (_, send) = expect(&mut handle, Method::GET, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(None));
    let (patch, send) = expect(&mut handle, Method::PATCH, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(Some(&g.ca_cert_pem)));
    assert_eq!(patch["webhooks"].as_array().unwrap().len(), 2);
    task.await.unwrap().unwrap();
    let served = certified_key_from_pem(g.cert_pem.as_bytes(), g.key_pem.as_bytes(), "g").unwrap();
    assert_eq!(resolver.current().cert, served.cert);

    // Everything in place: one read of each, no writes.
    let (sm, mut handle) = self_managed();
    let r = resolver.clone();
    let task = tokio::spawn(async move { sm.reconcile(&r).await });
    let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
    respond(
        send,
        StatusCode::OK,
        secret_with(&g.ca_cert_pem, &g.cert_pem, &g.key_pem),
    );
    let (_, send) = expect(&mut handle, Method::GET, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(Some(&g.ca_cert_pem)));
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn losing_the_race_serves_the_winners_certificate() {
    let winner =
        certs::generate(&certs::service_dns_names("tailor-admission", "tailor"), 365).unwrap();
    let (sm, mut handle) = self_managed();
    let task = tokio::spawn(async move { sm.ensure_secret().await });

    let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
    respond(send, StatusCode::OK, empty_secret());
    let (_, send) = expect(&mut handle, Method::GET, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(None));
    let (_, send) = expect(&mut handle, Method::PATCH, CONFIG_PATH).await;
    respond(send, StatusCode::OK, webhook_config(None));
    let (_, send) = expect(&mut handle, Method::PUT, SECRET_PATH).await;
    respond(
        send,
        StatusCode::CONFLICT,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "the object has been modified", "reason": "Conflict", "code": 409}),
    );
    let (_, send) = expect(&mut handle, Method::GET, SECRET_PATH).await;
    respond(
        send,
        StatusCode::OK,
        secret_with(&winner.ca_cert_pem, &winner.cert_pem, &winner.key_pem),
    );

    let material = task.await.unwrap().unwrap();
    assert_eq!(material.cert_pem, winner.cert_pem.as_bytes());
}
