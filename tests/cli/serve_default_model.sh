#!/usr/bin/env bash
# The main job: `dsv4 serve` with no model serves the embedded default; the curl line its startup summary
# prints works as pasted; DSV4_* environment variables set flags; SIGTERM exits 0.
set -euo pipefail
BIN=$(realpath "$1")
source "$(dirname "$0")/../testing/e2e.sh"
command -v curl >/dev/null || { echo "serve_default_model: curl is missing (the startup summary's line uses it)"; exit 1; }
log=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
DSV4_PORT=0 DSV4_KV_CACHE_MEMORY=256MiB DSV4_MAX_MODEL_LEN=8192 "$BIN" serve >"$log" 2>&1 &
pid=$!
wait_for_summary "$log" "$pid"
curl_line=$(grep -A1 '^  try:' "$log" | tail -1 | sed 's/^ *//')
[[ $curl_line == curl* ]] || { cat "$log"; echo "no curl line in the startup summary"; exit 1; }
out=$(bash -c "$curl_line -sS --fail-with-body")
echo "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["object"] == "chat.completion", r
assert r["model"] == "dsv4-serve", r
assert r["usage"]["completion_tokens"] == 32, r
assert isinstance(r["choices"][0]["message"]["content"], str), r
'
grep -q 'KV capacity' "$log"
port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
curl -sS "http://127.0.0.1:$port/v1/models" | python3 -c '
import json, sys
assert json.load(sys.stdin)["data"][0]["max_model_len"] == 8192  # from DSV4_MAX_MODEL_LEN'
kill -TERM "$pid"
wait "$pid"
echo "serve_default_model: ok (curl line: $curl_line)"
