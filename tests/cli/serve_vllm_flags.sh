#!/usr/bin/env bash
# vLLM's DeepSeek-V4 command line runs unchanged: serve takes its parser and tokenizer flags with the V4
# values (what they switch on is always on) and refuses another parser by name.
set -euo pipefail
DSV4=$1
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/../testing/flag_env.sh"

recipe=(--tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 --enable-auto-tool-choice
  --reasoning-parser deepseek_v4 --trust-remote-code --kv-cache-dtype fp8 --block-size 256)
# The recipe's flags change nothing the engine resolves.
[ "$($DSV4 serve --print-engine-config "${recipe[@]}")" = "$($DSV4 serve --print-engine-config)" ] ||
  fail "vLLM's recipe flags changed the engine config"
$DSV4 serve --print-engine-config --tokenizer-mode auto >/dev/null || fail "--tokenizer-mode auto refused"

refused() {  # the flag and value must fail, naming $3 in the message
  local out
  if out=$($DSV4 serve --print-engine-config "$1" "$2" 2>&1); then fail "$1 $2 was accepted"; fi
  grep -q -- "$3" <<<"$out" || fail "$1 $2: the message does not say '$3': $out"
}
refused --tool-call-parser hermes "parses DSML tool calls itself"
refused --reasoning-parser deepseek_r1 "parses the thinking block itself"
refused --tokenizer-mode mistral "auto,deepseek_v4"
echo "serve_vllm_flags: ok"
