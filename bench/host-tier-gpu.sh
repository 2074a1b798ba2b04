#!/usr/bin/env bash
# host-tier-gpu.sh DSV4 OUT: M2.6's agent-like workload on `dsv4 serve --backend cuda` (the embedded
# model): 64 conversations over 16 shared prefixes of 16K tokens, a device tier of 32 MiB (~78K tokens:
# about 5 of the prefixes), with a 256 MiB host tier and without. Each run leaves its bench output, the
# server's kv_host_tier metrics and log in OUT; last, the pinned host-to-device copy bandwidth (PyTorch),
# the ceiling the restores are judged against.
set -uo pipefail
DSV4=$1 OUT=$2 PORT=${DSV4_HOST_TIER_PORT:-18751}
export DSV4_TOKENIZER=${DSV4_TOKENIZER:-$PWD/.carry/shared/tokenizer/tokenizer.json}
source "$(dirname "$0")/serve-lib.sh"
status=0
for tier in 256MiB 0; do
  start_server "$OUT/host-tier-$tier-serve.log" "$PORT" "$DSV4" serve --backend cuda --host 127.0.0.1 --port "$PORT" \
    --kv-cache-memory 32MiB --max-num-seqs 4 --max-num-batched-tokens 2048 --max-model-len 20000 \
    --kv-offload-bytes "$tier"
  echo "=== host tier $tier"
  "$DSV4" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name prefix_repetition \
    --prefix-repetition-num-prefixes 16 --prefix-repetition-prefix-len 16384 --prefix-repetition-suffix-len 256 \
    --prefix-repetition-output-len 8 --num-prompts 64 --max-concurrency 4 --ignore-eos --seed 1 \
    --result-file "$OUT/host-tier-$tier.json" >"$OUT/host-tier-$tier.log" 2>&1 || status=1
  tail -n 30 "$OUT/host-tier-$tier.log"
  python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" |
    grep -E '^dsv4:(kv_host_tier|prefix_cache)' | tee "$OUT/host-tier-$tier-metrics.txt"
  # The restores' bandwidth: their bytes over their copies' own time (against the pinned copies below).
  awk '/^dsv4:kv_host_tier_restore_bytes_total/ {b += $NF} /^dsv4:kv_host_tier_restore_copy_seconds_total/ {s += $NF}
    END {if (s > 0) printf "restore copies: %.1f MB in %.2f ms, %.1f GB/s\n", b / 1e6, s * 1e3, b / s / 1e9}' \
    "$OUT/host-tier-$tier-metrics.txt"
  stop_server
done
python3 - <<'PY'
import torch
for mib in (1, 8, 64):
    n = mib << 20
    src = torch.empty(n, dtype=torch.uint8).pin_memory()
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(20):
        dst.copy_(src, non_blocking=True)
    b.record()
    torch.cuda.synchronize()
    print(f"pinned host->device {mib} MiB: {20 * n / (a.elapsed_time(b) * 1e-3) / 1e9:.1f} GB/s")
PY
exit $status
