#!/usr/bin/env bash
# `dsv4 bench step` times decode steps (batch x context) and a prefill on a model, with the bytes a
# decode step must read and the FLOPs of the prefill; --json gives one object per row.
set -euo pipefail
BIN=$1
source "$(dirname "$0")/../testing/test_data.sh"
MODEL=$DATA/golden/tiny-a
# dsv4's logs go to a file, printed if any check fails (the tables stay on stdout).
ERR=$(mktemp)
trap 'rc=$?; [ $rc -eq 0 ] || { echo "--- dsv4 stderr:"; cat "$ERR"; }; rm -f "$ERR"' EXIT
table=$("$BIN" bench step "$MODEL" --backend cpu --batch 1,3 --context 260 --prefill 128 -r 2 2>>"$ERR")
echo "$table"
echo "$table" | grep -Eq '\| +decode \| +3 \| +260 \| +[0-9.]+ \|'
echo "$table" | grep -Eq '\| +prefill \| +1 \| +128 \|'
"$BIN" bench step "$MODEL" --backend cpu --batch 2 --context 300 --prefill 64 -r 1 --json 2>>"$ERR" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r["test"] for r in rows] == ["decode", "prefill"], rows
d, p = rows
assert d["batch"] == 2 and d["context"] == 300 and d["ms"] > 0 and d["bytes"] > 0, d
assert d["index_ms"] == 0 and d["launch_ms"] == 0, d  # no step graphs on the CPU
assert p["flops"] > 0 and p["tokens_per_s"] > 0, p
assert 0 < p["enqueue_ms"] <= p["ms"], p  # the host issue time of the prefill step'
# --compare-eager: the row's last step again eagerly; on the CPU (eager steps) it must agree exactly.
"$BIN" bench step "$MODEL" --backend cpu --batch 2 --context 300 --prefill 0 -r 1 --json --compare-eager 2>>"$ERR" |
  python3 -c '
import json, sys
d = json.loads(sys.stdin.readline())
assert d["mode"] == "eager" and d["eager_error"] == 0 and d["eager_argmax"] == 1.0, d'
# --profile: one more step per row, op by op; the ops every model step runs must all be there.
prof=$("$BIN" bench step "$MODEL" --backend cpu --batch 1 --context 260 --prefill 64 -r 1 --profile 2>>"$ERR")
echo "$prof" | grep -Eq '^profile decode batch 1 context 260: [0-9.]+ ms of device time in ops, [0-9.]+ ms of host time'
echo "$prof" | grep -Eq '^  rms_norm +[0-9]+ calls +[0-9.]+ ms +[0-9.]+%  host +[0-9.]+ ms$'
echo "$prof" | grep -Eq '^profile prefill batch 1 context 64: [0-9.]+ ms'
for op in 'linear fp8 [0-9]+x[0-9]+' moe_experts hc_pre sparse_attention indexer_topk; do
  echo "$prof" | grep -Eq "^  $op +[0-9]+ calls" || { echo "FAIL: --profile lacks $op"; exit 1; }
done
# --prefill-chunk: the prompt in steps (as chunked prefill runs one too long for a step), 300 tokens in 128s.
"$BIN" bench step "$MODEL" --backend cpu --batch 1 --context 260 --prefill 300 --prefill-chunk 128 -r 1 --json \
  2>>"$ERR" | python3 -c '
import json, sys
p = [json.loads(l) for l in sys.stdin][-1]
assert p["test"] == "prefill" and p["context"] == 300 and p["ms"] > 0 and p["flops"] > 0, p'
# --mixed: per decode row, steps of its decodes and one prompt chunk beside them (what serving runs under
# load): a row per chunk size, eager, with the chunk's FLOPs and the host's issue time; a step of 2 decodes
# and 256 prompt tokens costs more than the 2 decodes alone.
"$BIN" bench step "$MODEL" --backend cpu --batch 2 --context 300 --mixed 64,256 --prefill 0 -r 2 --json 2>>"$ERR" |
  python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [(r["test"], r["chunk"]) for r in rows] == [("decode", 0), ("mixed", 64), ("mixed", 256)], rows
