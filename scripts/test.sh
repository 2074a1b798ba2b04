#!/usr/bin/env bash
# Sets up a fresh machine (packages + build), then runs every test that needs no GPU.
# GPU tests carry the ctest label `gpu` and run on the H200 through bench/run-gpu.sh.
# Nothing may skip: the data every test needs is in the repository (tests/data), and setup.sh
# installs the rest, so a skipped test here is a defect (e.g. a clone that lost its golden sets).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/setup.sh
t1=$(date +%s)
build=${DSV4_BUILD_DIR:-build}
echo "test: ctest excludes the label 'gpu' (no GPU here; bench/run-gpu.sh runs those on the H200)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
ctest --test-dir "$build" -LE gpu --output-on-failure -j "$(nproc)" --timeout 900 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
t2=$(date +%s)
echo "test: setup+build $((t1 - t0)) s, tests $((t2 - t1)) s"
if grep -q '(Skipped)' "$log"; then
  echo "test: FAIL: these tests skipped (every CPU test must run here):"
  grep '(Skipped)' "$log"
  exit 1
fi
exit "$rc"
