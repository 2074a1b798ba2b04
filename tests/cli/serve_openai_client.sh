#!/usr/bin/env bash
# The official OpenAI Python client against a real `dsv4 serve` on the embedded model (tests/e2e).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_openai_client openai
