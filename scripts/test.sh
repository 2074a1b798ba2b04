#!/usr/bin/env bash
# Sets up a fresh machine (packages + build), then runs every test that needs no GPU.
# GPU tests carry the ctest label `gpu` and run on the H200 through bench/run-gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/setup.sh
t1=$(date +%s)
echo "test: ctest excludes the label 'gpu' (no GPU here; bench/run-gpu.sh runs those on the H200)"
ctest --test-dir "${DSV4_BUILD_DIR:-build}" -LE gpu --output-on-failure -j "$(nproc)" --timeout 900
t2=$(date +%s)
echo "test: setup+build $((t1 - t0)) s, tests $((t2 - t1)) s"
