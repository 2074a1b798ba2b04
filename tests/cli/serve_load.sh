#!/usr/bin/env bash
# 200 concurrent streaming requests from `dsv4 bench serve`: no failure, every KV page back (tests/e2e).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_load
