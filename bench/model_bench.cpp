// CPU forward of the tiny and serve presets: one 512-token prefill, and one decode step at
// context 512 (the numbers of docs/perf.md); the host's StepIndex at V4-Flash dims. Checkpoints are
// generated into a temporary folder.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/paged_kv.h"
#include "model/step_index.h"
#include "model/step_shape.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"

namespace dsv4 {
namespace {

const LoadedModel& preset_model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> cache;
  auto& m = cache[name];
  if (!m) {
    const auto dir = std::filesystem::temp_directory_path() / ("dsv4-bench-" + name);
    if (!std::filesystem::exists(dir / "config.json")) write_random_checkpoint(find_preset(name).config, 1, dir);
    m = std::make_unique<LoadedModel>(load_model(dir));
  }
  return *m;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& x : ids) x = d(rng);
  return ids;
}

void BM_Prefill512(benchmark::State& state, const std::string& preset) {
  const LoadedModel& m = preset_model(preset);
  CpuOps ops;
  HostDevice dev;
  Model model(m.config, m.weights, ops, dev);
  const auto ids = random_ids(512, m.config.vocab_size);
  for (auto _ : state) {
    OwnedPagedCache cache(m.config, 1, 1024, 512);
    cache.add(0, 512);
    cache.allocate(0, 512, ids);
    ForwardBatch b;
    b.add(0, 0, ids.data(), 512);
    benchmark::DoNotOptimize(model.forward(b, cache.access()));
  }
  state.counters["tok/s"] =
      benchmark::Counter(512.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_DecodeStep(benchmark::State& state, const std::string& preset) {
  const LoadedModel& m = preset_model(preset);
  CpuOps ops;
  HostDevice dev;
  Model model(m.config, m.weights, ops, dev);
  const int64_t context = 512, steps = 4096;
  const auto ids = random_ids(context + steps, m.config.vocab_size);
  OwnedPagedCache cache(m.config, 1, context + steps, context);
  cache.add(0, context);
  cache.allocate(0, context, ids);
  ForwardBatch pre;
  pre.add(0, 0, ids.data(), context);
  model.forward(pre, cache.access());
  int64_t pos = context;
  for (auto _ : state) {
    if (pos == context + steps) state.SkipWithError("out of positions");
    cache.allocate(0, 1, std::span<const int32_t>(ids.data(), static_cast<size_t>(pos + 1)));
    ForwardBatch b;
    b.add(0, pos, ids.data() + pos, 1);
    benchmark::DoNotOptimize(model.forward(b, cache.access()));
    ++pos;
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// The host's share of a decode step at V4-Flash dims: the StepIndex of `batch` sequences at `context`
// (eager, or padded into its shape's arena as a replayed CUDA graph step builds it), page-list
// expansions excluded (they run on the device). With graphs, this and the upload are all the host
// does before the replay.
void BM_StepIndex(benchmark::State& state) {
  const int64_t batch = state.range(0), context = state.range(1);
  const bool padded = state.range(2) != 0;
  const ModelConfig& c = find_preset("flash-attn").config;
  HostDevice dev;
  OwnedPagedCache cache(c, static_cast<int>(batch), context + 2, 8192);
  const auto ids = random_ids(context + 2, c.vocab_size);
  for (int32_t s = 0; s < batch; ++s) {
    cache.add(s, context);
    for (int64_t at = 0; at < context; at += 8192)
      cache.allocate(s, std::min<int64_t>(8192, context - at),
                     std::span<const int32_t>(ids.data(), static_cast<size_t>(std::min(context, at + 8192))));
    cache.allocate(s, 1, std::span<const int32_t>(ids.data(), static_cast<size_t>(context + 1)));
  }
  ForwardBatch b;
  for (int32_t s = 0; s < batch; ++s) b.add(s, context, ids.data() + context, 1);
  const auto shape = decode_shape(c, b);
  const ForwardBatch p = padded ? pad_batch(b, *shape) : b;
  StepArena arena;
  int64_t bytes = 0;
  for (auto _ : state) {
    const StepIndex index(dev, c, p, cache.access(), StepLayout{padded, padded ? &arena : nullptr});
    benchmark::DoNotOptimize(index.tokens);
    bytes = index.upload_bytes;
  }
  state.counters["upload_KiB"] = static_cast<double>(bytes) / 1024;
}

BENCHMARK(BM_StepIndex)
    ->ArgNames({"batch", "context", "padded"})
    ->Args({1, 8192, 0})
    ->Args({1, 8192, 1})
    ->Args({8, 131072, 0})
    ->Args({8, 131072, 1})
    ->Args({32, 131072, 1})
    ->Args({64, 131072, 1})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_Prefill512, tiny, std::string("tiny"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill512, serve, std::string("serve"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, tiny, std::string("tiny"))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, serve, std::string("serve"))->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