d, m64, m256 = rows
for m in (m64, m256):
    assert m["batch"] == 2 and m["context"] == 300 and m["mode"] == "eager" and m["flops"] > 0, m
    assert 0 < m["enqueue_ms"] <= m["ms"], m
assert m256["flops"] > m64["flops"] and m256["ms"] > 2 * d["ms"], rows  # ~5x on a CPU
assert m256["tokens_per_s"] > d["tokens_per_s"], rows'
prof=$("$BIN" bench step "$MODEL" --backend cpu --batch 1 --context 260 --mixed 32 --prefill 0 -r 1 --profile 2>>"$ERR")
echo "$prof" | grep -Eq '^profile mixed batch 1 context 260 chunk 32: [0-9.]+ ms'
# --mixed-at: the chunk later in its prompt (the earlier positions cached, as a long prompt's later chunks
# find them): the row and the profile say where.
"$BIN" bench step "$MODEL" --backend cpu --batch 2 --context 300 --mixed 64 --mixed-at 640 --prefill 0 -r 1 --json \
  2>>"$ERR" | python3 -c '
import json, sys
m = [json.loads(l) for l in sys.stdin][-1]
assert m["test"] == "mixed" and m["chunk"] == 64 and m["chunk_at"] == 640 and m["ms"] > 0, m'
prof=$("$BIN" bench step "$MODEL" --backend cpu --batch 1 --context 260 --mixed 32 --mixed-at 300 --prefill 0 -r 1 \
  --profile 2>>"$ERR")
echo "$prof" | grep -Eq '^profile mixed batch 1 context 260 chunk 32 at 300: [0-9.]+ ms'
if "$BIN" bench step "$MODEL" --backend cpu --mixed 0 2>>"$ERR" >/dev/null; then
  echo "FAIL: a mixed chunk of 0 tokens was accepted"; exit 1
fi
if "$BIN" bench step "$MODEL" --backend cpu --prefill-chunk -1 2>>"$ERR" >/dev/null; then
  echo "FAIL: a negative --prefill-chunk was accepted"; exit 1
fi
# A row whose KV pools cannot fit the device's free memory is skipped with the reason; the others still run.
skip=$("$BIN" bench step "$MODEL" --backend cpu --batch 64 --context 260,16777216 --prefill 0 -r 1 2>&1)
echo "$skip" | grep -Eq 'decode batch 64 context 16777216: skipped: its KV pools take [0-9.]+ GiB with [0-9.]+ GiB free'
echo "$skip" | grep -Eq '\| +decode \| +64 \| +260 \| +[0-9.]+ \|'
if echo "$skip" | grep -Eq '\| +decode \| +64 \| +16777216 \|'; then echo "FAIL: the misfit row ran"; exit 1; fi
# So is a prefill whose cache cannot fit.
skip=$("$BIN" bench step "$MODEL" --backend cpu --batch 1 --context 260 --prefill 1073741824 --prefill-chunk 4096 -r 1 2>&1)
echo "$skip" | grep -Eq 'prefill 1073741824: skipped: its KV pools take [0-9.]+ GiB with [0-9.]+ GiB free'
if echo "$skip" | grep -Eq '\| +prefill \|'; then echo "FAIL: the misfit prefill ran"; exit 1; fi
# --timeline needs a device that keeps a kernel timeline (CUDA's CUPTI): the CPU says it has none.
if "$BIN" bench step "$MODEL" --backend cpu --batch 1 --context 260 --prefill 0 -r 1 --timeline \
  2>"${TMPDIR:-/tmp}/bench_step.err" >/dev/null; then
  echo "FAIL: --timeline ran on a device without a kernel timeline"; exit 1
fi
grep -q 'bench step --timeline: this device keeps no kernel timeline' "${TMPDIR:-/tmp}/bench_step.err"
# A backend this machine cannot run is refused with a clear message.
if "$BIN" bench step "$MODEL" --backend tpu 2>"${TMPDIR:-/tmp}/bench_step.err" >/dev/null; then
  echo "FAIL: an unknown backend was accepted"; exit 1
fi
grep -q 'unknown backend' "${TMPDIR:-/tmp}/bench_step.err"
echo "bench_step: ok"
