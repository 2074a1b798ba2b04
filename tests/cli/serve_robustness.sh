#!/usr/bin/env bash
# Bad-request table, auth, bounded queue, disconnects, keep-alives, engine failure, SIGTERM (tests/e2e).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_robustness openai
