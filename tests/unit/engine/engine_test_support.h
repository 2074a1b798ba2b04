// Test support for engine/: the tiny preset checkpoint (written once per process), a model-free executor
// whose tokens depend only on each request's history, and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "engine/cache_sizing.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "engine/model_runner.h"
#include "model/model_loader.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"
#include "testing/paths.h"

namespace dsv4::enginetest {

inline const LoadedModel& tiny_model() {
  static const LoadedModel* m = [] {
    const auto dir = testing::temp_dir("engine-tiny");
    write_random_checkpoint(find_preset("tiny").config, 11, dir);
    return new LoadedModel(load_model(dir));
  }();
  return *m;
}

inline const ModelConfig& tiny_config() {
  static const ModelConfig c = find_preset("tiny").config;
  return c;
}

inline std::vector<int32_t> random_ids(int64_t n, uint32_t seed, int32_t vocab = 1024) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// The smallest --kv-cache-memory whose pools hold one request of `positions` (for forcing preemption).
inline int64_t memory_for(const ModelConfig& model, EngineConfig c, int64_t positions) {
  int64_t lo = 1, hi = int64_t{1} << 34;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    c.kv_cache_memory = mid;
    bool ok = false;
    try {
      ok = plan_kv_cache(model, c).largest_request >= positions;
    } catch (const Error&) {
    }
    (ok ? hi : lo) = mid;
  }
  return hi;
}

// The token the fake executor samples after `last` at position `pos` (a function of history only, so a
// recomputed or batched request gets the same tokens).
inline int32_t fake_token(int32_t last, int64_t pos, int64_t vocab) {
  return static_cast<int32_t>((static_cast<uint64_t>(last) * 2654435761u + static_cast<uint64_t>(pos) * 40503u + 7) %
                              static_cast<uint64_t>(vocab));
}

class FakeExecutor final : public Executor {
 public:
  explicit FakeExecutor(int64_t vocab, std::function<void(const Schedule&)> hook = {})
      : vocab_(vocab), hook_(std::move(hook)) {}
  void add_request(RequestId id, const SamplingParams&, std::span<const int32_t>, uint64_t) override {
    live_[id] = true;
  }
  void remove_request(RequestId id) override { live_.erase(id); }
  std::vector<SampledToken> execute(const Schedule& s) override {
    if (hook_) hook_(s);
    std::vector<SampledToken> out;
    for (const ScheduledChunk& c : s.chunks) {
      EXPECT_TRUE(live_.count(c.id)) << "chunk of a removed request " << c.id;
      if (!c.sample) continue;
      SampledToken t;
      t.token = fake_token(c.tokens.back(), c.start + static_cast<int64_t>(c.tokens.size()) - 1, vocab_);
      out.push_back(t);
    }
    return out;
  }

 private:
  int64_t vocab_;
  std::function<void(const Schedule&)> hook_;
  std::unordered_map<RequestId, bool> live_;
};

// What the fake executor generates for a prompt (EOS = 1 stops unless ignore_eos).
inline std::vector<int32_t> fake_generation(std::vector<int32_t> tokens, const SamplingParams& p, int64_t vocab) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < p.max_tokens) {
    const int32_t t = fake_token(tokens.back(), static_cast<int64_t>(tokens.size()) - 1, vocab);
    tokens.push_back(t);
    out.push_back(t);
    if (!p.ignore_eos && t == 1 && static_cast<int64_t>(out.size()) >= p.min_tokens) break;
  }
  return out;
}

inline Engine::ExecutorFactory fake_factory(std::function<void(const Schedule&)> hook = {}) {
  return [hook](KvCacheManager&, Backend&) { return std::make_unique<FakeExecutor>(tiny_config().vocab_size, hook); };
}

// A fake executor whose steps take 200 us, so that requests pile up, share steps and run out of
// blocks; *kv is set to the engine's cache manager.
inline Engine::ExecutorFactory slow_factory(KvCacheManager** kv) {
  return [kv](KvCacheManager& m, Backend&) {
    *kv = &m;
    return std::make_unique<FakeExecutor>(
        tiny_config().vocab_size, [](const Schedule&) { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  };
}

inline SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Seeded random sampling (top-k 50) with logprobs, EOS ignored.
inline SamplingParams seeded(uint64_t seed, int64_t max_tokens, double temperature = 0.9) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 50;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  return p;
}

// The stats once `ended` requests have ended (the snapshot is published just after a step's streams end).
inline EngineStats stats_after(const Engine& e, uint64_t ended) {
  EngineStats s = e.stats();
  for (int i = 0; i < 2000 && s.requests_finished + s.requests_aborted + s.requests_failed < ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s = e.stats();
  }
  EXPECT_GE(s.requests_finished + s.requests_aborted + s.requests_failed, ended);
  return s;
}

// An engine on the tiny model sized for these tests.
inline EngineConfig base_config() {
  EngineConfig c;
  c.threads = 1;  // on 2 shared cores the pool's hand-offs cost more than they save at tiny sizes
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  c.kv_cache_memory = 48 << 20;
  c.max_model_len = 1024;
  c.enable_prefix_caching = false;
  c.chunked_prefill_policy = ChunkPolicy::kBudget;
  return c;
}

// A ModelRunner on the tiny model (CPU backend, one thread) over its own host-memory KV cache sized by
// `c`, without prefix caching; tests drive the cache manager and the runner by hand.
struct TinyRunner {
  explicit TinyRunner(const EngineConfig& c)
      : setup(plan_kv_cache(tiny_model().config, c)),
        kv(setup.layout, setup.pool_pages, options(memory)),
        backend(make_backend("cpu", 1)),
        runner(tiny_model().config, tiny_model().weights, kv, {}, backend, 0) {}
  static KvCacheOptions options(HostKvMemory& m) {
    KvCacheOptions o;
    o.enable_prefix_caching = false;
    o.memory = &m;
    return o;
  }

  KvCacheSetup setup;
  HostKvMemory memory;
  KvCacheManager kv;
  Backend backend;
  ModelRunner runner;
};

// Reads a stream to its end and returns every token.
inline std::vector<int32_t> drain(RequestStream& s, RequestOutput* last = nullptr) {
  RequestOutput o = s.wait();
  if (last != nullptr) *last = o;
  return o.token_ids;
}

// Six concurrent requests of other prompt lengths, greedy and seeded, the first outlasting the others
// (replicas finish at other steps); returns each one's tokens.
inline std::vector<std::vector<int32_t>> serve_spread(Engine& e) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    const auto ids = random_ids(40 + 37 * i, 60 + static_cast<uint32_t>(i));
    const int64_t n = i == 0 ? 48 : 3 + 2 * i;
    streams.push_back(e.add_request({ids, i % 2 ? seeded(90 + static_cast<uint64_t>(i), n) : greedy(n), {}}));
  }
  std::vector<std::vector<int32_t>> tokens;
  for (auto& st : streams) tokens.push_back(drain(*st));
  return tokens;
}

}  // namespace dsv4::enginetest
