#!/usr/bin/env bash
# Debian's prometheus and promtool against a real `dsv4 serve` with deploy/prometheus's rules
# (tests/e2e/test_prometheus.py). Skipped (77) where they are not installed; scripts/setup.sh installs them.
set -euo pipefail
for b in prometheus promtool; do
  command -v "$b" >/dev/null ||
    { echo "serve_prometheus: skipped: $b is not installed (Debian's prometheus package; scripts/setup.sh installs it)"; exit 77; }
done
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_prometheus
