// EngineStats::merge: the front end's snapshot of several replicas is their sum.
#include "engine/engine_stats.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace dsv4 {
namespace {

EngineStats replica(std::mt19937& rng, bool healthy) {
  auto n = [&] { return static_cast<int64_t>(rng() % 1000); };
  EngineStats s;
  s.healthy = healthy;
  s.running = n();
  s.waiting = n();
  s.preemptions = static_cast<uint64_t>(n());
  s.requests_finished = static_cast<uint64_t>(n());
  s.idle_steps = static_cast<uint64_t>(n());
  s.generation_tokens = n();
  s.prefix_hit_tokens = n();
  s.device_memory_used = n();
  s.device_memory_peak = s.device_memory_used + n();
  for (int i = 0; i < 5; ++i) s.steps.add(static_cast<double>(n()) / 1000);
  s.pools = {{4096, n(), n(), n(), n()}, {512, n(), n(), n(), n()}};
  s.groups = {{"swa", 0, n(), n(), n(), n(), n(), n()}, {"csa", 1, n(), n(), n(), n(), n(), n()}};
  s.requests = RequestHistograms(1024);
  s.requests.prompt_tokens.observe(static_cast<double>(n()));
  s.iteration_tokens.observe(static_cast<double>(n()));
  return s;
}

TEST(EngineStatsMerge, SumsCountsPoolsGroupsAndHistograms) {
  std::mt19937 rng(std::random_device{}());
  const EngineStats a = replica(rng, true), b = replica(rng, false);
  EngineStats m = a;
  m.merge(b);
  EXPECT_FALSE(m.healthy);
  EXPECT_EQ(m.running, a.running + b.running);
  EXPECT_EQ(m.waiting, a.waiting + b.waiting);
  EXPECT_EQ(m.preemptions, a.preemptions + b.preemptions);
  EXPECT_EQ(m.requests_finished, a.requests_finished + b.requests_finished);
  EXPECT_EQ(m.idle_steps, a.idle_steps + b.idle_steps);
  EXPECT_EQ(m.generation_tokens, a.generation_tokens + b.generation_tokens);
  EXPECT_EQ(m.prefix_hit_tokens, a.prefix_hit_tokens + b.prefix_hit_tokens);
  EXPECT_EQ(m.device_memory_used, a.device_memory_used + b.device_memory_used);  // each replica its own GPU
  EXPECT_EQ(m.device_memory_peak, a.device_memory_peak + b.device_memory_peak);
  EngineStats cpu = a;  // a device that does not count leaves the other's numbers
  cpu.device_memory_used = cpu.device_memory_peak = -1;
  cpu.merge(b);
  EXPECT_EQ(cpu.device_memory_peak, b.device_memory_peak);
  EXPECT_EQ(m.steps.count, 10);
  EXPECT_DOUBLE_EQ(m.steps.total_seconds, a.steps.total_seconds + b.steps.total_seconds);
  EXPECT_EQ(m.steps.max_seconds, std::max(a.steps.max_seconds, b.steps.max_seconds));
  for (size_t i = 0; i < m.pools.size(); ++i) {
    EXPECT_EQ(m.pools[i].capacity_pages, a.pools[i].capacity_pages + b.pools[i].capacity_pages);
    EXPECT_EQ(m.pools[i].used_pages, a.pools[i].used_pages + b.pools[i].used_pages);
  }
  for (size_t i = 0; i < m.groups.size(); ++i) {
    EXPECT_EQ(m.groups[i].hit_tokens, a.groups[i].hit_tokens + b.groups[i].hit_tokens);
    EXPECT_EQ(m.groups[i].cached_blocks, a.groups[i].cached_blocks + b.groups[i].cached_blocks);
  }
  EXPECT_EQ(m.requests.prompt_tokens.count, 2u);
  EXPECT_DOUBLE_EQ(m.requests.prompt_tokens.sum, a.requests.prompt_tokens.sum + b.requests.prompt_tokens.sum);
  EXPECT_EQ(m.iteration_tokens.count, 2u);
  EXPECT_DOUBLE_EQ(m.kv_usage(),
                   static_cast<double>(a.pools[0].used_pages * 4096 + b.pools[0].used_pages * 4096 +
                                       a.pools[1].used_pages * 512 + b.pools[1].used_pages * 512) /
                       static_cast<double>((a.pools[0].capacity_pages + b.pools[0].capacity_pages) * 4096 +
                                           (a.pools[1].capacity_pages + b.pools[1].capacity_pages) * 512));
}

TEST(EngineStatsMerge, ReplicasOfAnotherLayoutAreRefused) {
  std::mt19937 rng(7);
  EngineStats a = replica(rng, true), b = replica(rng, true);
  b.pools.pop_back();
  EXPECT_THROW(a.merge(b), Error);
  b = replica(rng, true);
  b.groups[0].name = "hca";
  EXPECT_THROW(a.merge(b), Error);
}

}  // namespace
}  // namespace dsv4
