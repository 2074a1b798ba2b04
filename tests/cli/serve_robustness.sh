#!/usr/bin/env bash
# Bad-request table, auth, bounded queue, disconnects, keep-alives, engine failure, SIGTERM (tests/e2e).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
python3 -c 'import openai' 2>/dev/null || { echo "serve_robustness: the openai package is missing (scripts/setup.sh installs it)"; exit 1; }
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec python3 -m unittest -v test_robustness 2>&1
