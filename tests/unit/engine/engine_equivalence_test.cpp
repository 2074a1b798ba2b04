// The engine on the tiny preset (CPU backend): a request's greedy output is the same alone, batched with
// others that start at random times, with other chunk sizes, when preempted and recomputed, and when its
// prefix comes from the prefix cache. The CPU forward is bit-exact batch- and chunk-invariant, so the
// tests demand identical tokens. Aborts at any point return every block.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "engine/model_runner.h"
#include "engine_test_support.h"
#include "testing/layout_name.h"

namespace dsv4 {
namespace {

using namespace enginetest;
using namespace std::chrono_literals;

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// Each job alone: one request at a time in a fresh engine, no prefix cache.
std::vector<std::vector<int32_t>> alone(const std::vector<Job>& jobs) {
  const LoadedModel& m = tiny_model();
  Engine e(m.config, m.weights, base_config());
  std::vector<std::vector<int32_t>> out;
  for (const Job& j : jobs) out.push_back(drain(*e.add_request({j.prompt, j.params, {}})));
  return out;
}

std::vector<Job> random_jobs(int n, uint32_t seed, int64_t max_prompt, int64_t max_out) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < n; ++i) {
    jobs.push_back({random_ids(1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_prompt)), rng()),
                    greedy(1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_out)))});
  }
  return jobs;
}

TEST(EngineEquivalence, BatchedWithOthersStartingAtRandomTimesMatchesAlone) {
  std::vector<Job> jobs = {{random_ids(300, 1), greedy(12)}};
  for (Job& j : random_jobs(6, 2, 400, 10)) jobs.push_back(std::move(j));
  const auto want = alone(jobs);
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.chunked_prefill_policy = ChunkPolicy::kLatency;
  Engine e(m.config, m.weights, c);
  std::mt19937 rng(3);
  std::vector<std::shared_ptr<RequestStream>> streams = {e.add_request({jobs[0].prompt, jobs[0].params, {}})};
  for (size_t i = 1; i < jobs.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 40));  // joins mid-prefill or mid-decode
    streams.push_back(e.add_request({jobs[i].prompt, jobs[i].params, {}}));
  }
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(drain(*streams[i]), want[i]) << "job " << i;
}

TEST(EngineEquivalence, ChunkSizesDoNotChangeTheOutput) {
  const Job job{random_ids(300, 4), greedy(6)};
  const auto want = alone({job})[0];
  const LoadedModel& m = tiny_model();
  for (int64_t chunk : {7, 64, 256}) {
    EngineConfig c = base_config();
    c.max_prefill_chunk = chunk;
    Engine e(m.config, m.weights, c);
    EXPECT_EQ(drain(*e.add_request({job.prompt, job.params, {}})), want) << "chunk " << chunk;
  }
  EngineConfig c = base_config();
  c.max_num_batched_tokens = 33;
  Engine e(m.config, m.weights, c);
  EXPECT_EQ(drain(*e.add_request({job.prompt, job.params, {}})), want) << "budget 33";
}

TEST(EngineEquivalence, PreemptedAndRecomputedMatchesAlone) {
  const std::vector<Job> jobs = {
      {random_ids(200, 5), greedy(120)}, {random_ids(180, 6), greedy(120)}, {random_ids(220, 7), greedy(120)}};
  const auto want = alone(jobs);
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 0;
  c.kv_cache_memory = memory_for(m.config, c, 600);  // room for about two of the three
  Engine e(m.config, m.weights, c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Job& j : jobs) streams.push_back(e.add_request({j.prompt, j.params, {}}));
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(drain(*streams[i]), want[i]) << "job " << i;
  const EngineStats st = stats_after(e, 3);
  EXPECT_GT(st.preemptions, 0u);
  ::testing::Test::RecordProperty("preemptions", static_cast<int>(st.preemptions));
  ::testing::Test::RecordProperty("computed_tokens", static_cast<int>(st.computed_tokens));
  ::testing::Test::RecordProperty("steps", static_cast<int>(st.steps.count));
  ::testing::Test::RecordProperty("max_model_len", static_cast<int>(e.max_model_len()));
}

TEST(EngineEquivalence, PrefixFromTheCacheMatchesRecomputation) {
  const auto p = random_ids(600, 8);
  auto q = p;
  q.resize(530);
  for (int32_t t : random_ids(40, 9)) q.push_back(t);
  const auto want = alone({{p, greedy(8)}, {q, greedy(8)}});
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.enable_prefix_caching = true;
  Engine e(m.config, m.weights, c);
  RequestOutput o;
  EXPECT_EQ(drain(*e.add_request({p, greedy(8), {}}), &o), want[0]);
  EXPECT_EQ(o.usage.cached_tokens, 0);
  EXPECT_EQ(drain(*e.add_request({p, greedy(8), {}}), &o), want[0]);
  EXPECT_EQ(o.usage.cached_tokens, 512);
  EXPECT_EQ(drain(*e.add_request({q, greedy(8), {}}), &o), want[1]);
  EXPECT_EQ(o.usage.cached_tokens, 512);
  EXPECT_EQ(drain(*e.add_request({p, greedy(8), "other salt"}), &o), want[0]);
  EXPECT_EQ(o.usage.cached_tokens, 0);
}

