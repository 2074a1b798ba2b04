#!/usr/bin/env bash
# `dsv4 bench serve` against a real `dsv4 serve`: prefix_repetition's hit rate against its ideal, the chat
# endpoint, a JSONL dataset, --save-result and the SVG (tests/e2e/test_bench_serve.py).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec python3 -m unittest -v test_bench_serve 2>&1
