#!/usr/bin/env bash
# The multi-GPU flags as vLLM spells them (-tp/--tensor-parallel-size, -dp/--data-parallel-size,
# --enable-expert-parallel) on every command that runs or plans a model: the same help lines, resolved
# into the engine config (also from DSV4_<FLAG>), kv-plan's per-GPU plan of the real V4-Flash config,
# a layout the model cannot take refused with one that works, and generate, golden-check and bench step
# on tensor-parallel ranks.
set -euo pipefail
DSV4=$1
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/../testing/test_data.sh"
source "$(dirname "$0")/../testing/flag_env.sh"
CFG="$DATA/configs/deepseek-v4-flash/config.json"

section() { awk -v h="$1:" '$0 == h { on = 1; next } on && /^$/ { exit } on'; }
ref=$($DSV4 serve --help | section Parallelism)
[ "$(grep -c '^  --' <<<"$ref")" -eq 3 ] || fail "serve's Parallelism section: $ref"
for c in generate "bench latency" "bench step" golden-check kv-plan inspect; do
  diff <(echo "$ref") <($DSV4 $c --help | section Parallelism) || fail "$c: parallel flags differ from serve's"
done

resolved() { $DSV4 serve --print-engine-config "$@"; }
want='"tensor-parallel-size":2,"data-parallel-size":4,"enable-expert-parallel":true'
grep -q "$want" <<<"$(resolved -tp 2 -dp=4 --enable-expert-parallel)" || fail "-tp 2 -dp=4: $(resolved -tp 2 -dp=4)"
grep -q "$want" <<<"$(resolved --tensor-parallel-size=2 --data-parallel-size 4 --enable-expert-parallel)" ||
  fail "long forms not resolved"
grep -q "$want" <<<"$(DSV4_TENSOR_PARALLEL_SIZE=2 DSV4_DATA_PARALLEL_SIZE=4 DSV4_ENABLE_EXPERT_PARALLEL=1 resolved)" ||
  fail "DSV4_TENSOR_PARALLEL_SIZE not read: $(DSV4_TENSOR_PARALLEL_SIZE=2 resolved)"
grep -q '"tensor-parallel-size":1,"data-parallel-size":1,"enable-expert-parallel":false' <<<"$(resolved)" ||
  fail "defaults: $(resolved)"

# V4-Flash on 2 x 2 GPUs with expert parallelism: each rank 64 experts and half the heads, under 141 GB.
$DSV4 kv-plan "$CFG" -tp 2 -dp 2 --enable-expert-parallel --context 131072 --kv-memory 40GiB --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
p = j["parallel"]
assert (p["tensor_parallel_size"], p["data_parallel_size"], p["world_size"]) == (2, 2, 4), p
assert [r["experts"] for r in p["ranks"]] == [[0, 64], [64, 128], [128, 192], [192, 256]], p["ranks"]
assert [r["heads"] for r in p["ranks"]] == [[0, 32], [32, 64], [0, 32], [32, 64]], p["ranks"]
assert all(30e9 < r["weight_bytes"] < 0.5 * 141e9 for r in p["ranks"]), p["ranks"]
assert p["max_sequences"] == 2 * j["max_sequences"], p
' || fail "kv-plan -tp 2 -dp 2 --enable-expert-parallel"
text=$($DSV4 kv-plan "$CFG" -tp 8 --context 131072)
grep -q "rank 7 (dp 0, tp 7): heads 56-63" <<<"$text" || fail "kv-plan -tp 8 text: $text"

# Refusals: a layout the model cannot take names ones that work; one rank's engine refuses several.
set +e
bad=$($DSV4 kv-plan "$CFG" -tp 3 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || fail "kv-plan -tp 3 accepted"
grep -q "does not divide the 64 attention heads; layouts of 3 GPUs that work: tp 1 x dp 3" <<<"$bad" || fail "-tp 3: $bad"
set +e
bad=$($DSV4 kv-plan "$CFG" -dp 3 --enable-expert-parallel 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "3 expert-parallel ranks do not divide the 256 routed experts" <<<"$bad" || fail "-dp 3 EP: $bad"
# The engine runs a replica's tensor-parallel ranks as threads: the same text as one rank, sliced
# experts or owned.
gen() { $DSV4 generate --prompt "The capital of France is" --max-tokens 12 --temperature 0.8 --seed 5 "$@" 2>/dev/null; }
one=$(gen)
[ -n "$one" ] || fail "generate gave nothing"
[ "$(gen -tp 2)" = "$one" ] || fail "generate -tp 2 differs from one rank"
[ "$(gen -tp 4 --enable-expert-parallel)" = "$one" ] || fail "generate -tp 4 --enable-expert-parallel differs"
# golden-check's figures on a tiny golden set: one rank's, sliced experts or owned.
GOLD="$DATA/golden/tiny-a"
figures() { $DSV4 golden-check "$GOLD" "$@" 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(json.dumps([j["rms_ratio"], j["argmax_agreement"], j["blocks"], j["pass"]]))'; }
ref=$(figures)
[ "$(figures -tp 2)" = "$ref" ] || fail "golden-check -tp 2: $(figures -tp 2) != $ref"
[ "$(figures -tp 4 --enable-expert-parallel)" = "$ref" ] || fail "golden-check -tp 4 --enable-expert-parallel differs"
# bench step times a replica's ranks stepping together (rank 0's rows, the layout named).
$DSV4 bench step "$GOLD" --batch 1,2 --context 300 --prefill 200 -r 1 --json -tp 2 --enable-expert-parallel 2>/dev/null |
  python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert [r["test"] for r in rows] == ["decode", "decode", "prefill"], rows
assert all(r["parallel"] == "tp 2 x dp 1, expert-parallel" and r["ms"] > 0 for r in rows), rows
' || fail "bench step -tp 2 --enable-expert-parallel"
# Data-parallel replicas behind the one front end: the request's tokens are one rank's.
[ "$(gen -dp 2)" = "$one" ] || fail "generate -dp 2 differs from one rank"
[ "$(gen -tp 2 -dp 2 --enable-expert-parallel)" = "$one" ] || fail "generate -tp 2 -dp 2 --enable-expert-parallel differs"
# golden-check on every rank of two expert-parallel replicas: one rank's figures.
[ "$(figures -dp 2 --enable-expert-parallel)" = "$ref" ] || fail "golden-check -dp 2 --enable-expert-parallel differs"
# bench comm: each collective between two CPU ranks, with nccl-tests' bandwidths.
$DSV4 bench comm --backend cpu -n 2 --mib 1 -r 2 --json 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
assert [r["test"] for r in rows] == ["all_gather", "all_reduce", "all_to_all"], rows
assert all(r["ranks"] == 2 and r["bytes"] == 1 << 20 and r["collectives"] == "host" for r in rows), rows
assert all(r["ms"] > 0 and r["busbw_GBps"] > 0 for r in rows), rows
ag, ar = rows[0], rows[1]
assert abs(ar["busbw_GBps"] / ar["algbw_GBps"] - 1.0) < 1e-9 and abs(ag["busbw_GBps"] / ag["algbw_GBps"] - 0.5) < 1e-9
' || fail "bench comm"
# Several hosts meet over NCCL: the CPU backend is refused with the reason.
set +e
bad=$($DSV4 bench comm --backend cpu -n 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "ranks on several hosts meet over NCCL: use --backend cuda" <<<"$bad" || fail "--nnodes 2: $bad"
echo "parallel_flags: ok"
