#!/usr/bin/env bash
# Builds the test infrastructure's programs from their Go modules (hack/go/*/go.mod, versions in
# hack/go/versions.env) into a per-machine cache outside target/ (so `cargo clean` keeps them), once per
# version: the cache key is the component, its version and a hash of its wrapper go.sum.
#
# Usage: hack/go/build.sh [COMPONENT]...   COMPONENT: kubernetes, kubernetes-oldest, etcd, kwok, metrics-server,
#        helm, upstream-vpa, vpa-bench (default: all but kubernetes-oldest and vpa-bench). Prints one line per component on stdout, "NAME DIR" with the
#        directory holding its binaries; progress goes to stderr.
# Environment: TAILOR_TOOLS_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/tailor/tools).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE=${TAILOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tailor/tools}
# The wrapper go.sum files pin every module; nothing is resolved anew at build time.
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

command -v go >/dev/null || { echo "hack/go/build.sh: no 'go' on PATH (Go ${REQUIRED_GO:-1.26} is needed)" >&2; exit 1; }

# build NAME VERSION LDFLAGS PACKAGE...
build() {
  local name=$1 version=$2 ldflags=$3 dir key out started sources=()
  shift 3
  dir="$HERE/${name}"
  [[ -f $dir/go.sum ]] || { echo "hack/go/build.sh: $dir/go.sum is missing (run hack/go/gen-wrapper.sh $name)" >&2; return 1; }
  # A wrapper with its own Go source (vpa-bench) is keyed on that source too.
  mapfile -t sources < <(find "$dir" -maxdepth 1 -name '*.go' | sort)
  key=$(cat "$dir/go.mod" "$dir/go.sum" "${sources[@]}" | sha256sum | cut -c1-12)
  out="$CACHE/$name-$version-$key"
  if [[ -f $out/.complete ]]; then
    echo "$name $out"
    return 0
  fi
  echo "hack/go/build.sh: building $name $version ($# program(s): ${*##*/}) into $out; the first build takes minutes" >&2
  started=$(date +%s)
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  # Progress: `go build -v` names each package as it is compiled; every 100th is shown as "n/N packages".
  local total
  total=$(cd "$dir" && go list -deps "$@" | wc -l) || { echo "hack/go/build.sh: cannot list $name's packages" >&2; return 1; }
  if ! (cd "$dir" && go build -v -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/" "$@" 2>&1) |
    awk -v total="$total" -v name="$name" '
      /^#|: |^\t/ { print; fflush(); next }
      { n++; if (n % 100 == 0) { printf "hack/go/build.sh: %s: %d/%d packages\n", name, n, total; fflush() } }' >&2
  then
    echo "hack/go/build.sh: building $name $version failed" >&2
    return 1
  fi
  # etcd's main package is its module root, go.etcd.io/etcd/server/v3: named "server" by go build.
  if [[ -f $out.tmp/server && $name == etcd ]]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
  touch "$out.tmp/.complete"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "hack/go/build.sh: $name $version built in $(($(date +%s) - started)) s" >&2
  echo "$name $out"
}

kube_ldflags() { # The version the binaries report (kubectl version, /version, the API server's emulation version).
  local v=$1 minor
  minor=$(cut -d. -f2 <<<"$v")
  local f=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    f+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

kubernetes() { # kubernetes NAME VERSION
  build "$1" "$2" "$(kube_ldflags "$2")" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
}

targets=("$@")
((${#targets[@]})) || targets=(kubernetes etcd kwok metrics-server helm upstream-vpa)
for t in "${targets[@]}"; do
  case $t in
    kubernetes) kubernetes kubernetes "$KUBERNETES_VERSION" ;;
    kubernetes-oldest) kubernetes kubernetes-oldest "$KUBERNETES_OLDEST_VERSION" ;;
    etcd) build etcd "$ETCD_VERSION" "" go.etcd.io/etcd/server/v3 ;;
    kwok) build kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok ;;
    metrics-server) build metrics-server "$METRICS_SERVER_VERSION" \
      "-X sigs.k8s.io/metrics-server/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
      sigs.k8s.io/metrics-server/cmd/metrics-server ;;
    helm) build helm "$HELM_VERSION" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" helm.sh/helm/v4/cmd/helm ;;
    # Upstream VPA (hack/cluster.sh up --with-upstream): binaries recommender, updater, admission-controller.
    upstream-vpa) build upstream-vpa "$UPSTREAM_VPA_VERSION" "" k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender \
      k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller ;;
    # The W1 harness of hack/bench-vs-upstream.sh (upstream's recommender model; binary vpa-bench).
    vpa-bench) build vpa-bench "$UPSTREAM_VPA_VERSION" "" . ;;
    *) echo "hack/go/build.sh: unknown component $t" >&2; exit 2 ;;
  esac
done
