#!/usr/bin/env bash
# No shipped function over 80 lines unless hack/checks/long-functions.txt says why it must be long, and none over
# 120 lines whatever the list says (docs/decisions/function-length.md).
set -uo pipefail
# shellcheck source=../check-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check-lib.sh"
cd "$(dirname "$0")/../.." || exit 1

run "shipped functions over 80 lines are in hack/checks/long-functions.txt, with a reason" \
  python3 hack/fn_length.py --max 80 --allow hack/checks/long-functions.txt \
  crds/src core/src kube/src admission/src updater/src recommender/src recommender/engine/src \
  recommender/prometheus/src recommender/cluster-fit/src dashboard/src conformance/src cli/src
run "no shipped function over 120 lines, allowed or not" \
  python3 hack/fn_length.py --max 120 \
  crds/src core/src kube/src admission/src updater/src recommender/src recommender/engine/src \
  recommender/prometheus/src recommender/cluster-fit/src dashboard/src conformance/src cli/src
echo "functions: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
