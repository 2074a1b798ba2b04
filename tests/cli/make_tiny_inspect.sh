#!/usr/bin/env bash
# dsv4 make-tiny + inspect end to end: the golden README's table, JSON output, the exact error
# for a truncated file, refusals of bad presets.
set -euo pipefail
DSV4=$1
source "$(dirname "$0")/../testing/test_data.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# inspect prints the configuration tiny-a's README tables.
out=$("$DSV4" inspect "$DATA/golden/tiny-a")
for want in "dim              256" "layers           4 + 1 MTP" "compress_ratios  [0, 4, 128, 4, 0]" \
  "heads            4 x 128, rope dims 64" "q_lora_rank      128" "o_groups x rank  2 x 128" \
  "indexer          4 x 128, index_topk 8" "experts          8 routed, top-2, moe_inter_dim 128 (+1 shared)" \
  "hash layers      1" "vocab_size       1024" "dtypes           weights fp8, experts fp4, scales ue8m0"; do
  grep -qF "$want" <<<"$out" || fail "inspect tiny-a lacks '$want'"
done

# make-tiny writes a folder that inspect --json reads back, deterministic from the seed.
"$DSV4" make-tiny --preset tiny --out "$tmp/a" --seed 9 >/dev/null 2>&1
"$DSV4" make-tiny --preset tiny --out "$tmp/b" --seed 9 >/dev/null 2>&1
cmp -s "$tmp/a/model-00001-of-00001.safetensors" "$tmp/b/model-00001-of-00001.safetensors" || fail "make-tiny not deterministic"
"$DSV4" inspect "$tmp/a" --json >"$tmp/a.json"
python3 - "$tmp/a.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["config"]["hidden_size"] == 256, j["config"]
assert j["expert_dtype"] == "fp4"
assert j["dtypes"]["I8"]["tensors"] == 120, j["dtypes"]
kv = j["kv_bytes_per_token"]["fp8 + fp4 indexer"]
assert kv["ratio_4"] == 67.0 and kv["ratio_128"] == 1.5625, kv
assert kv["total"] == 2 * 67.0 + 1.5625, kv
PY

# A truncated shard is refused, naming the file and the first tensor that runs past its end.
cp -r "$DATA/golden/tiny-a" "$tmp/trunc" && chmod -R u+w "$tmp/trunc"
truncate -s 5000000 "$tmp/trunc/model-00001-of-00001.safetensors"
if err=$("$DSV4" inspect "$tmp/trunc" 2>&1); then fail "truncated checkpoint accepted"; fi
grep -qF "trunc/model-00001-of-00001.safetensors: tensor 'layers.0.ffn.experts.0.w1.weight': data_offsets [5566638, 5583022] run past the data section (4957880 bytes)" <<<"$err" ||
  fail "unexpected error for a truncated file: $err"

if err=$("$DSV4" make-tiny --preset nope --out "$tmp/x" 2>&1); then fail "unknown preset accepted"; fi
grep -qF 'unknown preset "nope" (known: tiny, serve, flash-attn)' <<<"$err" || fail "bad preset error: $err"
if "$DSV4" inspect "$tmp/does-not-exist" 2>/dev/null; then fail "missing model accepted"; fi
echo "make_tiny_inspect: ok"
