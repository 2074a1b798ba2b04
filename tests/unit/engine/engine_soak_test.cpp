// Soak: 500 random requests (shared prefixes, random lengths, a cache small enough to preempt) with
// random aborts from another thread. Every request ends; the ones not aborted produce exactly their
// tokens; no block leaks. Once more with a host tier (bookkeeping only: the fake executor has no KV
// memory), which must serve some hits and leave the accounting as clean.
#include <gtest/gtest.h>

#include <thread>

#include "engine_test_support.h"

namespace dsv4 {
namespace {

using namespace enginetest;
using namespace std::chrono_literals;

class EngineSoak : public ::testing::TestWithParam<int64_t> {};  // --kv-offload-bytes

TEST_P(EngineSoak, FiveHundredRandomRequestsWithAbortsLeakNothing) {
  EngineConfig c;
  c.kv_offload_bytes = GetParam();
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 512;
  c.kv_cache_memory = memory_for(tiny_config(), c, 2048);  // about 8 full blocks for 16 sequences
  KvCacheManager* kv = nullptr;
  Engine e(tiny_config(), c, slow_factory(&kv));
  const EngineStats initial = e.stats();
  std::mt19937 rng(2024);
  const std::vector<std::vector<int32_t>> prefixes = {random_ids(600, 1), random_ids(300, 2), random_ids(520, 3)};
  struct Sent {
    GenerateRequest req;
    std::shared_ptr<RequestStream> stream;
    bool abort_sent = false;
  };
  std::vector<Sent> sent;
  for (int i = 0; i < 500; ++i) {
    GenerateRequest r;
    if (rng() % 2 == 0) r.prompt = prefixes[rng() % prefixes.size()];
    const auto tail = random_ids(1 + rng() % 300, static_cast<uint32_t>(1000 + i));
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.sampling = greedy(1 + rng() % 60);
    r.sampling.ignore_eos = rng() % 4 != 0;
    sent.push_back({r, e.add_request(r)});
    // Abort a random earlier request now and then, whatever state it is in.
    if (rng() % 3 == 0) {
      Sent& victim = sent[rng() % sent.size()];
      victim.abort_sent = e.abort(victim.stream->id()) || victim.abort_sent;
    }
    if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 4000));
  }
  int aborted = 0;
  for (Sent& s : sent) {
    RequestOutput all;
    for (int i = 0; i < 3000 && !all.finished; ++i) {
      RequestOutput o = s.stream->read(10ms);
      all.token_ids.insert(all.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
      all.finished = o.finished;
      all.finish_reason = o.finish_reason;
    }
    ASSERT_TRUE(all.finished) << "request " << s.stream->id() << " hangs";
    const auto want = fake_generation(s.req.prompt, s.req.sampling, tiny_config().vocab_size);
    if (*all.finish_reason == FinishReason::kAbort) {
      EXPECT_TRUE(s.abort_sent);
      ++aborted;
      ASSERT_LE(all.token_ids.size(), want.size());
      EXPECT_TRUE(std::equal(all.token_ids.begin(), all.token_ids.end(), want.begin()));
    } else {
      EXPECT_NE(*all.finish_reason, FinishReason::kError);
      EXPECT_EQ(all.token_ids, want) << "request " << s.stream->id();
    }
  }
  EXPECT_GT(aborted, 20);
  ::testing::Test::RecordProperty("aborted", aborted);
  const EngineStats end = stats_after(e, 500);
  EXPECT_TRUE(end.healthy);
  EXPECT_GT(end.preemptions, 0u);
  ::testing::Test::RecordProperty("preemptions", static_cast<int>(end.preemptions));
  ::testing::Test::RecordProperty("steps", static_cast<int>(end.steps.count));
  EXPECT_GT(end.prefix_hit_tokens, 0);
  EXPECT_EQ(end.host_tier.hits > 0, GetParam() > 0) << "host tier hits";
  EXPECT_EQ(end.requests_finished + end.requests_aborted, 500u);
  EXPECT_EQ(end.running + end.waiting, 0);
  for (size_t p = 0; p < end.pools.size(); ++p) {
    EXPECT_EQ(end.pools[p].used_pages, 0) << "pool " << p;
    EXPECT_EQ(end.pools[p].free_pages + end.pools[p].cached_pages, initial.pools[p].free_pages);
  }
  kv->check_consistency();
}

INSTANTIATE_TEST_SUITE_P(OffloadBytes, EngineSoak, ::testing::Values(int64_t{0}, int64_t{4} << 20));

}  // namespace
}  // namespace dsv4
