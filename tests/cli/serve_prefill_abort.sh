#!/usr/bin/env bash
# A long prefill on the CPU engine (the embedded default model) stops within one chunk of its client
# leaving, streaming or not (tests/e2e/test_prefill_abort.py).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec python3 -m unittest -v test_prefill_abort 2>&1
