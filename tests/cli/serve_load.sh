#!/usr/bin/env bash
# 200 concurrent streaming requests from `dsv4 bench serve`: no failure, every KV page back (tests/e2e).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec python3 -m unittest -v test_load 2>&1
