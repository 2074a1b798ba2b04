// CPU backend micro-benchmarks for the heavy ops at V4-Flash shapes: FP8 and FP4 linears (decode
// and a prefill chunk) and sparse attention. Threads: all hardware threads (CpuOps default).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/number_formats.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

std::vector<float> random_f32(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Threads: DSV4_BENCH_THREADS, default all hardware threads.
CpuOps& ops() {
  static CpuOps o(std::getenv("DSV4_BENCH_THREADS") ? std::atoi(std::getenv("DSV4_BENCH_THREADS")) : 0);
  return o;
}

// y[M, N] = x[M, K]·Wᵀ; args: N, K, M, fp4 (0/1).
void BM_Linear(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const bool fp4 = state.range(3) != 0;
  std::mt19937 rng(1);
  const auto wf = random_f32(static_cast<size_t>(n * k), rng, 0.02f);
  std::vector<uint8_t> data(static_cast<size_t>(fp4 ? n * k / 2 : n * k));
  std::vector<uint8_t> scale(static_cast<size_t>(fp4 ? n * k / 32 : ((n + 127) / 128) * ((k + 127) / 128)));
  Weight w;
  if (fp4) {
    quantize_weight_fp4(wf, n, k, data, scale);
    w = Weight::fp4({data.data(), scale.data(), n, k});
  } else {
    quantize_weight_fp8(wf, n, k, data, scale);
    w = Weight::fp8({data.data(), scale.data(), n, k});
  }
  const auto x = random_bf16(static_cast<size_t>(m * k), rng);
  std::vector<uint16_t> y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    ops().linear({.x = x.data(), .rows = m, .w = w, .y = y.data()});
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(m * n * k), benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["threads"] = ops().threads();
}
BENCHMARK(BM_Linear)
    ->ArgNames({"N", "K", "M", "fp4"})
    ->Args({1024, 4096, 1, 0})   // wq_a, decode
    ->Args({4096, 8192, 1, 0})   // wo_b, decode
    ->Args({1024, 4096, 64, 0})  // wq_a, 64-token chunk
    ->Args({2048, 4096, 1, 1})   // routed w1, one token
    ->Args({2048, 4096, 16, 1})  // routed w1, 16 tokens
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Sparse attention at V4-Flash dims: 64 heads × 512, window 128 + args: compressed entries, tokens.
void BM_SparseAttention(benchmark::State& state) {
  const int32_t compressed = static_cast<int32_t>(state.range(0));
  const int64_t tokens = state.range(1);
  const int heads = 64, d = 512, r = 64, window = 128;
  std::mt19937 rng(2);
  const KvEntryDims dims{d, r};
  const int64_t entries = window + compressed;
  std::vector<uint8_t> arena(static_cast<size_t>(entries * kv_entry_bytes(KvEntryFormat::kAttnFp8, dims)));
  const EntryTable table = contiguous_table(arena.data(), entries, KvEntryFormat::kAttnFp8, dims);
  for (int64_t s = 0; s < entries; ++s) {
    auto v = random_f32(static_cast<size_t>(d), rng, 1.0f);
    encode_kv_entry(KvEntryFormat::kAttnFp8, dims, v, {table.entry(s), static_cast<size_t>(table.entry_bytes)});
  }
  const auto q = random_bf16(static_cast<size_t>(tokens * heads * d), rng);
  const auto sink = random_f32(heads, rng, 1.0f);
  std::vector<int32_t> wslots(static_cast<size_t>(tokens * window)), cslots(static_cast<size_t>(tokens * compressed));
  for (size_t i = 0; i < wslots.size(); ++i) wslots[i] = static_cast<int32_t>(i % window);
  for (size_t i = 0; i < cslots.size(); ++i)
    cslots[i] = static_cast<int32_t>(window + i % static_cast<size_t>(compressed));
  std::vector<uint16_t> out(q.size());
  for (auto _ : state) {
    ops().sparse_attention({.q = q.data(),
                            .out = out.data(),
                            .tokens = tokens,
                            .heads = heads,
                            .head_dim = d,
                            .rope_dim = r,
                            .sink = sink.data(),
                            .softmax_scale = 0.044194173f,
                            .window = table,
                            .window_slots = wslots.data(),
                            .window_width = window,
                            .compressed = table,
                            .compressed_slots = cslots.data(),
                            .compressed_width = compressed});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * double(tokens * heads * d * entries), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["threads"] = ops().threads();
}
BENCHMARK(BM_SparseAttention)
    ->ArgNames({"compressed", "tokens"})
    ->Args({512, 1})  // ratio-4 decode: window + index_topk
    ->Args({512, 8})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
