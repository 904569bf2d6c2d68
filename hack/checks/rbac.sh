#!/usr/bin/env bash
# The chart's RBAC against the API requests the real binaries made in the stand-in tests
# (docs/decisions/stand-in-api-server.md): no request without a rule, no rule without a request or an allow-list
# entry (charts/tailor/rbac-allowlist.yaml). Needs the request records: hack/test.sh exports
# TAILOR_STANDIN_RECORD_DIR for its cargo test run, and runs this after it. By hand:
#   TAILOR_STANDIN_RECORD_DIR=$PWD/target/standin-requests cargo test -p tailor-tests --test it
#   hack/checks/rbac.sh
# The work is in hack/rbac_check.py; its last line is "rbac: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PY=target/venv/bin/python
if [[ ! -x $PY ]]; then
  echo "FAIL  $PY is missing: run hack/install-deps.sh"
  echo "rbac: 0 passed, 1 failed"
  exit 1
fi
exec "$PY" hack/rbac_check.py "$@"
