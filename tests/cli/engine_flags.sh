#!/usr/bin/env bash
# serve, generate and bench latency take the same engine flags (tools/engine_flags.h) with the same
# defaults: the "Engine" sections of their --help are identical, and the hidden --print-engine-config
# resolves the same EngineConfig from no flags, from the same flags and from DSV4_<FLAG>. The backend
# flags of bench step and golden-check, and kv-plan's dtype flags, are the same lines too.
set -euo pipefail
DSV4=$1
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/../testing/flag_env.sh"

cmds=("serve" "generate" "bench latency")
# The lines of one help section, from its "NAME:" header to the next blank line.
section() { awk -v h="$1:" '$0 == h { on = 1; next } on && /^$/ { exit } on'; }
engine_help() { $DSV4 $1 --help | section Engine; }

ref=$(engine_help serve)
[ "$(grep -c '^  --' <<<"$ref")" -eq 21 ] || fail "serve's Engine help section is short: $ref"
for c in "${cmds[@]:1}"; do
  diff <(echo "$ref") <(engine_help "$c") || fail "$c: engine flags differ from serve's (diff above)"
done
# Defaults printed where the documentation states them.
grep -q -- '--backend TEXT=cpu ' <<<"$ref" || fail "--backend default is not cpu: $ref"
grep -q -- '--max-num-seqs INT:POSITIVE=256 ' <<<"$ref" || fail "--max-num-seqs default: $ref"
grep -q -- '--max-num-batched-tokens INT:NONNEGATIVE=0 ' <<<"$ref" || fail "--max-num-batched-tokens default: $ref"
grep -q -- '--itl-slack FLOAT:NONNEGATIVE=0.4 ' <<<"$ref" || fail "--itl-slack default: $ref"
grep -q -- '--itl-target-ms FLOAT:NONNEGATIVE=150 ' <<<"$ref" || fail "--itl-target-ms default: $ref"
grep -q 'reuse cached prompt prefixes (default: on)' <<<"$ref" || fail "--enable-prefix-caching default: $ref"

# The same lines for the backend flags of bench step and golden-check and the dtype flags of kv-plan.
for c in "bench step" "golden-check"; do
  for f in --backend --threads --numerics; do
    [ "$(engine_help "$c" | grep -- "^ *$f ")" = "$(grep -- "^ *$f " <<<"$ref")" ] || fail "$c: $f differs from serve's"
  done
done
for f in --kv-cache-dtype --indexer-dtype; do
  [ "$(engine_help kv-plan | grep -- "^ *$f ")" = "$(grep -- "^ *$f " <<<"$ref")" ] || fail "kv-plan: $f differs"
done

# What each command resolves: no flags, the same flags, the same environment.
resolved() { local c=$1; shift; $DSV4 $c --print-engine-config "$@"; }
defaults=$(resolved serve)
python3 -c '
import json, sys
j = json.loads(sys.argv[1])
want = {"backend": "cpu", "threads": 0, "max-model-len": 0, "max-num-seqs": 256, "max-num-batched-tokens": 0,
        "kv-cache-memory": 0, "kv-offload-bytes": 0, "gpu-memory-utilization": 0.9, "block-size": 256, "kv-cache-dtype": "fp8",
        "indexer-dtype": "fp4", "enforce-eager": False, "enable-prefix-caching": True,
        "prefix-cache-retention-interval": -1, "chunked-prefill-policy": "latency", "max-prefill-chunk": 0,
        "itl-slack": 0.4, "itl-target-ms": 150, "scheduling-policy": "fcfs"}
for k, v in want.items():
    assert j[k] == v, (k, j[k], v)
' "$defaults" || fail "serve's defaults: $defaults"
set_flags=(--backend auto --threads 3 --numerics exact --max-model-len 4096 --max-num-seqs 7 --max-num-batched-tokens 512
  --kv-cache-memory 96MiB --kv-offload-bytes 1GiB --gpu-memory-utilization 0.5 --kv-cache-dtype bf16 --no-enable-prefix-caching
  --prefix-cache-retention-interval 512 --chunked-prefill-policy budget --max-prefill-chunk 256 --itl-slack 0.25 --itl-target-ms 80
  --enforce-eager --scheduling-policy priority)
given=$(resolved serve "${set_flags[@]}")
[ "$given" != "$defaults" ] || fail "the flags changed nothing"
grep -q '"kv-offload-bytes":1073741824' <<<"$given" || fail "--kv-offload-bytes 1GiB: $given"
[ "$(DSV4_KV_OFFLOAD_BYTES=2MiB resolved serve | grep -o '"kv-offload-bytes":[0-9]*')" = '"kv-offload-bytes":2097152' ] ||
  fail "DSV4_KV_OFFLOAD_BYTES not read"
[ "$(resolved serve --kv-offload-bytes auto | grep -o '"kv-offload-bytes":-*[0-9]*')" = '"kv-offload-bytes":-1' ] ||
  fail "--kv-offload-bytes auto not taken"
set +e
bad=$($DSV4 serve --print-engine-config --kv-offload-bytes plenty 2>&1)
set -e
grep -q "SIZE or auto" <<<"$bad" || fail "--kv-offload-bytes plenty must name what it takes: $bad"
from_env=$(DSV4_MAX_NUM_SEQS=9 DSV4_ITL_SLACK=0.7 resolved serve)
grep -q '"max-num-seqs":9' <<<"$from_env" && grep -q '"itl-slack":0.7' <<<"$from_env" ||
  fail "DSV4_<FLAG> not read: $from_env"
for c in "${cmds[@]:1}"; do
  [ "$(resolved "$c")" = "$defaults" ] || fail "$c: defaults $(resolved "$c") != serve's $defaults"
  [ "$(resolved "$c" "${set_flags[@]}")" = "$given" ] || fail "$c: the same flags resolve differently"
  [ "$(DSV4_MAX_NUM_SEQS=9 DSV4_ITL_SLACK=0.7 resolved "$c")" = "$from_env" ] || fail "$c: DSV4_<FLAG> differs"
done
# bench latency's -b is --max-num-batched-tokens.
[ "$(resolved "bench latency" -b 512 | grep -o '"max-num-batched-tokens":[0-9]*')" = '"max-num-batched-tokens":512' ] ||
  fail "bench latency -b is not --max-num-batched-tokens"
if resolved "bench latency" -b 512 --max-num-batched-tokens 256 >/dev/null 2>&1; then
  fail "bench latency took both -b and --max-num-batched-tokens"
fi
# Chunked prefill cannot be turned off, on any of them.
for c in "${cmds[@]}"; do
  if resolved "$c" --no-enable-chunked-prefill >/dev/null 2>&1; then fail "$c: --no-enable-chunked-prefill accepted"; fi
done
echo "engine_flags: ok"
