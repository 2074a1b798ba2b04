#!/usr/bin/env bash
# dsv4 kv-plan on the real V4-Flash config: the issue's numbers for three dtype combinations, JSON
# fields, the readable table, the environment mirror of --kv-memory, and refusals of bad input.
set -euo pipefail
DSV4=$1
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/../testing/test_data.sh"
CFG="$DATA/configs/deepseek-v4-flash"

check() {  # dtype flags..., then expected bytes_per_token fixed per_sequence
  local bpt=${*: -3:1} fixed=${*: -2:1} per=${*: -1}
  "$DSV4" kv-plan "$CFG/config.json" --context 1048576 "${@:1:$#-3}" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
bpt, fixed, per = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
assert j["bytes_per_token"] == bpt, j["bytes_per_token"]
assert j["fixed_bytes"] == fixed, j["fixed_bytes"]
assert j["per_sequence_bytes"] == per, j["per_sequence_bytes"]
assert per <= j["allocated_bytes"] <= 1.03 * per, j["allocated_bytes"]
assert j["kv_memory"] == 100 * 2**30 and j["max_sequences"] == j["kv_memory"] // j["allocated_bytes"], j
assert j["v32_estimate_bytes"] == 788 * 43 * 1048576, j["v32_estimate_bytes"]
names = [g["name"] for g in j["groups"]]
assert names == ["swa", "c4.state", "c4.index.state", "c4.kv", "c4.index", "c128.state", "c128.kv"], names
for g in j["groups"]:
    for k in ("layers", "entry_bytes", "entries_per_page", "page_bytes", "bytes_per_token", "fixed_bytes"):
        assert k in g, (g, k)
assert sum(g["bytes_per_token"] for g in j["groups"]) == bpt
assert sum(g["fixed_bytes"] for g in j["groups"]) == fixed
assert len(j["buckets"]) <= 3 and j["max_waste"] <= 0.03, j["buckets"]
' "$bpt" "$fixed" "$per" || fail "kv-plan $*"
}
check 3514.25 15420416 3700378624
check --kv-cache-dtype fp8 --indexer-dtype fp8 3850.25 15420416 4052700160
check --kv-cache-dtype bf16 6880 17842176 7232045056
check --kv-cache-dtype bf16 --indexer-dtype bf16 6880 17842176 7232045056

out=$("$DSV4" kv-plan "$CFG")
for want in "per sequence        3700378624 B (3.446 GiB)" "bytes per token     3514.2500" \
  "fixed per request   15420416 B" "max sequences       29 in 107374182400 B"; do
  grep -qF "$want" <<<"$out" || fail "text output lacks '$want': $out"
done
[ "$(DSV4_KV_MEMORY=200GiB "$DSV4" kv-plan "$CFG" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_sequences"])')" = 58 ] ||
  fail "DSV4_KV_MEMORY not honoured"

# The host tier's capacity: 100 GiB hold 29.0 requests of 1M tokens in the pools' bytes per token.
out=$("$DSV4" kv-plan "$CFG" --kv-offload-bytes 100GiB --json)
python3 -c '
import json, sys
j = json.loads(sys.argv[1])
assert j["kv_offload_bytes"] == 100 * 2**30, j["kv_offload_bytes"]
assert j["host_tier_tokens"] == int(100 * 2**30 / j["allocated_bytes"] * 1048576), j["host_tier_tokens"]
' "$out" || fail "host tier: $out"
grep -qF "host tier           " <<<"$("$DSV4" kv-plan "$CFG" --kv-offload-bytes 1GiB)" || fail "host tier line missing"
if err=$("$DSV4" kv-plan "$CFG" --kv-memory 1GiB 2>&1); then fail "1 GiB for a 1M-token request accepted"; fi
grep -qF "kv-plan: --kv-memory 1073741824 B cannot hold one request of 1048576 tokens (3700592688 B allocated)" <<<"$err" ||
  fail "small memory error: $err"
if err=$("$DSV4" kv-plan "$CFG" --context 0 2>&1); then fail "context 0 accepted"; fi
grep -qF "kv-plan: --context must lie in [1, 4294967296], got 0" <<<"$err" || fail "context error: $err"
if "$DSV4" kv-plan "$CFG" --indexer-dtype fp2 >/dev/null 2>&1; then fail "fp2 indexer accepted"; fi
if "$DSV4" kv-plan "$CFG" --kv-cache-dtype fp16 >/dev/null 2>&1; then fail "fp16 cache accepted"; fi
if "$DSV4" kv-plan "$CFG/missing" >/dev/null 2>&1; then fail "missing config accepted"; fi
echo "kv_plan: ok"
