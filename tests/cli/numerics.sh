#!/usr/bin/env bash
# --numerics on every command that makes a backend: the CPU backend takes exact (its only tier) and
# refuses fast with a message naming the exact tier, from the flag and from DSV4_NUMERICS alike; a
# value that is no tier is refused by the parser; reports name the tier in use.
set -euo pipefail
DSV4=$1
fail() { echo "FAIL: $*"; exit 1; }
for cmd in "serve" "generate" "bench latency" "bench step" "golden-check"; do
  help=$($DSV4 $cmd --help 2>&1)
  grep -q -- "--numerics" <<<"$help" || fail "$cmd has no --numerics"
done
refuses() {  # refuses WHAT CMD...: the command fails, saying the CPU is exact-only
  local what=$1
  shift
  set +e
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "$what: --numerics fast on the CPU must fail"
  grep -q "exact tier only" <<<"$err" || fail "$what: the refusal must name the exact tier: $err"
}
refuses "generate flag" "$DSV4" generate --prompt-ids 1,2,3 --max-tokens 1 --numerics fast
refuses "generate env" env DSV4_NUMERICS=fast "$DSV4" generate --prompt-ids 1,2,3 --max-tokens 1
refuses "bench latency" "$DSV4" bench latency -p 4 -n 1 -r 1 --numerics fast
set +e
"$DSV4" generate --prompt-ids 1,2,3 --max-tokens 1 --numerics fastest >/dev/null 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "--numerics fastest must be refused"
"$DSV4" generate --prompt-ids 1,2,3 --max-tokens 1 --numerics exact >/dev/null 2>&1 || fail "--numerics exact on the CPU"
out=$("$DSV4" bench latency -p 4 -n 1 -r 1 --json 2>/dev/null)
python3 -c 'import json,sys; j=json.loads(sys.argv[1])["results"]; assert j and all(r["numerics"] == "exact" for r in j), j' "$out" ||
  fail "bench latency must report the exact tier: $out"
echo "numerics: ok"
