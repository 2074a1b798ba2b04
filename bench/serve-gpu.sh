#!/usr/bin/env bash
# serve-gpu.sh DSV4 MODEL OUT: `dsv4 serve --backend cuda` in the background on loopback, then
# `dsv4 bench serve` (random 8K in / 1K out) at concurrency 1 and 16 (DSV4_BENCH_CONCURRENCY, in that
# order), then the server is stopped. DSV4_SERVE_ARGS: more serve flags (e.g. "--load-format dummy -tp 8");
# DSV4_BENCH_PROMPTS_X: prompts = that many times the concurrency (default: 2 at c1, 16 otherwise).
# DSV4_BENCH_INPUT_LEN / DSV4_BENCH_OUTPUT_LEN: the random prompts' and outputs' tokens (8192 / 1024;
# 32768 / 1024 for M2.2's long-prompt row); the server's max model length follows them.
# Runs inside bench/run-gpu.sh's GPU call; results go to OUT/serve-c{1,16}.log and .json.
# Prefix caching is off: the benchmark's test request repeats its first prompt, which would turn the
# measured prefill of a one-prompt run into a cache hit. The chunk policy (DSV4_BENCH_POLICY, below) is
# the engine's default (latency) unless set: on the fast tier it keeps c16's ITL p99 under 200 ms, which
# the budget policy's 2048-token chunks miss (H200: 156 vs 255 ms; docs/perf.md). On the exact tier use
# budget: there a 2048-token chunk takes ~2.6 s against a ~46 ms decode step, and the latency policy
# starves waiting prompts (measured: 48 prompt tokens/s).
set -uo pipefail
DSV4=$1 MODEL=$2 OUT=$3
PORT=${DSV4_BENCH_PORT:-8123}
IN=${DSV4_BENCH_INPUT_LEN:-8192} OUTLEN=${DSV4_BENCH_OUTPUT_LEN:-1024}
export DSV4_TOKENIZER=${DSV4_TOKENIZER:-$PWD/.carry/shared/tokenizer/tokenizer.json}
# DSV4_BENCH_POLICY: the chunk policy, or several ("latency budget") run one after the other, each
# with its own server; with several, the logs carry the policy (serve-<policy>-c16.log). An entry
# POLICY@MS also sets the latency policy's step target (--itl-target-ms MS; logs serve-POLICY-itlMS-*).
policies=(${DSV4_BENCH_POLICY:-latency})
status=0
for entry in "${policies[@]}"; do
  policy=${entry%@*} target=() name=$policy
  [ "$entry" != "$policy" ] && target=(--itl-target-ms "${entry#*@}") name="$policy-itl${entry#*@}"
  tag="" log="$OUT/serve.log"
  [ ${#policies[@]} -gt 1 ] && tag="$name-" log="$OUT/serve-$name.log"
  "$DSV4" serve "$MODEL" --backend cuda --host 127.0.0.1 --port "$PORT" --max-model-len $((IN + OUTLEN + 1024)) \
    --max-num-seqs "${DSV4_BENCH_MAX_SEQS:-32}" --no-enable-prefix-caching --chunked-prefill-policy "$policy" \
    "${target[@]}" ${DSV4_SERVE_ARGS:-} >"$log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
  ready=0
  for _ in $(seq 1 600); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" \
      2>/dev/null && { ready=1; break; }
    kill -0 $server 2>/dev/null || break
    sleep 0.5
  done
  if [ $ready -eq 0 ]; then
    echo "serve ($name) did not come up:"
    tail -n 20 "$log"
    exit 1
  fi
  for c in ${DSV4_BENCH_CONCURRENCY:-1 16}; do
    n=$((c == 1 ? ${DSV4_BENCH_PROMPTS_C1:-2} : ${DSV4_BENCH_PROMPTS_C16:-16}))
    [ -n "${DSV4_BENCH_PROMPTS_X:-}" ] && n=$((c * DSV4_BENCH_PROMPTS_X))
    echo "== policy $name, concurrency $c, $n prompts"
    "$DSV4" bench serve --base-url "http://127.0.0.1:$PORT" --random-input-len "$IN" --random-output-len "$OUTLEN" \
      --ignore-eos --num-prompts "$n" --max-concurrency "$c" --result-file "$OUT/serve-${tag}c$c.json" \
      --disable-tqdm >"$OUT/serve-${tag}c$c.log" 2>&1 || status=1
    tail -n 25 "$OUT/serve-${tag}c$c.log"
    # Where the engine's steps spent their time so far (cumulative over this server's runs): schedule,
    # the executor's step, applying its tokens; beside the steps' count and sum.
    python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics', timeout=5).read().decode())" \
      2>/dev/null | grep -E '^dsv4:engine_step_((schedule|execute|execute_wait|outputs)_seconds_total|seconds_(sum|count))|^dsv4:cuda_graph|^dsv4:engine_graph_step' |
      tee "$OUT/serve-${tag}c$c-steps.txt"
  done
  kill $server 2>/dev/null
  wait $server 2>/dev/null
done
exit $status
