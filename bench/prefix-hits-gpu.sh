#!/usr/bin/env bash
# prefix-hits-gpu.sh DSV4 OUT: the prefix-repetition hit rate (docs/perf.md, "Prefix caching") with
# `dsv4 serve --backend cuda` on the embedded model, the CPU row's dataset and flags.
set -uo pipefail
DSV4=$1 OUT=$2 PORT=${DSV4_PREFIX_PORT:-18741}
export DSV4_TOKENIZER=${DSV4_TOKENIZER:-$PWD/.carry/shared/tokenizer/tokenizer.json}
source "$(dirname "$0")/serve-lib.sh"
trap stop_server EXIT
start_server "$OUT/prefix-serve.log" "$PORT" "$DSV4" serve --backend cuda --host 127.0.0.1 --port "$PORT"
"$DSV4" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name prefix_repetition \
  --prefix-repetition-num-prefixes 8 --prefix-repetition-prefix-len 1024 --prefix-repetition-suffix-len 128 \
  --prefix-repetition-output-len 16 --num-prompts 64 --max-concurrency 4 --ignore-eos --seed 1 2>&1 | tail -n 40
