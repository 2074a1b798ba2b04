#!/usr/bin/env bash
# The one entry point for GPU work. Here (no GPU): builds and stages .carry/ (scripts/stage-gpu.sh).
# On the H200 (the device call carries .carry): runs the GPU tests and checks from the staged
# binaries, writes logs under $OUT, and prints a summary table last (each step's result also in
# $OUT/steps.txt, the kernel and step rows in $OUT/table.md: a call's cut output loses neither).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  exec scripts/stage-gpu.sh
fi

STAGE=.carry
OUT=${OUT:-/tmp/dsv4-gpu-out}
# Logs go to one folder, packed into one archive at the end (the device call returns few files).
LOGS="$OUT/logs"
mkdir -p "$LOGS"
# Packed however the run ends (a call's time limit included): a device call returns only a few files.
pack() { [ -d "$LOGS" ] && tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"; }
trap pack EXIT
trap 'exit 124' TERM INT
# DSV4_GPU_DEADLINE (seconds from now, default 540): the serving run is cut short to end before it.
deadline=$((SECONDS + ${DSV4_GPU_DEADLINE:-540}))
# cuBLASLt comes from the machine's CUDA wheels (too large to carry); the binaries need its .so.13.
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null ||
  dirname "$(find / -name 'libcublasLt.so.13*' -print -quit 2>/dev/null)")
