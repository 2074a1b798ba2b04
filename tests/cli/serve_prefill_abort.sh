#!/usr/bin/env bash
# A long prefill on the CPU engine (the embedded default model) stops within one chunk of its client
# leaving, streaming or not (tests/e2e/test_prefill_abort.py).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_prefill_abort
