// The engine with a replica's tensor-parallel ranks as threads (engine/replica_ranks.h) serves the
// tokens and logprobs of one rank: batched requests, chunked prefill, prefix-cache hits, preemption and
// recompute, and seeded sampling, in every layout of one replica the tiny model takes. Data-parallel
// replicas behind the one front end serve each request's tokens as one replica alone would, stepping
// together (with idle steps) where expert parallelism spans them.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "engine/replica_ranks.h"
#include "engine_test_support.h"
#include "testing/error_of.h"
#include "testing/layout_name.h"

namespace dsv4 {
namespace {

using namespace enginetest;

struct Served {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<double> logprobs;  // the sampled request's
  uint64_t preemptions = 0;
  int64_t cached_tokens = 0;  // the repeated prompt's
};

// A prompt twice (a prefix-cache hit), then three long requests in pools that hold about two
// (preemption), prefill chunks of at most 96 tokens, one of them sampled with logprobs.
Served serve(const ParallelConfig& pc) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = pc;
  c.threads = 2;
  c.enable_prefix_caching = true;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 256;
  c.max_prefill_chunk = 96;
  c.max_model_len = 0;
  c.kv_cache_memory = memory_for(m.config, c, 600);  // room for about two of the three
  Engine e(m.config, m.weights, c);
  Served s;
  const std::vector<int32_t> first = random_ids(300, 21);  // one whole 256-token block to cache
  s.tokens.push_back(drain(*e.add_request({first, greedy(8), {}})));
  RequestOutput again;
  s.tokens.push_back(drain(*e.add_request({first, greedy(8), {}}), &again));
  s.cached_tokens = again.usage.cached_tokens;
  std::vector<std::shared_ptr<RequestStream>> streams = {e.add_request({random_ids(200, 24), greedy(120), {}}),
                                                         e.add_request({random_ids(180, 22), seeded(77, 120), {}}),
                                                         e.add_request({random_ids(220, 23), greedy(120), {}})};
  for (size_t i = 0; i < streams.size(); ++i) {
    RequestOutput o;
    s.tokens.push_back(drain(*streams[i], &o));
    if (i == 1)
      for (const TokenLogprobs& lp : o.logprobs) s.logprobs.push_back(lp.logprob);
  }
  s.preemptions = stats_after(e, 5).preemptions;
  return s;
}

class EngineParallel : public ::testing::TestWithParam<ParallelConfig> {};

TEST_P(EngineParallel, RanksServeTheTokensOfOne) {
  static const Served want = serve({});
  ASSERT_GT(want.preemptions, 0u);  // the case exercises recompute
  ASSERT_GT(want.cached_tokens, 0);
  const Served got = serve(GetParam());
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logprobs, want.logprobs);
  EXPECT_EQ(got.cached_tokens, want.cached_tokens);
  EXPECT_GT(got.preemptions, 0u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, EngineParallel,
                         ::testing::Values(ParallelConfig{2, 1, false}, ParallelConfig{4, 1, false},
                                           ParallelConfig{2, 1, true}, ParallelConfig{4, 1, true}),
                         testing::LayoutName());

// serve_spread's requests in small prefill chunks: expert-parallel replicas run idle steps beside
// their peers once their own requests end.
struct Spread {
  std::vector<std::vector<int32_t>> tokens;
  EngineStats stats;
  std::vector<EngineStats> replicas;
};

Spread serve_spread(const ParallelConfig& pc) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = pc;
  c.threads = 2;
  c.collective_timeout = std::chrono::seconds(30);  // a replica that misses its peers' exchange fails, not hangs
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 128;
  c.max_prefill_chunk = 64;
  Engine e(m.config, m.weights, c);
  Spread s;
  s.tokens = enginetest::serve_spread(e);
  s.stats = stats_after(e, s.tokens.size());
  for (int d = 0; d < e.replicas(); ++d) s.replicas.push_back(e.replica_stats(d));
  return s;
}

class EngineDataParallel : public ::testing::TestWithParam<ParallelConfig> {};

TEST_P(EngineDataParallel, ReplicasServeEachRequestsTokensAsOneRank) {
  static const Spread want = serve_spread({});
  const ParallelConfig pc = GetParam();
  const Spread got = serve_spread(pc);
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.replicas.size(), static_cast<size_t>(pc.dp));
  for (int d = 0; d < pc.dp; ++d)  // the front end spread them
    EXPECT_GT(got.replicas[static_cast<size_t>(d)].requests_added, 0u) << "replica " << d;
  EXPECT_EQ(got.stats.requests_finished, want.stats.requests_finished);
  EXPECT_EQ(got.stats.generation_tokens, want.stats.generation_tokens);
  if (pc.expert_parallel)
    EXPECT_GT(got.stats.idle_steps, 0u);  // a replica with nothing left still met its peers' exchanges
  else
    EXPECT_EQ(got.stats.idle_steps, 0u);  // replicas without shared experts step on their own
}

INSTANTIATE_TEST_SUITE_P(Layouts, EngineDataParallel,
                         ::testing::Values(ParallelConfig{1, 2, false}, ParallelConfig{1, 2, true},
                                           ParallelConfig{2, 2, true}, ParallelConfig{1, 4, true}),
                         testing::LayoutName());