// Pools that hold one request: three other prompts push the first one's blocks out. With a host tier
// (--kv-offload-bytes) its prefix comes back from host memory and gives the tokens of a cold run, in
// every layout: each tensor-parallel rank restores its own copy of the pages.
class HostTierLayouts : public ::testing::TestWithParam<ParallelConfig> {};

TEST_P(HostTierLayouts, PrefixRestoredFromTheHostTierMatchesRecomputation) {
  const auto p = random_ids(600, 21);
  const auto want = alone({{p, greedy(8)}});
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.parallel = GetParam();
  c.enable_prefix_caching = true;
  c.max_num_seqs = 1;
  c.kv_cache_memory = memory_for(m.config, c, 1024);
  for (const int64_t offload : {int64_t{0}, int64_t{64} << 20}) {
    c.kv_offload_bytes = offload;
    Engine e(m.config, m.weights, c);
    RequestOutput o;
    EXPECT_EQ(drain(*e.add_request({p, greedy(8), {}}), &o), want[0]);
    for (uint32_t seed = 22; seed < 25; ++seed) drain(*e.add_request({random_ids(900, seed), greedy(2), {}}));
    EXPECT_EQ(drain(*e.add_request({p, greedy(8), {}}), &o), want[0]) << "offload " << offload;
    EXPECT_EQ(o.usage.cached_tokens, offload > 0 ? 512 : 0) << "offload " << offload;
    const KvHostTierUsage h = stats_after(e, 5).host_tier;
    EXPECT_EQ(h.hits, offload > 0 ? 1 : 0);
    EXPECT_EQ(h.restore_bytes > 0, offload > 0);
  }
}

INSTANTIATE_TEST_SUITE_P(EngineEquivalence, HostTierLayouts,
                         ::testing::Values(ParallelConfig{}, ParallelConfig{2, 1, false}, ParallelConfig{2, 1, true},
                                           ParallelConfig{1, 2, true}),
                         testing::LayoutName());

// prompt_logprobs through the engine: every prompt position after the first, once and in order, scoring the
// prompt's own token; the same numbers whole, in 33-token chunks, with the prompt already in the prefix cache
// (no hit stands in: the scored request computes it all) and when preempted and recomputed; the generated
// tokens are the plain request's.
TEST(EngineEquivalence, PromptLogprobsEveryPositionOnceWholeChunkedCachedOrPreempted) {
  const auto prompt = random_ids(300, 30);
  SamplingParams scored = greedy(4);
  scored.prompt_logprobs = 3;
  const auto want_tokens = alone({{prompt, greedy(4)}})[0];
  const LoadedModel& m = tiny_model();
  const auto run = [&](const EngineConfig& c, bool warm) {
    Engine e(m.config, m.weights, c);
    if (warm) drain(*e.add_request({prompt, greedy(1), {}}));
    RequestOutput o;
    EXPECT_EQ(drain(*e.add_request({prompt, scored, {}}), &o), want_tokens);
    EXPECT_EQ(o.usage.cached_tokens, 0);
    return o.prompt_logprobs;
  };
  const auto whole = run(base_config(), false);
  ASSERT_EQ(whole.size(), prompt.size() - 1);
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(whole[i].position, static_cast<int64_t>(i + 1));
    ASSERT_EQ(whole[i].token, prompt[i + 1]);
    ASSERT_EQ(whole[i].top.size(), 3u);
    EXPECT_GE(whole[i].rank, 1);
    EXPECT_LE(whole[i].logprob, whole[i].top[0].logprob);
  }
  const auto same = [&](const std::vector<PromptLogprob>& got, const char* what) {
    ASSERT_EQ(got.size(), whole.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].position, whole[i].position) << what;
      EXPECT_EQ(got[i].logprob, whole[i].logprob) << what << " " << i;
      EXPECT_EQ(got[i].rank, whole[i].rank) << what << " " << i;
      ASSERT_EQ(got[i].top.size(), whole[i].top.size()) << what;
      for (size_t j = 0; j < got[i].top.size(); ++j) EXPECT_EQ(got[i].top[j].token, whole[i].top[j].token) << what;
    }
  };
  EngineConfig chunked = base_config();
  chunked.max_num_batched_tokens = 33;
  same(run(chunked, false), "chunked");
  EngineConfig cached = base_config();
  cached.enable_prefix_caching = true;
  same(run(cached, true), "cached prefix");
  // Least urgent beside two long decodes in a cache that holds about two requests: the scored one is
  // preempted once its prompt is scored, and recomputing it scores the prompt again.
  EngineConfig tight = base_config();
  tight.max_num_seqs = 4;
  tight.max_num_batched_tokens = 64;
  tight.max_model_len = 0;
  tight.scheduling_policy = SchedulingPolicy::kPriority;
  tight.kv_cache_memory = memory_for(m.config, tight, 600);
  Engine e(m.config, m.weights, tight);
  SamplingParams longer = scored;
  longer.max_tokens = 120;
  const auto mine = e.add_request({prompt, longer, {}, 1});
  std::vector<std::shared_ptr<RequestStream>> others;
  for (uint32_t k = 0; k < 2; ++k) others.push_back(e.add_request({random_ids(200, 31 + k), greedy(120), {}}));
  RequestOutput o;
  drain(*mine, &o);
  for (auto& s : others) drain(*s);
  EXPECT_GT(stats_after(e, 3).preemptions, 0u);
  same(o.prompt_logprobs, "preempted");
}

