#!/usr/bin/env bash
# The official OpenAI Python client against a real `dsv4 serve` on the embedded model (tests/e2e).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
python3 -c 'import openai' 2>/dev/null || { echo "serve_openai_client: the openai package is missing (scripts/setup.sh installs it)"; exit 1; }
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec python3 -m unittest -v test_openai_client 2>&1
