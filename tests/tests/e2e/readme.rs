//! The README's walk-through ("A real cluster on your machine: `hack/cluster.sh`"), run as a newcomer runs
//! it: the commands of its `sh` block after "try it:", in order, through `bash` and plain `kubectl`, from the
//! repository's root. The watch (`get tvpa -w`) becomes a wait for the recommendation; then the pods must
//! carry it (the updater evicts the pods the webhook sized before the usage was known, the webhook sizes
//! their replacements). A README edit that breaks the walk-through fails here.

use super::*;

/// The line that introduces the walk-through's block in README.md.
const INTRO: &str = "try it:";
/// The namespace the walk-through creates (examples/modes/recreate.yaml's).
const NAMESPACE: &str = "demo";

/// The walk-through's commands, in order, without their trailing comments.
fn walkthrough() -> Result<Vec<String>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let after = readme
        .split_once(INTRO)
        .with_context(|| format!("README.md has no {INTRO:?}"))?
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, b)| b.split_once("```"))
        .context("no sh block after the walk-through's introduction")?
        .0;
    Ok(block
        .lines()
        .map(|l| {
            l.split_once("  #")
                .map_or(l, |(cmd, _)| cmd)
                .trim()
                .to_owned()
        })
        .filter(|l| !l.is_empty())
        .collect())
}

/// Runs `command` as the README's reader would, in a shell at the repository's root.
fn shell(command: &str) -> Result<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let kubeconfig = std::env::var_os("TAILOR_E2E_KUBECONFIG").context("TAILOR_E2E_KUBECONFIG")?;
    let out = std::process::Command::new("bash")
        .args(["-c", command])
        .current_dir(root)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
#[ignore = "needs a cluster: TAILOR_E2E_KUBECONFIG (hack/kind-e2e.sh)"]
async fn the_readme_walkthrough_gets_a_recommendation_and_sized_pods() {
    let env = e2e("the_readme_walkthrough_gets_a_recommendation_and_sized_pods").await;
    let result = walk(&env).await;
    let _ = shell(&format!(
        "kubectl delete namespace {NAMESPACE} --wait=false"
    ));
    if let Err(e) = result {
        panic!("the README walk-through failed: {e:#}");
    }
}

async fn walk(env: &E2e) -> Result<()> {
    let started = Instant::now();
    let commands = walkthrough()?;
    if commands.len() < 4 || !commands.iter().any(|c| c.contains(" -w")) {
        bail!("the walk-through's block changed shape: {commands:?}");
    }
    let vpas = env.tailor_vpas(NAMESPACE);
    let mut target = None;
    for command in &commands {
        if command.contains(" -w") {
            // The reader watches until a recommendation shows: wait for it instead.
            let t = wait_for(
                "a recommendation for the walk-through's VPA",
                RECOMMENDATION_TIMEOUT,
                || async {
                    let list = vpas.list(&ListParams::default()).await?;
                    Ok(list.items.into_iter().find_map(|v| {
                        let rec = v.status?.recommendation?.container_recommendations?;
                        let target = rec.into_iter().next()?.target;
                        let cpu = target.get("cpu").and_then(|q| milli_cpu(q).ok())?;
                        // The usage the walk-through sets (250m) has reached the model.
                        (cpu >= 250).then_some(target)
                    }))
                },
            )
            .await?;
            println!("walk-through: `{command}` shows {t:?}");
            target = Some(t);
            continue;
        }
        let out = shell(command)?;
        println!("walk-through: `{command}`\n{}", out.trim_end());
    }
    let target = target.context("no recommendation")?;
    let (cpu, memory) = (
        milli_cpu(target.get("cpu").context("target without cpu")?)?,
        bytes(target.get("memory").context("target without memory")?)?,
    );
    // The pods end up with the recommendation (or a later one, as usage samples add up).
    let pods = Api::<Pod>::namespaced(env.client.clone(), NAMESPACE);
    wait_for(
        &format!("the walk-through's pods sized near {cpu}m / {memory} bytes"),
        RECOMMENDATION_TIMEOUT,
        || async {
            let list = pods.list(&ListParams::default()).await?;
            let running: Vec<_> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let sized = running.iter().all(|p| {
                let requests = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.resources.as_ref())
                    .and_then(|r| r.requests.as_ref());
                let got = |k: &str, f: fn(&Quantity) -> Result<i64>| {
                    requests.and_then(|r| r.get(k)).and_then(|q| f(q).ok())
                };
                matches!(got("cpu", milli_cpu), Some(c) if c >= cpu * 9 / 10)
                    && matches!(got("memory", bytes), Some(m) if m >= memory * 9 / 10)
            });
            Ok((!running.is_empty() && sized).then_some(()))
        },
    )
    .await?;
    println!("readme: {:.0}s", started.elapsed().as_secs_f64());
    Ok(())
}
