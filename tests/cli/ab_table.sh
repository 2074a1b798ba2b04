#!/usr/bin/env bash
# bench/ab_table.py (run-gpu.sh's DSV4_GPU_AB summary) reads the lines `dsv4 bench step` logs: a real CPU
# run's lines, their times then set to known values per side and round, give each row's base and new times
# in round order and the difference of their means.
set -euo pipefail
BIN=$1
source "$(dirname "$0")/../testing/test_data.sh"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
"$BIN" bench step "$DATA/golden/tiny-a" --backend cpu --batch 1 --context 260 --prefill 64 --mixed 32 --mixed-at 300 \
  -r 1 >"$DIR/run.log" 2>&1
grep -q "decode batch 1 context 260: [0-9.]* ms" "$DIR/run.log"
grep -q "mixed batch 1 context 260 + a 32-token chunk at 300: [0-9.]* ms" "$DIR/run.log"
grep -q "prefill 64: [0-9.]* ms" "$DIR/run.log"
set_ms() { sed -E "s/(decode batch 1 context 260): [0-9.]+ ms/\1: $1 ms/; s/(prefill 64): [0-9.]+ ms/\1: $2 ms/" "$DIR/run.log"; }
set_ms 10.000 50.000 >"$DIR/ab-1-base-1.log"
set_ms 9.000 52.000 >"$DIR/ab-1-new-1.log"
set_ms 11.000 50.000 >"$DIR/ab-1-base-2.log"
set_ms 9.500 54.000 >"$DIR/ab-1-new-2.log"
out=$(python3 "$DSV4_SRC/bench/ab_table.py" "$DIR")
echo "$out"
echo "$out" | grep -Fq '| 1 | decode batch 1 context 260 | 10.000 / 11.000 | 9.000 / 9.500 | -1.250 |'
echo "$out" | grep -Fq '| 1 | prefill 64 | 50.000 / 50.000 | 52.000 / 54.000 | +3.000 |'
echo "$out" | grep -Eq '^\| 1 \| mixed batch 1 context 260 \+ a 32-token chunk at 300 \| [0-9.]+ / [0-9.]+ \|'
# No A/B logs: an error, not an empty table.
rm "$DIR"/ab-*.log
! python3 "$DSV4_SRC/bench/ab_table.py" "$DIR" 2>/dev/null
