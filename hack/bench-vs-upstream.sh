#!/usr/bin/env bash
# Tailor's engine beside upstream VPA's recommender model on workload W1 (docs/design/bench-workload.md;
# docs/decisions/measuring-against-upstream.md). Two programs run the same phases on the same containers,
# samples and order:
#   A  hack/go/vpa-bench (upstream's model.ClusterState and estimators at the version hack/go/versions.env pins,
#      built by hack/go/build.sh into the tools cache), GOMAXPROCS=1; run twice: with the quality metrics upstream
#      records for every sample (as it runs) and without them (see its main.go for how);
#   B  recommender/engine/examples/w1_figures.rs (Tailor's engine), release build.
# They alternate (A B A' B ...), every run pinned to one CPU (taskset), every phase timed by CPU clocks, not the
# wall clock (Tailor: its thread's CLOCK_THREAD_CPUTIME_ID; upstream: its process's CPU clock, which includes the
# Go runtime's garbage-collection threads, and its main thread's clock beside it). Both print a checksum of the
# recommendations of two phases; the script stops with an error when they differ.
#
# Usage: hack/bench-vs-upstream.sh [--reps R] [--upstream-reps U] [--sizes "10000x7 100000x1"] [--cpu C]
#                                  [--out DIR] [--upstream-from DIR]
# --upstream-reps U runs upstream (both ways) in the first U of the R rounds only (default R): its runs take
# most of the time and vary little between rounds; the medians are then of U upstream runs and R of Tailor's.
# --upstream-from DIR takes upstream's figures from an earlier run's output directory instead of running it
# again (upstream does not change between two runs; its runs take most of the time): only Tailor runs, R times
# (--reps 0: none; the table of what --out already holds).
# Ends with one line:
#   w1_speedup_10k=A w1_speedup_100k=B w1_msamples_per_s_100k=C recommend_us_per_container_100k=D
# (A, B: Tailor's samples/s through the full model path over upstream's with its quality metrics, medians of R;
#  C: Tailor's M samples/s at 100k × 1 d; D: Tailor's UpdateVPAs-equivalent per container at 100k). A table of
# every figure (both sides, medians) goes before it; each run's output is kept under --out
# (default target/bench-vs-upstream/<time>).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=3 upstream_reps="" sizes="10000x7 100000x1" cpu=1 out="" upstream_from=""
while (($#)); do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --upstream-reps) upstream_reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --upstream-from) upstream_from=$2; shift 2 ;;
    *) echo "usage: $0 [--reps R] [--upstream-reps U] [--sizes \"NxD ...\"] [--cpu C] [--out DIR] [--upstream-from DIR]" >&2; exit 2 ;;
  esac
done
upstream_reps=${upstream_reps:-$reps}
out=${out:-${CARGO_TARGET_DIR:-target}/bench-vs-upstream/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"

command -v taskset >/dev/null || { echo "$0: taskset (util-linux) is needed to pin the runs to one CPU" >&2; exit 1; }
upstream_dir=$(hack/go/build.sh vpa-bench | awk '$1 == "vpa-bench" { print $2 }')
[[ -x $upstream_dir/vpa-bench ]] || { echo "$0: hack/go/build.sh vpa-bench built nothing" >&2; exit 1; }
cargo build --release -q -p tailor-engine --example w1_figures
# A copy, so that a rebuild while the benchmark runs does not change the program under test.
cp "${CARGO_TARGET_DIR:-target}/release/examples/w1_figures" "$out/w1_figures"

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
model+=" (family $(lscpu | sed -n 's/^CPU family: *//p' | head -1), model $(lscpu | sed -n 's/^Model: *//p' | head -1))"
{
  echo "machine: $(nproc) CPUs, ${model:-unknown model}; runs pinned to CPU $cpu"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "upstream: k8s.io/autoscaler/vertical-pod-autoscaler $(sed -n 's/^UPSTREAM_VPA_VERSION=//p' hack/go/versions.env)," \
    "$(go version | cut -d' ' -f3), GOMAXPROCS=1; Tailor: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- recommender/engine || echo ' + local changes')"
} | tee "$out/machine.txt" >&2

kv() { sed -n "s/^$2=//p" "$1" | head -1; } # kv FILE KEY
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run() { # run SIZE REP SIDE: writes $out/SIZE-SIDE-REP.txt
  local size=$1 rep=$2 side=$3 n=${1%x*} d=${1#*x} f="$out/$1-$3-$2.txt"
  case $side in
    upstream) GOMAXPROCS=1 taskset -c "$cpu" "$upstream_dir/vpa-bench" -quality=true "$n" "$d" >"$f" ;;
    upstream-noquality) GOMAXPROCS=1 taskset -c "$cpu" "$upstream_dir/vpa-bench" -quality=false "$n" "$d" >"$f" ;;
    tailor) taskset -c "$cpu" "$out/w1_figures" "$n" "$d" >"$f" ;;
  esac
  echo "$size run $rep $side: cluster $(kv "$f" cluster_msamples_per_s | cut -c1-6) M samples/s," \
    "UpdateVPAs-equivalent $(kv "$f" updatevpas_us_per_container | cut -c1-6) us/container" >&2
}

