#!/usr/bin/env bash
# preempt-gpu.sh DSV4 OUT: preemption by recompute under GPU memory pressure (M2.2 item 4). `dsv4 serve
# --backend cuda` (embedded model, exact tier) with KV for 16K tokens takes 4 concurrent 7K-in / 2K-out
# requests: two start together and outgrow the pages as they decode, so the scheduler must preempt one
# and resume it by recompute. Every request must
# complete, /metrics must count preemptions and, once idle, no KV page may be held.
set -uo pipefail
DSV4=$1 OUT=$2 PORT=${DSV4_PREEMPT_PORT:-18761}
export DSV4_TOKENIZER=${DSV4_TOKENIZER:-$PWD/.carry/shared/tokenizer/tokenizer.json}
source "$(dirname "$0")/serve-lib.sh"
trap stop_server EXIT
start_server "$OUT/preempt-serve.log" "$PORT" "$DSV4" serve --backend cuda --numerics exact --host 127.0.0.1 \
  --port "$PORT" --kv-cache-memory 24MiB --max-num-seqs 4 --max-num-batched-tokens 2048 --max-model-len 10240
"$DSV4" bench serve --base-url "http://127.0.0.1:$PORT" --random-input-len 7000 --random-output-len 2048 \
  --ignore-eos --num-prompts 4 --max-concurrency 4 --json --disable-tqdm >"$OUT/preempt.json" 2>"$OUT/preempt.err"
sleep 2
python3 - "$OUT/preempt.json" "http://127.0.0.1:$PORT/metrics" <<'PY'
import json, sys, urllib.request
r = json.load(open(sys.argv[1]))
m = {}
for line in urllib.request.urlopen(sys.argv[2]).read().decode().splitlines():
    if line and not line.startswith("#"):
        name, value = line.rsplit(" ", 1)
        m[name.split("{")[0]] = m.get(name.split("{")[0], 0.0) + float(value)
pre = m.get("vllm:num_preemptions_total", m.get("vllm:num_preemptions", 0.0))
used = m.get("dsv4:kv_pool_used_pages", m.get("dsv4:kv_used_pages", -1.0))
print(f"completed {r['completed']} of 4, failed {r['failed']}, output tokens {r['total_output_tokens']}, "
      f"preemptions {pre:.0f}, KV pages still used {used:.0f}, duration {r.get('duration', 0):.1f} s")
ok = r["completed"] == 4 and r["failed"] == 0 and r["total_output_tokens"] == 4 * 2048 and pre > 0 and used <= 0
sys.exit(0 if ok else 1)
PY