// The next turn of a conversation goes to the replica holding its blocks even when another replica is
// idler (within the router's margin): its prompt hits that replica's prefix cache (expert-parallel
// replicas, stepping together).
TEST(EngineDataParallelRouting, TheNextTurnGoesWhereItsBlocksAre) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = {1, 2, true};
  c.enable_prefix_caching = true;
  Engine e(m.config, m.weights, c);
  const auto turn1 = random_ids(300, 31);
  drain(*e.add_request({turn1, greedy(2), {}}));                     // replica 0 (both idle)
  auto busy = e.add_request({random_ids(40, 32), greedy(600), {}});  // replica 0 again: now the busier
  std::vector<int32_t> turn2 = turn1;
  for (const int32_t t : random_ids(100, 33)) turn2.push_back(t);
  RequestOutput o;
  drain(*e.add_request({turn2, greedy(2), {}}), &o);
  EXPECT_EQ(o.usage.cached_tokens, 256);  // turn 1's whole block, on replica 0
  e.abort(busy->id());
  drain(*busy);
  stats_after(e, 3);
  EXPECT_EQ(e.replica_stats(0).requests_added, 3u);
}

// Aborts reach the replica that holds the request; shutting down with requests running on lockstep
// replicas ends them all (no replica is left waiting at the gate or in an exchange).
TEST(EngineDataParallelRouting, AbortsAndShutdownReachEveryReplica) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = {1, 2, true};
  Engine e(m.config, m.weights, c);
  auto a = e.add_request({random_ids(50, 8), greedy(400), {}});
  auto b = e.add_request({random_ids(60, 9), greedy(400), {}});
  auto d = e.add_request({random_ids(70, 10), greedy(400), {}});
  EXPECT_TRUE(e.abort(b->id()));
  RequestOutput out;
  drain(*b, &out);
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(e.abort(b->id()));
  const auto t0 = std::chrono::steady_clock::now();
  e.shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  drain(*a, &out);
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  drain(*d, &out);
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(e.healthy());
}

// Requests one after another, each arriving at a random moment of the replicas' passage from stepping
// to sleeping: a replica that takes the wake for a request before the request reaches its peer's inbox
// must still come back to the gate its peer then waits at (it slept there once, and both hung). Each
// request must finish within the deadline.
TEST(EngineDataParallelRouting, RequestsArrivingAtAnyMomentStrandNoReplica) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = {1, 2, true};
  c.collective_timeout = std::chrono::seconds(30);
  Engine e(m.config, m.weights, c);
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 300; ++i) {
    auto s = e.add_request({random_ids(5 + static_cast<int64_t>(rng() % 20), rng()), greedy(1 + rng() % 3), {}});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!s->finished() && std::chrono::steady_clock::now() < deadline) s->read(std::chrono::milliseconds(50));
    ASSERT_TRUE(s->finished()) << "request " << i << " never finished: a replica left asleep at the gate";
    const int pause[] = {0, 0, 2, 5, 10, 20, 40, 80, 160};  // often inside the replicas' last idle round
    std::this_thread::sleep_for(std::chrono::microseconds(pause[rng() % 9]));
  }
  EXPECT_TRUE(e.healthy());
}

TEST(EngineParallelRefusals, LayoutsTheModelCannotTakeAreRefused) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = {3, 1, false};  // 4 heads
  const std::string e = testing::error_of([&] { Engine engine(m.config, m.weights, c); });
  EXPECT_NE(e.find("layouts of 3 GPUs that work"), std::string::npos) << e;
}

// The CPU ranks share the host: each holds the whole KV, so the default budget is split among them.
TEST(EngineParallelBudget, RanksOnTheHostShareItsDefaultKvBudget) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.kv_cache_memory = 0;
  c.parallel = {2, 1, false};
  const Engine e(m.config, m.weights, c);
  EXPECT_EQ(e.config().kv_cache_memory, default_kv_cache_memory() / 2);
  c.parallel = {2, 2, true};  // every rank of every replica
  const Engine f(m.config, m.weights, c);
  EXPECT_EQ(f.config().kv_cache_memory, default_kv_cache_memory() / 4);
}

// A rank that fails ends the step on every rank with its error at once (its abort stops the peers'
// collectives instead of the ten-minute timeout), and the group stays failed: the next step fails too.
TEST(ReplicaRanks, ARankThatFailsStopsEveryRankWithItsError) {
  TinyRunner t(base_config());
  const LoadedModel& m = tiny_model();
  ReplicaRanks ranks(m.config, m.weights, t.kv, kv_formats({}), plan_parallel(m.config, {2, 1, false}), {}, t.backend,
                     1);
  const auto ids = random_ids(40, 3);
  t.kv.add_request(7, 40);
  ASSERT_TRUE(t.kv.allocate(7, 40, ids));
  ForwardBatch b;
  b.add(0, 0, ids.data(), 40);
  const std::vector<KvRequestId> requests = {7};
  const auto t0 = std::chrono::steady_clock::now();
  const std::string first = testing::error_of([&] { ranks.step(b, requests, [] { fail("rank 0 broke"); }); });
  EXPECT_NE(first.find("rank 0 broke"), std::string::npos) << first;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_FALSE(testing::error_of([&] { ranks.step(b, requests, [] {}); }).empty());
}

}  // namespace
}  // namespace dsv4