for size in $sizes; do
  for rep in $(seq 1 "$reps"); do
    upstream_now=""
    if [[ -z $upstream_from ]] && ((rep <= upstream_reps)); then upstream_now=yes; fi
    [[ -z $upstream_now ]] || run "$size" "$rep" upstream
    run "$size" "$rep" tailor
    [[ -z $upstream_now ]] || run "$size" "$rep" upstream-noquality
  done
  if [[ -n $upstream_from ]]; then
    cp "$upstream_from/$size"-upstream-*.txt "$out/"
    echo "$size: upstream's figures from $upstream_from ($(head -1 "$upstream_from/machine.txt"))" >&2
  fi
  for f in "$out/$size"-*.txt; do
    for c in checksum_updatevpas checksum_cluster; do
      if [[ $(kv "$f" $c) != $(kv "$out/$size-tailor-1.txt" $c) ]]; then
        echo "$0: $c of $f ($(kv "$f" $c)) differs from Tailor's ($(kv "$out/$size-tailor-1.txt" $c))" >&2
        exit 1
      fi
    done
  done
  echo "$size: checksums equal on every run (updatevpas $(kv "$out/$size-tailor-1.txt" checksum_updatevpas), cluster $(kv "$out/$size-tailor-1.txt" checksum_cluster))" >&2
done

# The table covers every size this output directory holds Tailor runs of (an --out DIR reused by runs of
# one size each adds up).
sizes=$(find "$out" -maxdepth 1 -name '*-tailor-1.txt' -printf '%f\n' | sed 's/-tailor-1.txt$//' | sort -t x -k1,1n)

med() { # med SIZE SIDE KEY
  for f in "$out/$1-$2"-[0-9]*.txt; do kv "$f" "$3"; done | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "nan" }'; }
fmt() { awk -v a="$1" -v p="${2:-2}" 'BEGIN { printf "%.*f", p, a }'; }

{
  echo
  echo "Medians of the runs in $out (upstream = with its per-sample quality metrics, as it runs; w/o = without)${upstream_from:+; upstream from $upstream_from}:"
  echo
  echo "| size | figure | upstream | upstream w/o quality metrics | Tailor | Tailor / upstream (w/o) |"
  echo "|---|---|---|---|---|---|"
  for size in $sizes; do
    label="${size%x*} × ${size#*x} d"
    for pair in "cluster_msamples_per_s:M samples/s, full model path (Tailor: containers resolved once):hi" \
      "cluster_by_names_msamples_per_s:M samples/s, full model path, every sample looked up by names:hi" \
      "aggregate_msamples_per_s:M samples/s, container + aggregate:hi" \
      "updatevpas_us_per_container:UpdateVPAs-equivalent, us/container:lo" \
      "estimate_us_per_container:estimate only, us/container:lo" \
      "cluster_recommend_us_per_container:cluster recommend pass, us/container:lo" \
      "cluster_heap_b_per_container:heap, full model, B/container:lo" \
      "aggregate_heap_b_per_container:heap, container + aggregate, B/container:lo"; do
      key=${pair%%:*} dir=${pair##*:} name=${pair#*:}
      name=${name%:*}
      # Upstream has one full model path: every sample is looked up by its names.
      ukey=${key/cluster_by_names_/cluster_}
      u=$(med "$size" upstream "$ukey") uq=$(med "$size" upstream-noquality "$ukey") t=$(med "$size" tailor "$key")
      if [[ $dir == hi ]]; then r="$(ratio "$t" "$u")× ($(ratio "$t" "$uq")×)"; else r="$(ratio "$u" "$t")× ($(ratio "$uq" "$t")×)"; fi
      echo "| $label | $name | $(fmt "$u") | $(fmt "$uq") | $(fmt "$t") | $r |"
    done
  done
  echo
} | tee "$out/table.md"

speed() { ratio "$(med "$1" tailor cluster_msamples_per_s)" "$(med "$1" upstream cluster_msamples_per_s)"; }
line="w1_speedup_10k=$(speed 10000x7) w1_speedup_100k=$(speed 100000x1)"
line+=" w1_msamples_per_s_100k=$(fmt "$(med 100000x1 tailor cluster_msamples_per_s)" 1)"
line+=" recommend_us_per_container_100k=$(fmt "$(med 100000x1 tailor updatevpas_us_per_container)" 2)"
echo "$line" | tee "$out/line.txt"
