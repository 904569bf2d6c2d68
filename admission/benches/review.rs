//! Criterion benchmark of a pod review, stage by stage, on the realistic pod of `hack/bench-webhook.sh`
//! (`admission/examples/loadgen/pods.rs`, ≈ 8.8 KB of review) against its 1,000 VPAs: scan (the body read by
//! serde_json, nothing built: the floor of any decode of it), decode (the body into
//! the review and its slim pod: metadata decoded, the sizing fields kept as text), match (pod → VPA through the
//! index), memo key, decode_sizing (the sizing fields decoded, for a pod the memo misses), size (the patch
//! computed and serialised), encode (the response review with the patch), and the whole `review::handle`, memo hit and
//! miss. Each iteration takes the next workload's body, so that the caches hold what 1,000 workloads need.
//! docs/benchmarks/webhook.md has the figures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test, bench and example code: a panic is a failure report

use std::cell::Cell;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{LimitRange, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tailor_admission::pod::{patch_pod_within, sizing_key};
use tailor_admission::review::{self, ReviewResult};
use tailor_admission::slim_pod::SlimPod;
use tailor_admission::webhook::Webhook;
use tailor_admission::{flags, manifests};
use tailor_core::sizing::PatchOptions;
use tailor_crds::VerticalPodAutoscaler;
use tailor_kube::index::Index;

#[path = "../examples/loadgen/fixture.rs"]
mod fixture;
#[allow(dead_code)] // the load generator's other helpers
#[path = "../examples/loadgen/pods.rs"]
mod pods;

use fixture::workload;

// As the webhook's binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const VPAS: usize = 1000;
const NAMESPACES: usize = 50;

/// The bench's objects: the index of 1,000 workloads and the realistic pod's review of each.
struct Fixture {
    index: Index,
    bodies: Vec<hyper::body::Bytes>,
    dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let manifests_dir = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests_dir).unwrap();
    std::fs::write(
        manifests_dir.join("bench.yaml"),
        fixture::manifests(VPAS, NAMESPACES),
    )
    .unwrap();
    let bodies = (0..VPAS)
        .map(|i| pods::review_body_of(pods::PodShape::Realistic, i, NAMESPACES))
        .collect();
    Fixture {
        index: load_index(dir.path()),
        bodies,
        dir,
    }
}

/// The index of the objects written under `dir`, as standalone mode builds it.
fn load_index(dir: &std::path::Path) -> Index {
    let loaded = manifests::load_dir(&dir.join("manifests")).unwrap();
    loaded.objects.into_index()
}

/// The next item of `items`, round robin.
fn next<'a, T>(items: &'a [T], at: &Cell<usize>) -> &'a T {
    let i = at.get();
    at.set((i + 1) % items.len());
    &items[i]
}

/// Each body's pod as the review's pass reads it (metadata decoded, the sizing fields as text), and its
/// namespace.
fn slim_pods(bodies: &[hyper::body::Bytes]) -> Vec<(SlimPod<'_>, String)> {
    bodies
        .iter()
        .map(|b| {
            let review = review::decode_one_pass(b).unwrap();
            let slim = *review.take_pod().unwrap().unwrap();
            let ns = slim.meta.namespace.clone().unwrap();
            (slim, ns)
        })
        .collect()
}

/// A decoded pod of each body, its namespace set as the review sets it.
fn decoded_pods(bodies: &[hyper::body::Bytes]) -> Vec<(Pod, String)> {
    slim_pods(bodies)
        .into_iter()
        .map(|(slim, ns)| (slim.into_pod().unwrap(), ns))
        .collect()
}

/// Each pod with its VPA and its namespace's LimitRanges, as sizing reads them.
type Sized = (Pod, String, Arc<VerticalPodAutoscaler>, Vec<LimitRange>);

fn matched(index: &Index, pods: Vec<(Pod, String)>) -> Vec<Sized> {
    pods.into_iter()
        .map(|(pod, ns)| {
            let vpa = index.matching_vpas(&pod, &ns).unwrap().unwrap().vpa;
            let lrs = index
                .shared_limit_ranges(&ns)
                .iter()
                .map(|lr| (**lr).clone())
                .collect();
            (pod, ns, vpa, lrs)
        })
        .collect()
}

fn stages(c: &mut Criterion) {
    let f = fixture();
    let at = Cell::new(0);
    let mut g = c.benchmark_group("review_realistic");
    // The least any serde_json decoder of the body costs: its text scanned, nothing built.
    g.bench_function("scan", |b| {
        b.iter(|| {
            let body = next(&f.bodies, &at);
            black_box(serde_json::from_slice::<serde::de::IgnoredAny>(body).unwrap())
        })
    });
    g.bench_function("decode", |b| {
        b.iter(|| {
            let review = review::decode_one_pass(&next(&f.bodies, &at)[..]).unwrap();
            black_box(review.take_pod())
        })
    });
    let slim = slim_pods(&f.bodies);
    g.bench_function("match", |b| {
        b.iter(|| {
            let (slim, ns) = next(&slim, &at);
            black_box(
                f.index
                    .matching_vpas_labelled(&slim.meta, &slim.text, ns)
                    .unwrap(),
            )
        })
    });
    g.bench_function("memo_key", |b| {
        b.iter(|| {
            let (slim, ns) = next(&slim, &at);
            black_box(sizing_key(&slim.text, ns))
        })
    });
    // What a pod that is sized decodes after the memo missed: its spec's and status's sizing fields.
    g.bench_function("decode_sizing", |b| {
        b.iter(|| {
            let (slim, _) = next(&slim, &at);
            black_box(slim.text.pod(ObjectMeta::default()).unwrap())
        })
    });
    let pods = decoded_pods(&f.bodies);
    let sized = matched(&f.index, pods);
    let options = PatchOptions::default();
    g.bench_function("size", |b| {
        b.iter(|| {
            let (pod, _, vpa, lrs) = next(&sized, &at);
            let result = patch_pod_within(pod, vpa, lrs, &[], &options).unwrap();
            black_box(serde_json::to_vec(&result.patch).unwrap())
        })
    });
    let responses: Vec<_> = sized
        .iter()
        .map(|(pod, _, vpa, lrs)| {
            let patch = patch_pod_within(pod, vpa, lrs, &[], &options).unwrap();
            review::allowed_response("bench")
                .with_patch(patch.patch)
                .unwrap()
        })
        .collect();
    g.bench_function("encode", |b| {
        b.iter(|| black_box(review::encode(next(&responses, &at))))
    });
    g.finish();
}

fn handle(c: &mut Criterion) {
    let f = fixture();
    let at = Cell::new(0);
    let mut g = c.benchmark_group("handle_realistic");
    for (name, memo_bytes) in [
        ("memo_hit", flags::DEFAULT_PATCH_MEMO_BYTES),
        ("memo_miss", 0),
    ] {
        let webhook = Webhook::new(
            load_index(f.dir.path()),
            Default::default(),
            Default::default(),
        )
        .with_patch_memo_bytes(memo_bytes);
        for body in &f.bodies {
            assert_eq!(review::handle(body, &webhook).result, ReviewResult::Patched);
        }
        g.bench_function(name, |b| {
            b.iter(|| black_box(review::handle(&next(&f.bodies, &at)[..], &webhook)))
        });
    }
    g.finish();
}

criterion_group!(benches, stages, handle);
criterion_main!(benches);
