#!/usr/bin/env bash
# dsv4 chat-encode reproduces the official DeepSeek-V4 encoder's prompts byte for byte
# (tests/data/golden/encoding), and rejects malformed input with a clear message and exit code 1.
set -euo pipefail
DSV4=$1
source "$(dirname "$0")/../testing/test_data.sh"
GOLDEN=$DATA/golden/encoding
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

for n in 1 2 3 4; do
  mode=thinking
  [ "$n" = 4 ] && mode=chat
  "$DSV4" chat-encode --thinking-mode "$mode" <"$GOLDEN/test_input_$n.json" >"$tmp/got"
  if cmp -s "$tmp/got" "$GOLDEN/test_output_$n.txt"; then echo "ok test_input_$n"; else echo "FAIL test_input_$n"; fail=1; fi
done

for c in "$GOLDEN"/cases/*.json; do
  python3 -c 'import json, sys; sys.stdout.buffer.write(json.load(open(sys.argv[1], encoding="utf-8"))["expected"].encode())' \
    "$c" >"$tmp/want"
  "$DSV4" chat-encode <"$c" >"$tmp/got"
  if cmp -s "$tmp/got" "$tmp/want"; then echo "ok $(basename "$c")"; else echo "FAIL $(basename "$c")"; fail=1; fi
done

# Bad input: exit code 1, the offending field named on stderr, nothing on stdout.
rc=0
echo '{"messages": [{"role": "bot", "content": "x"}], "thinking_mode": "chat"}' |
  "$DSV4" chat-encode >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" = 1 ] && grep -q 'messages\[0\].role: unknown role "bot"' "$tmp/err" && [ ! -s "$tmp/out" ]; then
  echo "ok bad role"
else
  echo "FAIL bad role (rc=$rc)"; cat "$tmp/err"; fail=1
fi
rc=0
echo 'not json' | "$DSV4" chat-encode >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" = 1 ] && grep -q 'stdin is not valid JSON' "$tmp/err"; then echo "ok bad json"; else echo "FAIL bad json (rc=$rc)"; fail=1; fi
exit $fail