# The golden sets: the repository's (tests/data, in the working tree) and any extra ones staged.
export DSV4_DATA="$PWD/tests/data" DSV4_SHARED="$PWD/$STAGE/shared" LD_LIBRARY_PATH="$PWD/$STAGE/bin/lib:$cublas_dir:${LD_LIBRARY_PATH:-}"
unxz_file() {  # xz where the machine has it, else Python's lzma
  if command -v xz >/dev/null; then
    xz -d -f "$1"
  else
    python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[1][:-3], "wb") as o: shutil.copyfileobj(i, o)' "$1" && rm -f "$1"
  fi
}
for z in "$STAGE"/bin/*.xz "$STAGE"/bin/lib/*.xz; do  # stage-gpu.sh packs these
  [ -e "$z" ] && unxz_file "$z" && chmod +x "${z%.xz}"
done
for z in "$STAGE"/bin/*.gz "$STAGE"/bin/lib/*.gz "$STAGE"/shared/tokenizer/*.gz; do  # the tokenizer (and older carries)
  [ -e "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"
done
[ -x "$STAGE/bin/dsv4" ] || { echo "run-gpu: $STAGE/bin/dsv4 missing: run bench/run-gpu.sh here first and carry .carry"; exit 2; }
declare -a rows
status=0
step() {  # step NAME COMMAND...: runs it, logs under $OUT, records pass/fail and seconds
  local name=$1; shift
  local t0=$EPOCHREALTIME
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
  rows+=("$(printf '%-28s %-6s %8ss  %s' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$dt" "$(tail -n 1 "$LOGS/$name.log" | cut -c1-70)")")
  [ $rc -eq 0 ] || status=1
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader >"$LOGS/gpu.txt"
# One process per test suite: a kernel fault (a sticky CUDA error) then costs only its own suite.
suites=$("$STAGE/bin/test_gpu" --gtest_list_tests 2>/dev/null | grep -E '^[A-Za-z0-9_/]+\.$' | tr -d '.')
# DSV4_GPU_FILTER (a gtest filter): those tests in one process instead of the suites, with the
# variable assignments of DSV4_GPU_FILTER_ENV (e.g. DSV4_GEMM_IMMA=1).
[ -n "${DSV4_GPU_FILTER:-}" ] && suites=
[ -n "${DSV4_GPU_FILTER:-}" ] && step gpu-filtered env ${DSV4_GPU_FILTER_ENV:-} timeout "${DSV4_GPU_SUITE_TIMEOUT:-300}" "$STAGE/bin/test_gpu" \
  --gtest_filter="$DSV4_GPU_FILTER" --gtest_output=json:"$LOGS/gpu-filtered.json"
# DSV4_GPU_MUTANT (gtest patterns, ':'-separated): test_gpu built from a deliberately broken source
# (stage-gpu.sh's DSV4_GPU_MUTATION) must fail each of them. One process a pattern, each its own step (passing
# when that pattern's tests fail, and failing where it names no test): one test that faults cannot hide
# another that passes (session 43: an illegal address in the first left the second unrun).
if [ -n "${DSV4_GPU_MUTANT:-}" ] && [ -x "$STAGE/bin/test_gpu_mutant" ]; then
  IFS=':' read -r -a mutant_patterns <<<"$DSV4_GPU_MUTANT"
  for m in "${mutant_patterns[@]}"; do
    step "gpu-mutant-fails-${m//[^A-Za-z0-9_]/_}" bash -c \
      '"$0" --gtest_list_tests --gtest_filter="$1" | grep -q "^  " && ! timeout "${DSV4_GPU_SUITE_TIMEOUT:-300}" "$0" --gtest_filter="$1"' \
      "$STAGE/bin/test_gpu_mutant" "$m"
  done
fi
for suite in $suites; do
  case "$suite" in DISABLED_*) continue ;; esac
  [ -n "${DSV4_GPU_TESTS:-}" ] && ! echo "$suite" | grep -Eq "$DSV4_GPU_TESTS" && continue
  # DSV4_GPU_TESTS_SKIP (an ERE, as DSV4_GPU_TESTS): suites left out, e.g. those an earlier call ran.
  [ -n "${DSV4_GPU_TESTS_SKIP:-}" ] && echo "$suite" | grep -Eq "$DSV4_GPU_TESTS_SKIP" && continue
  step "gpu-$suite" timeout "${DSV4_GPU_SUITE_TIMEOUT:-300}" "$STAGE/bin/test_gpu" --gtest_filter="$suite.*" \
    --gtest_output=json:"$LOGS/gpu-$suite.json"
done
# The golden sets on both tiers (spec/NUMERICS.md), decode steps through CUDA graphs (the engine's
# default) and eagerly; each must pass its tier's thresholds. The exact tier gives the CPU's numbers
# (also with every block sum on the SIMT kernels); the fast tier is run twice and must repeat its bits.
# DSV4_GPU_GOLDEN=0 leaves them out (a call that only times).
golden_sets=()
[ "${DSV4_GPU_GOLDEN:-1}" = 1 ] && for g in "$DSV4_DATA"/golden/*/ "$DSV4_SHARED"/golden/*/; do
  [ -f "$g/tolerance.json" ] && golden_sets+=("${g%/}")
done
for g in "${golden_sets[@]}"; do
  set=$(basename "$g")
  step "golden-fast-$set" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics fast
  step "golden-fast-again-$set" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics fast
  if [ -f "$LOGS/golden-fast-$set.log" ] && ! cmp -s <(grep '^{' "$LOGS/golden-fast-$set.log") \
      <(grep '^{' "$LOGS/golden-fast-again-$set.log"); then
    rows+=("$(printf '%-28s %-6s %8ss  %s' "golden-fast-determinism-$set" FAIL - "two fast runs differ")")
    status=1
  fi
  step "golden-fast-eager-$set" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics fast --step-mode eager
  # The replay gate: each fast op fed the CPU's exact-tier outputs, held to its gate alone.
  step "golden-replay-$set" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics fast --compare-ops cpu --replay
  step "golden-exact-$set" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics exact
  step "golden-exact-eager-$set" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics exact --step-mode eager
  step "golden-exact-simt-$set" env DSV4_GEMM_IMMA=0 "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --numerics exact
done
# DSV4_GPU_GOLDEN_ENV (variable assignments, e.g. DSV4_MOE_SIDE=1): both sets on both tiers under them.
if [ -n "${DSV4_GPU_GOLDEN_ENV:-}" ]; then
  for g in "${golden_sets[@]}"; do
    for tier in fast exact; do
      step "golden-env-$tier-$(basename "$g")" env $DSV4_GPU_GOLDEN_ENV "$STAGE/bin/dsv4" golden-check "$g" \
        --backend cuda --numerics $tier
    done
  done
fi
# DSV4_GPU_SANITIZE (a gtest filter): compute-sanitizer's racecheck and memcheck over those tests.
if [ -n "${DSV4_GPU_SANITIZE:-}" ]; then
  for tool in racecheck memcheck; do
    step "sanitize-$tool" timeout "${DSV4_GPU_SUITE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 3 "$STAGE/bin/test_gpu" \
      --gtest_filter="$DSV4_GPU_SANITIZE"
  done
fi
# DSV4_GPU_NCU=1: Nsight Compute over a few launches of one kernel in some kernel-bench rows: speed of
# light, warp states, memory and occupancy. DSV4_GPU_NCU_SPECS: space-separated ROWS:KERNEL[:SKIP:COUNT]
# (a DSV4_KERNELS list, a kernel regex, launches to skip and to profile: default 2 and 4; more than 4
# launches profile only speed of light and launch statistics, e.g. every kernel of one call:
# moe:.:0:24), default the tensor-core GEMM in the GEMM rows.
if [ "${DSV4_GPU_NCU:-0}" = 1 ] && [ -x "$STAGE/bin/gpu_kernels_bench" ]; then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  for spec in ${DSV4_GPU_NCU_SPECS:-gemm:imma_block_kernel}; do
    IFS=: read -r ncu_rows ncu_kernel ncu_skip ncu_count <<<"$spec"
    ncu_sections="--section SpeedOfLight --section LaunchStats"
    [ "${ncu_count:-4}" -le 4 ] && ncu_sections="$ncu_sections --section WarpStateStats --section MemoryWorkloadAnalysis \
      --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats --section SourceCounters"
    step "ncu-$ncu_rows-${ncu_kernel//[^A-Za-z0-9_]/}" env DSV4_KERNELS="$ncu_rows" "$ncu_bin" --clock-control none -k "regex:$ncu_kernel" \
      --launch-skip "${ncu_skip:-2}" --launch-count "${ncu_count:-4}" $ncu_sections "$STAGE/bin/gpu_kernels_bench"
  done
fi
# DSV4_GPU_E2E (test modules of tests/e2e, e.g. "test_structured_output test_robustness"): each against
# `dsv4 serve --backend cuda` on the embedded model. The Python packages they need travel as wheels in
# .whl (`DSV4_GPU_WHEELS=1 bash bench/run-gpu.sh` here fetches them; carry .whl with .carry).
if [ -n "${DSV4_GPU_E2E:-}" ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/dsv4-site \
      .whl/*.whl >"$LOGS/e2e-wheels.log" 2>&1 && export PYTHONPATH=/tmp/dsv4-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  for module in $DSV4_GPU_E2E; do
    step "e2e-$module" env DSV4_BIN="$PWD/$STAGE/bin/dsv4" DSV4_E2E_SERVE_ARGS="--backend cuda" \
      DSV4_TOKENIZER="${DSV4_TOKENIZER:-$PWD/$STAGE/shared/tokenizer/tokenizer.json}" \
      bash -c 'cd tests/e2e && timeout "${DSV4_GPU_SUITE_TIMEOUT:-300}" python3 -m unittest -v "$0"' "$module"
  done
fi
# DSV4_GPU_HOST_TIER=1: M2.6's agent-like workload with the KV host tier and without (bench/host-tier-gpu.sh).
[ "${DSV4_GPU_HOST_TIER:-0}" = 1 ] && step host-tier bash bench/host-tier-gpu.sh "$PWD/$STAGE/bin/dsv4" "$LOGS"
# DSV4_GPU_PREEMPT=1: preemption by recompute under GPU memory pressure (bench/preempt-gpu.sh).
[ "${DSV4_GPU_PREEMPT:-0}" = 1 ] && step preempt bash bench/preempt-gpu.sh "$PWD/$STAGE/bin/dsv4" "$LOGS"
# DSV4_GPU_COMPARE=1: where the CUDA backend parts from the CPU backend on the golden patterns, op by op.
if [ "${DSV4_GPU_COMPARE:-0}" = 1 ]; then
  for g in "${golden_sets[@]}"; do
    step "compare-ops-$(basename "$g")" "$STAGE/bin/dsv4" golden-check "$g" --backend cuda --compare-ops cpu
  done
fi
# DSV4_GPU_FLASH=1: generate the flash-attn preset on the GPU machine (never carried) and inspect it.
# Its ~26 GB go to memory (/dev/shm) where the machine has it: on its disk, writing them took 162 s.
flash=/tmp/dsv4-flash-attn
shm_kb=$(df -k --output=avail /dev/shm 2>/dev/null | tail -n 1)
[ -w /dev/shm ] && [ "${shm_kb:-0}" -gt $((40 << 20)) ] && flash=/dev/shm/dsv4-flash-attn
if [ "${DSV4_GPU_FLASH:-0}" = 1 ]; then
  df -h /dev/shm /tmp >"$LOGS/df.txt" 2>&1
  # DSV4_GPU_FLASH_LAYERS=N: only N layers (per-op profiles in a fraction of the time; not the M1.8 rows).
  # A warm machine still holds the last call's preset (same layers): reused.
  if [ -f "$flash/.complete-${DSV4_GPU_FLASH_LAYERS:-all}" ]; then
    rows+=("$(printf '%-28s %-6s %8ss  %s' make-tiny-flash-attn reused - "$flash")")
  else
    rm -rf "$flash"
    step make-tiny-flash-attn "$STAGE/bin/dsv4" make-tiny --preset flash-attn --out "$flash" \
      ${DSV4_GPU_FLASH_LAYERS:+--layers "$DSV4_GPU_FLASH_LAYERS"} && touch "$flash/.complete-${DSV4_GPU_FLASH_LAYERS:-all}"
  fi
  step inspect-flash-attn "$STAGE/bin/dsv4" inspect "$flash"
fi
# DSV4_GPU_BENCH=1: the benchmark harness (docs/perf.md): ceilings and PyTorch peers, our kernels,
# model steps of the flash-attn preset and a serving run against it; one joined table at the end.
if [ "${DSV4_GPU_BENCH:-0}" = 1 ]; then
  [ -x "$STAGE/bin/gpu_kernels_bench" ] && step gpu-kernels "$STAGE/bin/gpu_kernels_bench"
  # DSV4_GPU_PEER=0 / DSV4_GPU_STEP=0 / DSV4_GPU_SERVE=0 leave out the PyTorch peers (not the ceilings,
  # a few seconds: the table's fractions need them) / model steps / serving.
  if [ "${DSV4_GPU_PEER:-1}" = 1 ]; then
    step torch-peer python3 bench/peer_torch.py ${DSV4_GPU_BENCH_QUICK:+--quick}
  else
    step torch-peer python3 bench/peer_torch.py --ceilings
  fi
  if [ -d "$flash" ]; then
    if [ "${DSV4_GPU_STEP:-1}" = 1 ]; then
      # Decode rows replay CUDA graphs; --compare-eager reruns each row's last step eagerly (logit error).
      # DSV4_STEP_PREFILL_CHUNK: the prefill in steps of that many tokens (a 128K prompt: one step's
      # activations do not fit beside the KV pool). DSV4_STEP_MIXED (comma list): per decode row, mixed
      # steps of its decodes and a prompt chunk of each size (serving under load), with the host's issue time.
      step bench-step "$STAGE/bin/dsv4" bench step "$flash" --backend cuda --json --compare-eager \
        --batch "${DSV4_STEP_BATCH:-1,8,32}" --context "${DSV4_STEP_CONTEXT:-8192,131072}" --prefill "${DSV4_STEP_PREFILL:-8192}" \
        --prefill-chunk "${DSV4_STEP_PREFILL_CHUNK:-0}" ${DSV4_STEP_MIXED:+--mixed "$DSV4_STEP_MIXED"}
      # DSV4_GPU_STEP_EXACT=1: the same rows on the exact tier (the CPU's bits), for comparison.
      [ "${DSV4_GPU_STEP_EXACT:-0}" = 1 ] && step bench-step-exact "$STAGE/bin/dsv4" bench step "$flash" --backend cuda \
        --json --numerics exact --batch "${DSV4_STEP_BATCH:-1,8,32}" --context "${DSV4_STEP_CONTEXT:-8192,131072}" \
        --prefill "${DSV4_STEP_PREFILL:-8192}"
      # DSV4_GPU_STEP_EAGER=1: the same decode rows without graphs.
      [ "${DSV4_GPU_STEP_EAGER:-0}" = 1 ] && step bench-step-eager "$STAGE/bin/dsv4" bench step "$flash" --backend cuda \
        --json --enforce-eager --batch "${DSV4_STEP_BATCH:-1,8,32}" --context "${DSV4_STEP_CONTEXT:-8192,131072}" --prefill 0
      # DSV4_GPU_STEP_ENV (variable assignments, e.g. DSV4_GEMM_IMMA=0): the decode (and mixed) rows again under them, at
      # the contexts of DSV4_GPU_STEP_ENV_CONTEXT (default 8K) and the prefill of DSV4_GPU_STEP_ENV_PREFILL (none),
      # in steps of DSV4_STEP_PREFILL_CHUNK as above.
      # Several sets, ';'-separated: a run each (bench-step-env-1, -2, ...).
      if [ -n "${DSV4_GPU_STEP_ENV:-}" ]; then
        IFS=';' read -r -a env_sets <<<"$DSV4_GPU_STEP_ENV"
        for i in "${!env_sets[@]}"; do
          step "bench-step-env-$((i + 1))" env ${env_sets[$i]} "$STAGE/bin/dsv4" bench step "$flash" \
            --backend cuda --json --batch "${DSV4_STEP_BATCH:-1,8,32}" --context "${DSV4_GPU_STEP_ENV_CONTEXT:-8192}" \
            --prefill "${DSV4_GPU_STEP_ENV_PREFILL:-0}" --prefill-chunk "${DSV4_STEP_PREFILL_CHUNK:-0}" \
            ${DSV4_STEP_MIXED:+--mixed "$DSV4_STEP_MIXED"}
        done
      fi
      # DSV4_GPU_NCU_STEP=BATCH:SKIP:COUNT[:KERNEL]: Nsight Compute's duration of COUNT kernels of eager decode
      # steps (8K context) after SKIP launches: where a step's device time goes, launch by launch. With a
      # kernel regex, only its launches count, and up to 4 of them get the full sections (ncu-step-kernel.log).
      if [ -n "${DSV4_GPU_NCU_STEP:-}" ]; then
        IFS=: read -r ncu_batch ncu_skip ncu_count ncu_kernel <<<"$DSV4_GPU_NCU_STEP"
        ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
        ncu_run=(--clock-control none --launch-skip "$ncu_skip" --launch-count "$ncu_count")
        ncu_target=("$STAGE/bin/dsv4" bench step "$flash" --backend cuda --enforce-eager --batch "$ncu_batch"
          --context 8192 --prefill 0 -r 1)
        # DSV4_GPU_NCU_NAME_BASE=demangled: the regex sees template arguments (one instance of a kernel);
        # the sections' tables (warp stall reasons) printed where this Nsight Compute can.
        ncu_run+=(--kernel-name-base "${DSV4_GPU_NCU_NAME_BASE:-function}")
        if [ -n "$ncu_kernel" ]; then
          "$ncu_bin" --help 2>/dev/null | grep -q -- --print-details && ncu_run+=(--print-details all)
          step ncu-step-kernel "$ncu_bin" "${ncu_run[@]}" -k "regex:$ncu_kernel" --section SpeedOfLight \
            --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
            --section SourceCounters "${ncu_target[@]}"
        else
          step ncu-step "$ncu_bin" "${ncu_run[@]}" --csv --page details --section SpeedOfLight "${ncu_target[@]}"
          python3 bench/ncu_durations.py "$LOGS/ncu-step.log" >"$LOGS/ncu-step-durations.txt" 2>&1
        fi
      fi
      # DSV4_GPU_PROFILE_BATCH / DSV4_GPU_PROFILE_CONTEXT: the profiled decode rows (e.g. 1M context: where
      # a long context's extra time goes): each row's kernel timeline as it runs (graphs), then its op profile.
      # DSV4_GPU_PROFILE=0 leaves it out.
      [ "${DSV4_GPU_PROFILE:-1}" = 1 ] && step bench-profile "$STAGE/bin/dsv4" bench step "$flash" --backend cuda \
        --batch "${DSV4_GPU_PROFILE_BATCH:-1,32}" --context "${DSV4_GPU_PROFILE_CONTEXT:-8192}" --prefill 2048 -r 1 \
        --timeline --profile
      # DSV4_GPU_STEP_EXTRA: more bench step runs, ';'-separated argument lists (rows that must not share a
      # run: a batch x context whose KV does not fit beside another's, a second profile).
      if [ -n "${DSV4_GPU_STEP_EXTRA:-}" ]; then
        IFS=';' read -r -a extras <<<"$DSV4_GPU_STEP_EXTRA"
        for i in "${!extras[@]}"; do
          step "bench-step-extra-$((i + 1))" "$STAGE/bin/dsv4" bench step "$flash" --backend cuda ${extras[$i]}
        done
      fi
      # DSV4_GPU_STEP_SIMT=1: prefill and a profile with every block sum on the SIMT kernels.
      if [ "${DSV4_GPU_STEP_SIMT:-0}" = 1 ]; then
        step bench-step-simt env DSV4_GEMM_IMMA=0 "$STAGE/bin/dsv4" bench step "$flash" --backend cuda --json \
          --batch 1 --context 8192 --prefill "${DSV4_STEP_PREFILL:-8192}"
        step bench-profile-simt env DSV4_GEMM_IMMA=0 "$STAGE/bin/dsv4" bench step "$flash" --backend cuda --batch 1 \
          --context 8192 --prefill 2048 -r 1 --profile
      fi
    fi
    # DSV4_GPU_AB: the same bench step runs (';'-separated argument lists) from the base binary that
    # stage-gpu.sh's DSV4_GPU_BASE_BIN staged (dsv4_base) and from this one, in turn, twice (base, new, base,
    # new): a change against its base in one call on one machine, the calls' drift kept out (with DSV4_GPU_BENCH=1
    # and DSV4_GPU_FLASH=1; logs/ab.md and the end of table.md: bench/ab_table.py).
    if [ -n "${DSV4_GPU_AB:-}" ] && [ ! -x "$STAGE/bin/dsv4_base" ]; then
      rows+=("$(printf '%-28s %-6s %8ss  %s' ab FAIL - "DSV4_GPU_AB without a base: stage with DSV4_GPU_BASE_BIN")")
      status=1
    elif [ -n "${DSV4_GPU_AB:-}" ]; then
      IFS=';' read -r -a ab_runs <<<"$DSV4_GPU_AB"
      for i in "${!ab_runs[@]}"; do
        for round in 1 2; do
          for side in base new; do
            bin="$STAGE/bin/dsv4"
            [ "$side" = base ] && bin="$STAGE/bin/dsv4_base"
            step "ab-$((i + 1))-$side-$round" "$bin" bench step "$flash" --backend cuda ${ab_runs[$i]}
          done
        done
      done
      python3 bench/ab_table.py "$LOGS" >"$LOGS/ab.md" 2>&1
    fi
    if [ "${DSV4_GPU_SERVE:-1}" = 1 ]; then
      timeout $((deadline - SECONDS > 30 ? deadline - SECONDS : 30)) bash bench/serve-gpu.sh "$STAGE/bin/dsv4" "$flash" "$LOGS" >"$LOGS/serve-bench.log" 2>&1
      rows+=("$(printf '%-28s %-6s %8ss  %s' serve-bench "$([ $? -eq 0 ] && echo ok || echo FAIL)" - "$(tail -n 1 "$LOGS/serve-bench.log" | cut -c1-70)")")
    fi
  fi
  python3 bench/gpu_table.py "$LOGS/gpu-kernels.log" "$LOGS/torch-peer.log" "$LOGS/bench-step.log" \
    "$LOGS/bench-step-eager.log" >"$OUT/table.md"
  [ -f "$LOGS/ab.md" ] && { echo; echo "A/B (dsv4_base against dsv4, runs in turn):"; cat "$LOGS/ab.md"; } >>"$OUT/table.md"
fi
# DSV4_GPU_MULTI=1 (a kind of two or more GPUs; M2.7's rows): the collectives' ceilings over every GPU
# (bench comm: nccl-tests' bus bandwidth), then decode steps of the real V4-Flash dims with dummy weights
# (all 256 experts, 43 layers) in each layout of DSV4_MULTI_LAYOUTS (';'-separated; default TP, DP+EP and
# TP+EP over every GPU) at DSV4_MULTI_BATCH x DSV4_MULTI_CONTEXT.
if [ "${DSV4_GPU_MULTI:-0}" = 1 ]; then
  gpus=$(nvidia-smi -L | wc -l)
  step bench-comm "$STAGE/bin/dsv4" bench comm --backend cuda -n "$gpus" --mib "${DSV4_MULTI_MIB:-1,16,128,512}" --json
  IFS=';' read -r -a layouts <<<"${DSV4_MULTI_LAYOUTS:--tp $gpus;-dp $gpus --enable-expert-parallel;-tp 2 -dp $((gpus / 2)) --enable-expert-parallel}"
  for layout in "${layouts[@]}"; do
    step "bench-step-multi-$(echo $layout | tr -d ' -')" timeout "${DSV4_GPU_SUITE_TIMEOUT:-300}" "$STAGE/bin/dsv4" \
      bench step "$DSV4_DATA/configs/deepseek-v4-flash" --load-format dummy --backend cuda $layout --json \
      --batch "${DSV4_MULTI_BATCH:-1,32,128}" --context "${DSV4_MULTI_CONTEXT:-8192,131072}" --prefill 0
  done
  # DSV4_MULTI_SERVE (serve's layout flags, e.g. "-tp 8"): 8K in / 1K out at c16 and c64, 4 x c prompts each.
  if [ -n "${DSV4_MULTI_SERVE:-}" ]; then
    mkdir -p "$LOGS/multi-serve"
    timeout $((deadline - SECONDS > 30 ? deadline - SECONDS : 30)) env DSV4_SERVE_ARGS="--load-format dummy $DSV4_MULTI_SERVE" \
      DSV4_BENCH_CONCURRENCY="16 64" DSV4_BENCH_PROMPTS_X=4 DSV4_BENCH_MAX_SEQS=128 \
      bash bench/serve-gpu.sh "$STAGE/bin/dsv4" "$DSV4_DATA/configs/deepseek-v4-flash" "$LOGS/multi-serve" \
      >"$LOGS/multi-serve.log" 2>&1
    rows+=("$(printf '%-28s %-6s %8ss  %s' multi-serve "$([ $? -eq 0 ] && echo ok || echo FAIL)" - "$(tail -n 1 "$LOGS/multi-serve.log" | cut -c1-70)")")
  fi
fi
for b in "$STAGE"/bin/*_bench; do
  case "$(basename "$b")" in gpu_*) continue ;; esac
  [ -x "$b" ] && step "$(basename "$b")" "$b" --benchmark_min_time=0.2
done

echo
echo "dsv4 GPU run: commit $(cat "$STAGE/COMMIT" | tr '\n' ' '), $(date -u +%Y-%m-%dT%H:%MZ), $(cat "$LOGS/gpu.txt")"
printf '%-28s %-6s %9s  %s\n' step result time "last line"
printf '%s\n' "${rows[@]}" | tee "$OUT/steps.txt"
# The first failures of each failed step, so the call's output alone says what broke.
for f in "$LOGS"/*.log; do
  grep -q -E '^\[  FAILED  \]|^E [0-9:.]+ |Traceback' "$f" || continue
  echo "--- $(basename "$f")"
  grep -E -A4 'Failure$|^E [0-9:.]+ |Error' "$f" | head -n 30
done
for f in "$LOGS"/compare-ops-*.log "$LOGS"/golden-replay-*.log; do
  [ -f "$f" ] && { echo "--- $(basename "$f")"; grep -v "^[IWE] " "$f" | head -n 40; }
done
[ -f "$LOGS/ncu-step-durations.txt" ] && sed -n '1p;/^by kernel/,$p' "$LOGS/ncu-step-durations.txt" | head -n 60
[ -f "$LOGS/bench-profile.log" ] && grep -E '^(profile|  )' "$LOGS/bench-profile.log" | head -130
for f in "$LOGS"/golden-*.log; do  # each golden run's JSON line
  [ -f "$f" ] && printf '%-36s %s\n' "$(basename "$f" .log)" "$(grep '^{' "$f" | cut -c1-200)"
done
[ -f "$LOGS/bench-comm.log" ] && { echo "--- bench-comm"; grep '^{' "$LOGS/bench-comm.log" | cut -c1-200; }
for f in "$LOGS"/bench-step*.log; do  # decode rows (graphs / eager) and graph use
  [ -f "$f" ] && { echo "--- $(basename "$f")"; grep -E '"test"|graphs|decode steps|against eager' "$f" | cut -c1-240 | head -20; }
done
[ -f "$OUT/table.md" ] && { echo; cat "$OUT/table.md"; grep -h -A14 'Serving Benchmark' "$LOGS"/serve-c*.log 2>/dev/null | head -60; }
exit $status
