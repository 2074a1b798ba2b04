#!/usr/bin/env bash
# Configures and builds dsv4 into build/ (CUDA backend too when nvcc is found); prints timings.
# Extra arguments go to cmake's configure step (e.g. -DDSV4_SANITIZE=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${DSV4_BUILD_DIR:-build}
JOBS=${DSV4_JOBS:-$(nproc)}
t0=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -E 'dsv4:' "$BUILD_DIR.configure.log" || true
t1=$(date +%s)
cuda_s=""
if grep -q 'dsv4: CUDA backend ON' "$BUILD_DIR.configure.log"; then  # timed apart: its budget is 10 min
  cmake --build "$BUILD_DIR" -j "$JOBS" --target dsv4_backend_cuda
  cuda_s=", of which CUDA backend $(($(date +%s) - t1)) s"
fi
# DSV4_TARGETS (space-separated) builds only those targets.
targets=()
for t in ${DSV4_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
t2=$(date +%s)
echo "build: configure $((t1 - t0)) s, compile $((t2 - t1)) s${cuda_s} (${JOBS} jobs, ${BUILD_DIR})"
