#!/usr/bin/env bash
# `dsv4 bench latency` prints a llama-bench-style table (and one JSON object with --json).
set -euo pipefail
BIN=$1
table=$("$BIN" bench latency -p 32 -n 4 -r 2 --kv-cache-memory 128MiB 2>/dev/null)
echo "$table"
echo "$table" | grep -q '| model'
echo "$table" | grep -Eq '\| +pp32 \| +[0-9.]+ ± [0-9.]+ \|'
echo "$table" | grep -Eq '\| +tg4 \| +[0-9.]+ ± [0-9.]+ \|'
"$BIN" bench latency -p 16 -n 0 -r 1 --kv-cache-memory 128MiB --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)["results"]
assert [x["test"] for x in r] == ["pp16"], r
assert r[0]["avg_ts"] > 0, r'
echo "serve_bench_latency: ok"
