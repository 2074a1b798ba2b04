#!/usr/bin/env bash
# --load-format dummy and --hf-overrides (vLLM's names): V4-Flash's config.json alone (tests/data/configs,
# no weights) reduced to fit the CPU runs bench step, bench latency, generate and serve on random weights
# from --seed; kv-plan and inspect plan the full model from its config without making a weight; what cannot
# work is refused with the reason.
set -euo pipefail
BIN=$1
source "$(dirname "$0")/../testing/test_data.sh"
source "$(dirname "$0")/../testing/e2e.sh"
FLASH=$DATA/configs/deepseek-v4-flash
# Small enough for seconds on two shared cores. Three layers, as bench step's cache needs a compressed layer.
SMALL='{"num_hidden_layers": 3, "n_routed_experts": 8, "moe_intermediate_size": 512, "vocab_size": 16384}'
SMALL_TEXT='hf-overrides {"moe_intermediate_size":512,"n_routed_experts":8,"num_hidden_layers":3,"vocab_size":16384}'
ERR=$(mktemp)
pid=
trap 'rc=$?; [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; [ $rc -eq 0 ] || { echo "--- dsv4 stderr:"; cat "$ERR"; }; rm -f "$ERR"' EXIT
fails_with() {  # fails_with PATTERN COMMAND...: the command fails and its stderr holds PATTERN
  local pattern=$1
  shift
  if "$@" >/dev/null 2>"$ERR.refused"; then echo "FAIL: accepted: $*"; exit 1; fi
  grep -q -- "$pattern" "$ERR.refused" || { echo "FAIL: '$pattern' not in:"; cat "$ERR.refused"; exit 1; }
  rm -f "$ERR.refused"
}

"$BIN" bench step "$FLASH" --backend cpu --load-format dummy --hf-overrides "$SMALL" --batch 1 --context 300 \
  --prefill 16 -r 1 --json 2>>"$ERR" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r["test"] for r in rows] == ["decode", "prefill"], rows
assert all(r["ms"] > 0 for r in rows) and rows[0]["bytes"] > 0 and rows[1]["flops"] > 0, rows'
grep -qF "weights dummy (seed 0), $SMALL_TEXT" "$ERR"

# bench latency's prompts are ids up to 91000: the full vocabulary.
"$BIN" bench latency "$FLASH" --backend cpu --load-format dummy --seed 3 --max-model-len 256 --kv-cache-memory 256MiB \
  --hf-overrides '{"num_hidden_layers": 3, "n_routed_experts": 8, "moe_intermediate_size": 512}' -p 8 -n 2 -r 1 \
  --json 2>>"$ERR" | python3 -c '
import json, sys
rows = json.load(sys.stdin)["results"]
assert [r["test"] for r in rows] == ["pp8", "tg2"] and all(r["avg_ts"] > 0 for r in rows), rows'
grep -qF 'weights dummy (seed 3)' "$ERR"

# generate on token ids needs no tokenizer; the weights follow --seed; the flags' environment forms work.
gen() {
  "$BIN" generate "$FLASH" --backend cpu --prompt-ids 5,6,7,8 --max-tokens 4 --max-model-len 256 \
    --kv-cache-memory 256MiB --max-num-seqs 4 "$@" 2>>"$ERR"
}
a=$(gen --load-format dummy --hf-overrides "$SMALL" --seed 1)
b=$(DSV4_LOAD_FORMAT=dummy DSV4_HF_OVERRIDES="$SMALL" gen --seed 1)
c=$(gen --load-format dummy --hf-overrides "$SMALL" --seed 2)
echo "generate: seed 1: $a, again: $b, seed 2: $c"
[[ $a =~ ^[0-9]+(,[0-9]+){3}$ ]] || { echo "FAIL: not four ids: $a"; exit 1; }
[ "$a" = "$b" ] || { echo "FAIL: the same seed gave other tokens"; exit 1; }
[ "$a" != "$c" ] || { echo "FAIL: another seed gave the same tokens"; exit 1; }

# serve: the folder has no tokenizer.json, so the embedded one answers (token ids: the vocabulary is cut);
# the summary names the weights.
log=$(mktemp)
"$BIN" serve "$FLASH" --served-model-name flash --port 0 --backend cpu --load-format dummy --hf-overrides "$SMALL" --max-model-len 256 \
  --kv-cache-memory 256MiB --max-num-seqs 4 >"$log" 2>&1 &
pid=$!
wait_for_summary "$log" "$pid"
grep -F "  weights      dummy (seed 0), $SMALL_TEXT" "$log" >/dev/null || { cat "$log"; echo "FAIL: no weights line"; exit 1; }
port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
curl -sS "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "flash", "prompt": [5, 6, 7], "max_tokens": 3}' | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["usage"]["completion_tokens"] == 3, r'
kill -TERM "$pid"
wait "$pid"
pid=
rm -f "$log"

# golden-check with fewer layers: the kept blocks still meet tolerance.json (the logits cannot, so their
# thresholds are lifted).
"$BIN" golden-check "$DATA/golden/tiny-a" --backend cpu --hf-overrides '{"num_hidden_layers": 2}' \
  --max-rms-ratio 100 --min-argmax-agreement 0 2>>"$ERR" | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert [b["layer"] for b in r["blocks"]] == [0, 1] and r["pass"], r'

# Planning the full model from its config: no weights are made (the full model would not fit here).
"$BIN" kv-plan "$FLASH" --load-format dummy --context 65536 --json 2>>"$ERR" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["load_format"] == "dummy" and j["hf_overrides"] == {} and j["per_sequence_bytes"] > 0, j'
full=$("$BIN" inspect "$FLASH" --load-format dummy --json 2>>"$ERR")
small=$("$BIN" inspect "$FLASH" --load-format dummy --hf-overrides "$SMALL" --json 2>>"$ERR")
python3 -c '
import json, sys
full, small = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert full["load_format"] == "dummy" and full["config"]["num_hidden_layers"] == 43, full["config"]
assert 2.7e11 < full["parameters"] < 3.0e11, full["parameters"]  # V4-Flash: 284B with the MTP layer
assert small["hf_overrides"]["num_hidden_layers"] == 3 and small["config"]["n_routed_experts"] == 8, small
assert small["config"]["compress_ratios"] == [0, 0, 4, 0] and small["config"]["num_hash_layers"] == 3, small["config"]
assert small["parameters"] < full["parameters"] / 50, small["parameters"]' "$full" "$small"
"$BIN" inspect "$FLASH" --load-format dummy --hf-overrides "$SMALL" 2>>"$ERR" | grep -F "dummy (seed 0), $SMALL_TEXT" >/dev/null

# Refused: the full model on this machine's memory (before a weight is made), a config-only folder without
# dummy, overrides that reshape a real checkpoint's tensors, and overrides that are not a JSON object.
fails_with 'the weights need [0-9]* bytes' "$BIN" bench step "$FLASH" --backend cpu --load-format dummy -r 1
fails_with 'no model.safetensors.index.json' "$BIN" bench step "$FLASH" --backend cpu -r 1
fails_with 'use --load-format dummy' "$BIN" inspect "$DATA/golden/tiny-a" --hf-overrides '{"n_routed_experts": 4}'
fails_with 'expected a JSON object' "$BIN" inspect "$FLASH" --load-format dummy --hf-overrides '[2]'
fails_with '"num_hidden_layers" must be an integer' "$BIN" kv-plan "$FLASH" --hf-overrides '{"num_hidden_layers": "2"}'
echo "load_format_dummy: ok"
