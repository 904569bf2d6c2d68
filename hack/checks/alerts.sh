#!/usr/bin/env bash
# Tailor's PrometheusRule and Grafana dashboard (the chart's prometheusRule and grafanaDashboard) against the
# real Prometheus: promtool check rules, promtool test rules (each alert fires on its series, none on healthy
# ones), and a Prometheus server fed with series named as the components export them, where every rule
# evaluates and every dashboard query returns data. The work is in hack/alerts_check.py; its last line is
# "alerts: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PY=target/venv/bin/python
if [[ ! -x $PY ]]; then
  echo "FAIL  $PY is missing: run hack/install-deps.sh"
  echo "alerts: 0 passed, 1 failed"
  exit 1
fi
exec "$PY" hack/alerts_check.py "$@"