TEST(EngineEquivalence, SeededSamplingIsReproducibleAloneOrBatched) {
  SamplingParams s = seeded(1234, 10);
  s.top_p = 0.95;
  const Job job{random_ids(100, 10), s};
  std::vector<Job> jobs = {job};
  for (Job& j : random_jobs(3, 11, 200, 8)) jobs.push_back(std::move(j));
  const auto want = alone({job})[0];
  const LoadedModel& m = tiny_model();
  Engine e(m.config, m.weights, base_config());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Job& j : jobs) streams.push_back(e.add_request({j.prompt, j.params, {}}));
  RequestOutput o;
  EXPECT_EQ(drain(*streams[0], &o), want);
  ASSERT_EQ(o.logprobs.size(), want.size());
  for (const TokenLogprobs& lp : o.logprobs) {
    EXPECT_LE(lp.logprob, 0);
    EXPECT_EQ(lp.top.size(), 2u);
  }
  s.seed = 4321;
  EXPECT_NE(drain(*e.add_request({job.prompt, s, {}})), want);
}

TEST(EngineEquivalence, PaddedDecodeStepsMatchEagerSteps) {
  // The runner's model pads every decode-only step to its recorded shape (what CUDA graphs replay):
  // tokens and logprobs must not change, greedy or sampled.
  std::vector<Job> jobs = random_jobs(5, 21, 300, 24);
  SamplingParams sampled = greedy(20);
  sampled.temperature = 0.8;
  sampled.seed = 99;
  sampled.logprobs = 3;
  jobs.push_back({random_ids(140, 22), sampled});
  auto run = [&](StepMode mode) {
    const LoadedModel& m = tiny_model();
    const EngineConfig c = base_config();
    Engine e(
        m.config, c,
        [&](KvCacheManager& mgr, Backend& backend) -> std::unique_ptr<Executor> {
          auto r = std::make_unique<ModelRunner>(m.config, m.weights, mgr, c.kv_dtypes, backend, 0);
          r->model().set_step_mode(mode);
          return r;
        },
        true);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Job& j : jobs) streams.push_back(e.add_request({j.prompt, j.params, {}}));
    std::vector<std::pair<std::vector<int32_t>, std::vector<double>>> out;
    for (auto& st : streams) {
      RequestOutput o;
      const auto ids = drain(*st, &o);
      std::vector<double> lps;
      for (const TokenLogprobs& lp : o.logprobs) lps.push_back(lp.logprob);
      out.emplace_back(ids, lps);
    }
    return out;
  };
  const auto eager = run(StepMode::kEager), padded = run(StepMode::kPadded);
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(padded[i], eager[i]) << "job " << i;
  EXPECT_FALSE(eager.back().second.empty());
}

