#!/usr/bin/env bash
# The manifest reader on a big snapshot (docs/decisions/manifest-reader.md): peak RSS and wall time of
# `tailor-admission --vpa-dir` until it has loaded its manifests, and of `tailor plan` on a snapshot directory
# (release builds), on DEPLOYMENTS Deployments x REVISIONS ReplicaSets of realistic size, a Tailor VPA each and
# PODS pods each (tests/examples/manifest_files.rs), written as multi-document YAML and as
# `kubectl get -o json` Lists.
# Target: <= 256 MiB peak RSS for both (docs/design/principles.md §6). The input goes to a temporary directory
# removed at the end (--keep DIR writes it there and keeps it; --input DIR reuses one).
#
#   hack/bench-manifests.sh [--deployments N] [--revisions R] [--template-bytes B] [--pods P]
#                           [--keep DIR | --input DIR] [--tailor BIN] [--admission BIN]
#
# Ends with one line: vpa_dir_peak_mib=N plan_peak_mib=M (YAML for --vpa-dir, JSON Lists for plan, as
# BENCHMARKS.md reports them); the lines before it give every binary on both formats.
set -euo pipefail
cd "$(dirname "$0")/.."
gen_args=() keep='' input='' tailor=target/release/tailor admission=target/release/tailor-admission
while (($#)); do
  case $1 in
    --deployments | --revisions | --template-bytes | --pods) gen_args+=("$1" "$2"); shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --input) input=$2; shift 2 ;;
    --tailor) tailor=$2; shift 2 ;;
    --admission) admission=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ " ${gen_args[*]} " == *" --template-bytes "* ]] || gen_args+=(--template-bytes 2048)

if [[ $tailor == target/release/tailor && $admission == target/release/tailor-admission ]]; then
  CARGO_INCREMENTAL=0 cargo build --release -q -p tailor-cli --bin tailor -p tailor-admission --bin tailor-admission
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"

work=$(mktemp -d)
cleanup() {
  if [[ -n ${adm_pid:-} ]]; then kill "$adm_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
if [[ -n $input ]]; then
  data=$input
else
  data=${keep:-$work/data}
  # The generator's speed is not measured: a debug build is enough.
  CARGO_INCREMENTAL=0 cargo build -q -p tailor-tests --example manifest_files
  start=$(date +%s)
  target/debug/examples/manifest_files --out "$data" "${gen_args[@]}" | tr '\n' ' '
  echo "(written in $(($(date +%s) - start)) s to $data)"
fi

# Peak RSS (MiB) and wall time of `tailor plan DIR` (GNU time) and the pods planned; `failed - why` when it
# refuses the input.
plan() {
  local tlog=$work/plan.time
  if ! /usr/bin/time -v -o "$tlog" "$tailor" plan "$1" --now 2026-11-02T00:00:00Z --output json \
    >"$work/plan.out" 2>"$work/plan.err"; then
    echo "failed - $(grep -v '^ *[0-9]*:\|^ *at \|^$\|Stack backtrace' "$work/plan.err" | tr '\n' ' ' | cut -c1-300)"
    return
  fi
  local kib wall
  kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tlog")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tlog")
  echo "$((kib / 1024)) $wall $(grep -c '"pod":' "$work/plan.out")"
}

# Peak RSS (MiB, GNU time) and seconds until `tailor-admission --vpa-dir DIR` answers /readyz with 200 (it
# is ready once the manifests are loaded and indexed); then it is stopped.
vpa_dir() {
  local log=$work/admission.log tlog=$work/admission.time start now port
  port=$((20000 + RANDOM % 20000))
  start=$(date +%s.%N)
  /usr/bin/time -v -o "$tlog" "$admission" --vpa-dir "$1" --port 0 --bind-address 127.0.0.1 \
    --address "127.0.0.1:$port" --tls-cert-file "$work/certs/tls.crt" --tls-private-key "$work/certs/tls.key" \
    --client-ca-file "$work/certs/tls.crt" >"$log" 2>&1 &
  adm_pid=$!
  until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$adm_pid" 2>/dev/null; then
      echo "failed - $(grep -v '^ *[0-9]*:\|^ *at \|^$\|Stack backtrace\|MIMALLOC' "$log" | tr '\n' ' ' | cut -c1-300)"
      adm_pid=''
      return
    fi
    sleep 0.1
  done
  now=$(date +%s.%N)
  pkill -TERM -P "$adm_pid" || true
  wait "$adm_pid" 2>/dev/null || true
  adm_pid=''
  local kib
  kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tlog")
  echo "$((kib / 1024)) $(awk -v a="$start" -v b="$now" 'BEGIN {printf "%.1f", b - a}')"
}

mkdir -p "$work/certs"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -keyout "$work/certs/tls.key" -out "$work/certs/tls.crt" 2>/dev/null
declare -A vpa_dir_peak plan_peak
for format in yaml json; do
  read -r mib secs why < <(vpa_dir "$data/$format")
  if [[ $mib == failed ]]; then
    echo "tailor-admission --vpa-dir $format/: failed: $why"
  else
    echo "tailor-admission --vpa-dir $format/: peak ${mib} MiB, ready in ${secs} s"
  fi
  vpa_dir_peak[$format]=$mib
  read -r mib wall pods < <(plan "$data/$format")
  if [[ $mib == failed ]]; then
    echo "tailor plan $format/: failed: $pods"
  else
    echo "tailor plan $format/: peak ${mib} MiB, ${wall} wall, ${pods} pods planned"
  fi
  plan_peak[$format]=$mib
done
echo "vpa_dir_peak_mib=${vpa_dir_peak[yaml]} plan_peak_mib=${plan_peak[json]} (vpa_dir_json=${vpa_dir_peak[json]} plan_yaml=${plan_peak[yaml]})"
