#!/usr/bin/env bash
# /metrics of a real `dsv4 serve` read with prometheus_client's parser (tests/e2e/test_metrics.py).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
# Debian's python3-prometheus-client serves /usr/bin/python3; a pip install serves the python3 on PATH.
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import prometheus_client' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "serve_metrics: prometheus_client is missing (scripts/setup.sh installs it)"; exit 1; }
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec "$PY" -m unittest -v test_metrics 2>&1
