#!/usr/bin/env bash
# Chart checks: helm lint, a values matrix rendered with the Helm v4 library and validated with
# kubernetes-validate for Kubernetes 1.33 and 1.37, invalid value combinations, CRD copies, and the
# bash -n and ShellCheck runs over the hack/ scripts. The work is in hack/chart_check.py; its last line is "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PY=target/venv/bin/python
if [[ ! -x $PY ]]; then
  echo "FAIL  $PY is missing: run hack/install-deps.sh"
  echo "0 passed, 1 failed"
  exit 1
fi
exec "$PY" hack/chart_check.py "$@"
