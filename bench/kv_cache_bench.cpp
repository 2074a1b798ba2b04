// Cost of the KV cache manager's work in one scheduler step at V4-Flash scale: 256 running requests at
// about 1M tokens each decode one token (allocation, sliding-window release, slot mapping), and one new
// request is looked up. Also: freeing a 1M-token request and looking up a 1M-token prompt.
// Bookkeeping only (no pool memory): the manager never touches KV bytes.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace dsv4 {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kRunning = 256;
constexpr int64_t kPrompt = (int64_t{1} << 20) - 512;
constexpr int64_t kChunk = 8192;
constexpr int64_t kSteps = 4096;  // decode steps measured (16 full blocks more per request)

std::vector<int32_t> random_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 129280);
  return t;
}

// Pools for `full_tokens` positions of full blocks, sliding windows of `requests` requests (each with a
// last 256-token chunk in flight) and one prefill chunk.
std::vector<int64_t> pool_pages(const KvLayout& l, int64_t full_tokens, int64_t requests) {
  std::vector<int64_t> pages(l.buckets.size(), 0);
  for (const KvUnit& u : l.units) {
    const int64_t per =
        u.sliding() ? requests * (u.peak_pages + 2 + 256 / u.positions_per_page) + 2 * kChunk / u.positions_per_page
                    : u.pages_for(full_tokens);
    pages[static_cast<size_t>(u.bucket)] += per * u.num_layers();
  }
  return pages;
}

// Fills request `id` up to `len` positions in prefill chunks.
void prefill(KvCacheManager& m, KvRequestId id, std::span<const int32_t> tokens, int64_t len) {
  m.add_request(id, len);
  const PrefixHit hit = m.lookup_prefix(id, tokens.first(static_cast<size_t>(len)));
  int64_t done = hit.tokens;
  bool first = true;
  while (done < len) {
    const int64_t n = std::min(kChunk, len - done);
    if (!m.allocate(id, n, tokens, first ? &hit : nullptr)) std::abort();
    first = false;
    done += n;
  }
}

// 256 requests sharing one 1M-token prompt (its blocks computed once), each with its own windows.
struct Running {
  KvLayout layout = make_kv_layout(v4_flash_config(), {});
  std::vector<int32_t> tokens = random_tokens(static_cast<size_t>(kPrompt + kSteps + 1), 1);
  std::unique_ptr<KvCacheManager> m;
  int64_t step = 0;

  Running() {
    m = std::make_unique<KvCacheManager>(layout, pool_pages(layout, 4 * kPrompt, 2 * kRunning));
    prefill(*m, 0, tokens, kPrompt);
    m->free(0);
    for (KvRequestId id = 1; id <= kRunning; ++id) prefill(*m, id, tokens, kPrompt);
  }
};

Running& running() {
  static Running r;
  return r;
}

void BM_SchedulerStep(benchmark::State& state) {
  Running& r = running();
  const auto arrival = random_tokens(8192, 2);
  std::vector<std::vector<int64_t>> slots(r.layout.units.size());
  for (auto& s : slots) s.reserve(kRunning);
  KvRequestId probe = 1'000'000;
  Clock::duration alloc{}, slot_time{}, lookup{};
  for (auto _ : state) {
    const int64_t pos = kPrompt + r.step;
    const std::span<const int32_t> t(r.tokens.data(), static_cast<size_t>(pos + 1));
    const auto t0 = Clock::now();
    bool ok = pos < static_cast<int64_t>(r.tokens.size());
    for (KvRequestId id = 1; ok && id <= kRunning; ++id) ok = r.m->allocate(id, 1, t);
    if (!ok) {
      state.SkipWithError("out of pages or tokens");
      break;
    }
    const auto t1 = Clock::now();
    for (auto& s : slots) s.clear();
    for (KvRequestId id = 1; id <= kRunning; ++id) r.m->append_slots(id, pos, 1, slots);
    const auto t2 = Clock::now();
    r.m->add_request(probe, 8192);  // a new arrival: lookup only (it waits for memory)
    benchmark::DoNotOptimize(r.m->lookup_prefix(probe, arrival));
    r.m->free(probe++);
    const auto t3 = Clock::now();
    ++r.step;
    alloc += t1 - t0;
    slot_time += t2 - t1;
    lookup += t3 - t2;
  }
  const double n = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["allocate_us"] = std::chrono::duration<double, std::micro>(alloc).count() / n;
  state.counters["slots_us"] = std::chrono::duration<double, std::micro>(slot_time).count() / n;
  state.counters["lookup_us"] = std::chrono::duration<double, std::micro>(lookup).count() / n;
  state.counters["requests"] = kRunning;
  state.counters["context"] = static_cast<double>(kPrompt + r.step);
}
BENCHMARK(BM_SchedulerStep)->Unit(benchmark::kMicrosecond)->Iterations(kSteps);

// A 1M-token request of its own (no shared blocks) is finished: every block goes back.
void BM_FreeMillionTokenRequest(benchmark::State& state) {
  const KvLayout layout = make_kv_layout(v4_flash_config(), {});
  KvCacheManager m(layout, pool_pages(layout, 2 * kPrompt, 4));
  KvRequestId id = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ++id;
    prefill(m, id, random_tokens(static_cast<size_t>(kPrompt), id), kPrompt);
    state.ResumeTiming();
    m.free(id);
  }
}
BENCHMARK(BM_FreeMillionTokenRequest)->Unit(benchmark::kMicrosecond)->Iterations(4);

// Looking up a 1M-token prompt whose prefix is cached: hashing 4096 blocks and probing every unit.
void BM_LookupMillionTokenPrompt(benchmark::State& state) {
  Running& r = running();
  KvRequestId id = 2'000'000;
  const std::span<const int32_t> prompt(r.tokens.data(), static_cast<size_t>(kPrompt));
  for (auto _ : state) {
    r.m->add_request(id, kPrompt);
    const PrefixHit hit = r.m->lookup_prefix(id, prompt);
    if (hit.tokens == 0) state.SkipWithError("no hit");
    r.m->free(id++);
  }
}
BENCHMARK(BM_LookupMillionTokenPrompt)->Unit(benchmark::kMicrosecond)->Iterations(50);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
