#!/usr/bin/env bash
# dsv4 generate through the engine on a tiny checkpoint: one prompt and a prompts file give the same
# greedy tokens, throughput is logged, seeded sampling repeats, and bad input is refused with the numbers.
set -euo pipefail
DSV4=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$DSV4" make-tiny --preset tiny --out "$tmp/m" --seed 5 >/dev/null 2>&1
common=(--kv-cache-memory 64MiB --max-num-seqs 8 --threads 1 --ignore-eos)
ids_a=$(seq -s, 1 300)
ids_b="7,8,9"

# One prompt: its ids, and the throughput line on stderr.
a=$("$DSV4" generate "$tmp/m" --prompt-ids "$ids_a" --max-tokens 6 "${common[@]}" 2>"$tmp/err")
[[ $a =~ ^[0-9]+(,[0-9]+){5}$ ]] || fail "expected 6 ids, got '$a'"
grep -qE "prompt 300 tokens .* tok/s\), generated 6 tokens .* tok/s" "$tmp/err" || fail "no throughput line: $(cat "$tmp/err")"
b=$("$DSV4" generate "$tmp/m" --prompt-ids "$ids_b" --max-tokens 6 "${common[@]}" 2>/dev/null)

# A prompts file runs them batched (with a repeat, served by the prefix cache): same tokens, in order.
printf '[%s]\n[%s]\n[%s]\n' "$ids_a" "$ids_b" "$ids_a" >"$tmp/prompts.jsonl"
out=$("$DSV4" generate "$tmp/m" --prompts-file "$tmp/prompts.jsonl" --max-tokens 6 "${common[@]}" \
  --max-num-batched-tokens 64 2>"$tmp/err")
[[ $out == "$a"$'\n'"$b"$'\n'"$a" ]] || fail "batched outputs differ: '$out' vs '$a' '$b'"
grep -q "3 prompt(s)" "$tmp/err" || fail "no batch summary: $(cat "$tmp/err")"

# Flags come from the environment too; seeded sampling repeats, another seed differs.
s1=$(DSV4_MAX_TOKENS=12 "$DSV4" generate "$tmp/m" --prompt-ids "$ids_b" --temperature 1 --top-p 0.9 --top-k 40 \
  --seed 3 "${common[@]}" 2>/dev/null)
s2=$("$DSV4" generate "$tmp/m" --prompt-ids "$ids_b" --max-tokens 12 --temperature 1 --top-p 0.9 --top-k 40 \
  --seed 3 "${common[@]}" 2>/dev/null)
s3=$("$DSV4" generate "$tmp/m" --prompt-ids "$ids_b" --max-tokens 12 --temperature 1 --top-p 0.9 --top-k 40 \
  --seed 4 "${common[@]}" 2>/dev/null)
[[ $s1 == "$s2" ]] || fail "seeded sampling not reproducible: $s1 vs $s2"
[[ $s1 != "$s3" ]] || fail "different seeds gave the same 12 tokens"
[[ $(tr ',' '\n' <<<"$s1" | wc -l) == 12 ]] || fail "expected 12 sampled ids: $s1"

# A logit bias forces a token; a stop id ends generation at it.
forced=$("$DSV4" generate "$tmp/m" --prompt-ids "$ids_b" --max-tokens 3 --logit-bias 42:100 "${common[@]}" 2>/dev/null)
[[ $forced == "42,42,42" ]] || fail "logit bias ignored: $forced"
first=${b%%,*}
stopped=$("$DSV4" generate "$tmp/m" --prompt-ids "$ids_b" --max-tokens 6 --stop-token-ids "$first" "${common[@]}" 2>/dev/null)
[[ $stopped == "$first" ]] || fail "stop id did not stop: $stopped"

# Refusals, with the numbers.
refuse() {  # expected message, then arguments
  local want=$1
  shift
  if err=$("$DSV4" generate "$tmp/m" "$@" 2>&1); then fail "accepted: $*"; fi
  grep -qF -- "$want" <<<"$err" || fail "for $*: expected '$want', got: $err"
}
refuse "plus max_tokens (100) is 400 tokens, more than max_model_len 256" --prompt-ids "$ids_a" --max-tokens 100 \
  --max-model-len 256 "${common[@]}"
refuse "--block-size 128 is not supported" --prompt-ids 1 --block-size 128 "${common[@]}"
refuse "does not fit the KV cache: one request of 1000000 positions needs" --prompt-ids 1 --max-model-len 1000000 \
  --kv-cache-memory 4MiB --max-num-seqs 1 --max-num-batched-tokens 256
refuse "give exactly one of --prompt, --prompt-ids and --prompts-file" --prompt-ids 1 --prompts-file "$tmp/prompts.jsonl"
refuse "outside the model's vocabulary" --prompt-ids 5000 "${common[@]}"
echo "generate: ok"
