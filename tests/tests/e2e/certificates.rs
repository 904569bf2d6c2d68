//! The webhook's certificate rotated while the API server keeps calling it.

use super::*;

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn webhook_certificate_rotation() {
    let env = e2e("webhook_certificate_rotation").await;
    let env = &env;
    in_namespace(env, "rotation", |ns| async move {
        let secrets = Api::<Secret>::namespaced(env.client.clone(), &env.system_namespace);
        let secret_name = format!("{}-admission-tls", env.release);
        let pem = |s: &Secret, key: &str| -> Result<Vec<u8>> {
            s.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.clone())
                .with_context(|| format!("secret {secret_name} has no {key}"))
        };
        let old = secrets
            .get(&secret_name)
            .await
            .with_context(|| format!("the self-managed certificate Secret {secret_name}"))?;
        let (old_crt, old_ca) = (pem(&old, "tls.crt")?, pem(&old, "ca.crt")?);

        // Expiring within the renewal window (30 days): the webhook must replace its CA and certificate.
        let soon = (Timestamp::now().as_second() + 86_400).to_string();
        secrets
            .patch(
                &secret_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "tailor.dev/certificate-expiry-unix": soon}}})),
            )
            .await?;
        let new_ca = wait_for(
            "a new CA and certificate in the Secret",
            POD_TIMEOUT,
            || async {
                let s = secrets.get(&secret_name).await?;
                let (crt, ca) = (pem(&s, "tls.crt")?, pem(&s, "ca.crt")?);
                Ok((crt != old_crt && ca != old_ca).then_some(ca))
            },
        )
        .await?;

        // The new CA is published in every webhook's caBundle.
        let configs = Api::<MutatingWebhookConfiguration>::all(env.client.clone());
        let config_name = format!("{}-admission", env.release);
        let ca_text = String::from_utf8_lossy(&new_ca).trim().to_string();
        let names = wait_for("the new CA in every caBundle", POD_TIMEOUT, || async {
            let webhooks = configs
                .get(&config_name)
                .await?
                .webhooks
                .unwrap_or_default();
            let published = webhooks.iter().all(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(&ca_text))
            });
            Ok((published && !webhooks.is_empty())
                .then(|| webhooks.into_iter().map(|w| w.name).collect::<Vec<_>>()))
        })
        .await?;
        // Trust the new CA alone: only a webhook serving the new certificate can answer from now on.
        let encoded = json!(k8s_openapi::ByteString(new_ca.clone()));
        let patch = json!({"webhooks": names.iter().map(|n| json!({
            "name": n, "clientConfig": {"caBundle": encoded}})).collect::<Vec<_>>()});
        configs
            .patch(
                &config_name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await?;

        // failurePolicy is Ignore: an unreachable webhook lets an invalid VPA through. Every replica must
        // deny it (several in a row, so that each replica behind the Service is hit).
        let mut invalid = vpa_manifest("invalid", "web", "Recreate");
        invalid["spec"]["updatePolicy"]["minReplicas"] = json!(0);
        let invalid: DynamicObject = serde_json::from_value(invalid)?;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let denials = std::sync::atomic::AtomicU32::new(0);
        let (denials, invalid, dry_run, ns) = (&denials, &invalid, &dry_run, &ns);
        wait_for(
            "8 denials in a row of an invalid VPA by the webhook with the rotated certificate",
            POD_TIMEOUT,
            || async move {
                use std::sync::atomic::Ordering;
                match env.dynamic_vpas(ns).create(dry_run, invalid).await {
                    Err(e) if format!("{e:#}").contains("denied the request") => {
                        Ok((denials.fetch_add(1, Ordering::Relaxed) + 1 >= 8).then_some(()))
                    }
                    Ok(_) => {
                        denials.store(0, Ordering::Relaxed);
                        Err(anyhow!(
                            "an invalid VPA was accepted: the API server did not reach the webhook"
                        ))
                    }
                    Err(e) => {
                        denials.store(0, Ordering::Relaxed);
                        Err(anyhow!("unexpected answer: {e:#}"))
                    }
                }
            },
        )
        .await
    })
    .await;
}
