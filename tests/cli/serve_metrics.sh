#!/usr/bin/env bash
# /metrics of a real `dsv4 serve` read with prometheus_client's parser (tests/e2e/test_metrics.py).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_metrics prometheus_client
