#!/usr/bin/env bash
# `dsv4 bench serve` against a real `dsv4 serve`: prefix_repetition's hit rate against its ideal, the chat
# endpoint, a JSONL dataset, --save-result and the SVG (tests/e2e/test_bench_serve.py).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_bench_serve