TEST(EngineEquivalence, AbortAtAnyPointReturnsEveryBlock) {
  const LoadedModel& m = tiny_model();
  EngineConfig c = base_config();
  c.max_prefill_chunk = 32;  // long prefills, so some aborts land mid-prefill
  c.max_num_seqs = 3;        // and some while waiting
  KvCacheManager* kv = nullptr;
  Engine e(
      m.config, c,
      [&](KvCacheManager& mgr, Backend& backend) -> std::unique_ptr<Executor> {
        kv = &mgr;
        return std::make_unique<ModelRunner>(m.config, m.weights, mgr, c.kv_dtypes, backend, 0);
      },
      true);
  const EngineStats initial = e.stats();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint32_t i = 0; i < 8; ++i)
    streams.push_back(e.add_request({random_ids(150 + 40 * i, 20 + i), greedy(200), {}}));
  for (size_t i = 0; i < streams.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 10 * (i % 3)));
    EXPECT_TRUE(e.abort(streams[i]->id()));
  }
  for (auto& s : streams) {
    RequestOutput o;
    drain(*s, &o);
    EXPECT_EQ(*o.finish_reason, FinishReason::kAbort);
  }
  const EngineStats end = stats_after(e, 8);
  for (size_t p = 0; p < end.pools.size(); ++p) {
    EXPECT_EQ(end.pools[p].used_pages, 0);
    EXPECT_EQ(end.pools[p].free_pages, initial.pools[p].free_pages);
  }
  kv->check_consistency();
}

TEST(ModelRunner, BatchHoldsEveryChunkAndAsksLogitsOnlyWhereItSamples) {
  TinyRunner t(base_config());
  KvCacheManager& kv = t.kv;
  ModelRunner& runner = t.runner;
  Schedule s;
  const auto a = random_ids(10, 1), b = random_ids(5, 2);
  kv.add_request(1, 10);
  kv.add_request(2, 5);
  ASSERT_TRUE(kv.allocate(1, 4, a));
  ASSERT_TRUE(kv.allocate(2, 5, b));
  s.chunks.push_back({1, 0, {a.begin(), a.begin() + 4}, false, false});
  s.chunks.push_back({2, 0, b, true, false});
  runner.add_request(2, greedy(1), b, 0);
  const ForwardBatch fb = runner.build_batch(s);
  ASSERT_EQ(fb.seqs.size(), 2u);
  EXPECT_EQ(fb.tokens(), 9);
  EXPECT_FALSE(fb.seqs[0].logits);
  EXPECT_TRUE(fb.seqs[1].logits);
  EXPECT_EQ(fb.positions[4], 0);
  EXPECT_EQ(fb.token_ids[4], b[0]);
  EXPECT_EQ(runner.execute(s).size(), 1u);
}

// Greedy requests take the device argmax (one id per request comes back); the tokens must be the
// ones the sample op picks (forced here by asking for logprobs).
TEST(ModelRunner, GreedyArgmaxPathPicksTheSamplersTokens) {
  std::vector<std::vector<int32_t>> picked(2);
  for (int variant = 0; variant < 2; ++variant) {
    TinyRunner t(base_config());
    KvCacheManager& kv = t.kv;
    ModelRunner& runner = t.runner;
    SamplingParams p = greedy(8);
    if (variant == 1) p.logprobs = 0;  // not plain greedy: the sample op
    std::vector<int32_t> ids = random_ids(40, 3);
    kv.add_request(1, 40);
    runner.add_request(1, p, ids, 0);
    ASSERT_TRUE(kv.allocate(1, 40, ids));
    for (int step = 0; step < 8; ++step) {
      Schedule s;
      const int64_t start = step == 0 ? 0 : static_cast<int64_t>(ids.size()) - 1;
      s.chunks.push_back({1, start, {ids.begin() + start, ids.end()}, true, false});
      const auto out = runner.execute(s);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].has_logprobs, variant == 1);
      ids.push_back(out[0].token);
      picked[static_cast<size_t>(variant)].push_back(out[0].token);
      ASSERT_TRUE(kv.allocate(1, 1, ids));
    }
  }
  EXPECT_EQ(picked[0], picked[1]);
}

TEST(Sampler, PlainGreedyOnlyWithoutAdjustments) {
  Sampler sampler(100, 90, 1);
  SamplingParams p = greedy(4);
  EXPECT_TRUE(sampler.plain_greedy(sampler.start(p, {}, 0)));
  p.ignore_eos = false;
  p.min_tokens = 2;  // EOS masked for the first two tokens
  EXPECT_FALSE(sampler.plain_greedy(sampler.start(p, {}, 0)));
  p.ignore_eos = true;
  EXPECT_TRUE(sampler.plain_greedy(sampler.start(p, {}, 0)));
  p.presence_penalty = 0.5;
  EXPECT_FALSE(sampler.plain_greedy(sampler.start(p, {}, 0)));
  p = greedy(4);
  p.temperature = 0.7;
  EXPECT_FALSE(sampler.plain_greedy(sampler.start(p, {}, 0)));
  SamplerState st = sampler.start(greedy(4), {}, 0);
  EXPECT_EQ(sampler.accept(89, st).token, 89);
  EXPECT_EQ(st.num_output, 1);
  EXPECT_THROW(sampler.accept(90, st), Error);  // at or above the tokenizer's limit
}

}  // namespace
}  // namespace dsv4
