// Engine API with a model-free executor: outputs and usage, admission refusals, abort, step failures, stats.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine_test_support.h"

namespace dsv4 {
namespace {

using namespace enginetest;
using namespace std::chrono_literals;

EngineConfig small_config() {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 256;
  c.kv_cache_memory = 16 << 20;
  c.max_model_len = 2048;
  return c;
}

// Waits for the end (failing the test rather than hanging it).
RequestOutput finish_of(RequestStream& s, std::vector<int32_t>* tokens = nullptr) {
  RequestOutput all;
  for (int i = 0; i < 1000 && !all.finished; ++i) {
    RequestOutput o = s.read(10ms);
    all.token_ids.insert(all.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
    all.finished = o.finished;
    all.finish_reason = o.finish_reason;
    all.error = o.error;
    all.usage = o.usage;
    all.stop_token_id = o.stop_token_id;
  }
  EXPECT_TRUE(all.finished) << "request " << s.id() << " did not finish within 10 s";
  if (tokens != nullptr) *tokens = all.token_ids;
  return all;
}

TEST(Engine, GeneratesUntilLengthOrEosWithUsage) {
  Engine e(tiny_config(), small_config(), fake_factory());
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<GenerateRequest> reqs;
  for (uint32_t i = 0; i < 12; ++i) {
    SamplingParams p = greedy(1 + i * 3);
    p.ignore_eos = i % 2 == 0;
    reqs.push_back({random_ids(1 + i * 37, i), p, {}});
    streams.push_back(e.add_request(reqs.back()));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int32_t> got;
    const RequestOutput o = finish_of(*streams[i], &got);
    const auto want = fake_generation(reqs[i].prompt, reqs[i].sampling, tiny_config().vocab_size);
    EXPECT_EQ(got, want) << i;
    const bool eos = !want.empty() && want.back() == 1 && !reqs[i].sampling.ignore_eos;
    EXPECT_EQ(*o.finish_reason, eos ? FinishReason::kStop : FinishReason::kLength);
    EXPECT_EQ(o.usage.prompt_tokens, static_cast<int64_t>(reqs[i].prompt.size()));
    EXPECT_EQ(o.usage.completion_tokens, static_cast<int64_t>(want.size()));
  }
  const EngineStats s = stats_after(e, 12);
  EXPECT_TRUE(s.healthy);
  EXPECT_EQ(s.requests_finished, 12u);
  EXPECT_GT(s.steps.count, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
}

// --max-num-batched-tokens left at 0 is the engine's to resolve: 2048 without a GPU (the scheduler's budget).
TEST(Engine, ResolvesTheDefaultStepTokens) {
  EngineConfig c = small_config();
  c.max_num_batched_tokens = 0;
  c.kv_cache_memory = 64 << 20;  // room for the windows of a 2048-token step
  Engine e(tiny_config(), c, fake_factory());
  EXPECT_EQ(e.config().max_num_batched_tokens, 2048);
}

TEST(Engine, StopTokenIdsEndTheRequest) {
  Engine e(tiny_config(), small_config(), fake_factory());
  const auto prompt = random_ids(20, 3);
  const auto free_run = fake_generation(prompt, greedy(30), tiny_config().vocab_size);
  SamplingParams p = greedy(30);
  p.stop_token_ids = {free_run[4]};
  const RequestOutput o = finish_of(*e.add_request({prompt, p, {}}));
  EXPECT_EQ(*o.finish_reason, FinishReason::kStop);
  EXPECT_EQ(o.stop_token_id, free_run[4]);
  EXPECT_LE(o.token_ids.size(), 5u);
}

// A reader woken by every token must get the stop token in the same read as the end, or it would take
// the token for text before it learns that the token stopped the request.
TEST(Engine, TheStopTokenArrivesWithTheEnd) {
  // Slow steps, so that the reader is already polling when each token lands.
  Engine e(tiny_config(), small_config(), fake_factory([](const Schedule&) { std::this_thread::sleep_for(1ms); }));
  for (uint32_t r = 0; r < 20; ++r) {
    const auto prompt = random_ids(10 + r, 40 + r);
    const auto free_run = fake_generation(prompt, greedy(30), tiny_config().vocab_size);
    SamplingParams p = greedy(30);
    p.stop_token_ids = {free_run[2 + r % 3]};
    const auto s = e.add_request({prompt, p, {}});
    bool finished = false;
    // Polling without waiting takes the lock as soon as the engine lets go of it after a token.
    for (int i = 0; i < 100000000 && !finished; ++i) {
      const RequestOutput o = s->read(0ms);
      finished = o.finished;
      for (int32_t id : o.token_ids) EXPECT_TRUE(id != p.stop_token_ids[0] || o.finished) << "request " << r;
    }
    EXPECT_TRUE(finished);
  }
}

TEST(RequestStream, TheLastTokenAndTheEndAreOneRead) {
  RequestStream s(7);
  SampledToken a, b;
  a.token = 11;
  b.token = 12;
  b.has_logprobs = true;
  b.logprob = -0.25f;
  s.push(a, {3, 1, 0});
  RequestOutput o = s.read(0ms);
  EXPECT_EQ(o.token_ids, std::vector<int32_t>{11});
  EXPECT_FALSE(o.finished);
  s.finish(FinishReason::kStop, {3, 2, 0}, 12, {}, &b);
  o = s.read(0ms);
  EXPECT_EQ(o.token_ids, std::vector<int32_t>{12});
  ASSERT_EQ(o.logprobs.size(), 1u);
  EXPECT_EQ(o.logprobs[0].logprob, -0.25f);
  EXPECT_TRUE(o.finished);
  EXPECT_EQ(o.stop_token_id, 12);
  EXPECT_EQ(o.usage.completion_tokens, 2);
  s.push(a, {3, 3, 0});  // nothing lands after the end
  EXPECT_TRUE(s.read(0ms).token_ids.empty());
}

TEST(Engine, RejectsAtAdmissionAndLeavesRunningRequestsAlone) {
  std::atomic<bool> slow{true};
  Engine e(tiny_config(), small_config(), fake_factory([&](const Schedule&) {
             if (slow) std::this_thread::sleep_for(1ms);
           }));
  const auto prompt = random_ids(100, 1);
  auto running = e.add_request({prompt, greedy(200), {}});
  std::this_thread::sleep_for(20ms);
  const auto error_of = [&](GenerateRequest r) -> std::string {
    try {
      e.add_request(std::move(r));
    } catch (const Error& err) {
      return err.what();
    }
    return "";
  };
  EXPECT_NE(error_of({random_ids(2000, 2), greedy(49), {}}).find("more than max_model_len 2048"), std::string::npos);
  EXPECT_NE(error_of({{}, greedy(1), {}}).find("empty"), std::string::npos);
  EXPECT_NE(error_of({{5, 1024}, greedy(1), {}}).find("outside the model's vocabulary"), std::string::npos);
  SamplingParams bad = greedy(1);
  bad.top_p = 2;
  EXPECT_NE(error_of({{5}, bad, {}}).find("top_p"), std::string::npos);
  slow = false;
  std::vector<int32_t> got;
  EXPECT_EQ(*finish_of(*running, &got).finish_reason, FinishReason::kLength);
  EXPECT_EQ(got, fake_generation(prompt, greedy(200), tiny_config().vocab_size));
  EXPECT_TRUE(e.healthy());
}

TEST(Engine, AbortEndsRequestsInAnyStateAndReturnsTheirBlocks) {
  EngineConfig c = small_config();
  c.enable_prefix_caching = false;
  c.max_num_seqs = 2;  // the rest wait
  KvCacheManager* kv = nullptr;
  Engine e(tiny_config(), c, slow_factory(&kv));
  const EngineStats initial = e.stats();
  std::vector<std::shared_ptr<RequestStream>> s;
  for (uint32_t i = 0; i < 6; ++i) s.push_back(e.add_request({random_ids(300 + i, i), greedy(100000 / 64), {}}));
  std::this_thread::sleep_for(5ms);
  for (auto& st : s) EXPECT_TRUE(e.abort(st->id()));
  for (auto& st : s) EXPECT_EQ(*finish_of(*st).finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(e.abort(s[0]->id()));  // already finished
  EXPECT_FALSE(e.abort(987654));
  const EngineStats end = stats_after(e, 6);
  for (size_t p = 0; p < end.pools.size(); ++p) {
    EXPECT_EQ(end.pools[p].used_pages, 0);
    EXPECT_EQ(end.pools[p].free_pages, initial.pools[p].free_pages);
  }
  EXPECT_EQ(end.requests_aborted, 6u);
  kv->check_consistency();
}

TEST(Engine, AFailedStepFailsItsRequestsAndMarksTheEngineUnhealthy) {
  constexpr int32_t kPoison = 666;
  Engine e(tiny_config(), small_config(), fake_factory([](const Schedule& s) {
             for (const ScheduledChunk& c : s.chunks) {
               if (c.start == 0 && c.tokens.front() == kPoison) throw Error("injected fault");
             }
           }));
  const auto prompt = random_ids(30, 4);
  EXPECT_EQ(*finish_of(*e.add_request({prompt, greedy(5), {}})).finish_reason, FinishReason::kLength);
  EXPECT_TRUE(e.healthy());
  const RequestOutput bad = finish_of(*e.add_request({{kPoison, 1, 2}, greedy(5), {}}));
  EXPECT_EQ(*bad.finish_reason, FinishReason::kError);
  EXPECT_EQ(bad.error, "injected fault");
  EXPECT_FALSE(e.healthy());
  EXPECT_FALSE(e.stats().healthy);
  EXPECT_EQ(stats_after(e, 2).failed_steps, 1u);
  // The engine goes on serving.
  std::vector<int32_t> got;
  EXPECT_EQ(*finish_of(*e.add_request({prompt, greedy(5), {}}), &got).finish_reason, FinishReason::kLength);
  EXPECT_EQ(got, fake_generation(prompt, greedy(5), tiny_config().vocab_size));
  for (const auto& p : stats_after(e, 3).pools) EXPECT_EQ(p.used_pages, 0);
}

TEST(Engine, StatsCountPrefixHitsPerGroupAndPreemptions) {
  EngineConfig c = small_config();
  c.max_model_len = 0;
  c.kv_cache_memory = memory_for(tiny_config(), c, 1024);  // about 4 full blocks
  // While `hold` is set, steps wait: requests added meanwhile all reach the scheduler before any runs far
  // (on a loaded machine the first could otherwise finish before the next arrives, and none be preempted).
  std::atomic<bool> hold{false};
  Engine e(tiny_config(), c, fake_factory([&hold](const Schedule&) {
             while (hold.load()) std::this_thread::sleep_for(1ms);
           }));
  const auto prompt = random_ids(700, 9);
  const RequestOutput first = finish_of(*e.add_request({prompt, greedy(4), {}}));
  EXPECT_EQ(first.usage.cached_tokens, 0);
  const RequestOutput second = finish_of(*e.add_request({prompt, greedy(4), {}}));
  EXPECT_EQ(second.usage.cached_tokens, 512);
  EngineStats s = stats_after(e, 2);
  EXPECT_EQ(s.cached_prompt_tokens, 512);
  EXPECT_EQ(s.prefix_hit_tokens, 512);
  ASSERT_FALSE(s.groups.empty());
  for (const KvGroupUsage& g : s.groups) {
    EXPECT_EQ(g.lookups, 2) << g.name;
    EXPECT_GT(g.hit_rate(), 0) << g.name;
  }
  // Three requests that each grow past a third of the cache: someone is preempted, all finish.
  std::vector<std::shared_ptr<RequestStream>> streams;
  hold = true;
  for (uint32_t i = 0; i < 3; ++i) streams.push_back(e.add_request({random_ids(300, 20 + i), greedy(300), {}}));
  hold = false;
  for (auto& st : streams) EXPECT_EQ(*finish_of(*st).finish_reason, FinishReason::kLength);
  s = stats_after(e, 5);
  EXPECT_GT(s.preemptions, 0u);
  EXPECT_EQ(s.running, 0);
  EXPECT_GT(s.steps.total_seconds, 0);
  // Its phases, each timed, inside it (the rest: the step's bookkeeping around them).
  EXPECT_GT(s.steps.schedule_seconds, 0);
  EXPECT_GT(s.steps.execute_seconds, 0);
  EXPECT_GT(s.steps.outputs_seconds, 0);
  EXPECT_EQ(s.steps.execute_wait_seconds, 0);  // a CPU backend's work is the engine's host work
  EXPECT_EQ(s.steps.graph_steps, 0);           // no CUDA graphs on the CPU
  EXPECT_LE(s.steps.schedule_seconds + s.steps.execute_seconds + s.steps.outputs_seconds, s.steps.total_seconds + 1e-9);
  int64_t buckets = 0;
  for (int64_t b : s.steps.buckets) buckets += b;
  EXPECT_EQ(buckets, s.steps.count);
}

// The defaults reuse any whole shared block: B shares 700 tokens with A, whose last prompt block starts at
// 768, so B can resume at 512 only if A's sliding windows were kept at 512 too (every group must serve it).
TEST(Engine, ASharedBlockHitsOnEveryGroupByDefault) {
  EngineConfig c = small_config();
  ASSERT_TRUE(c.enable_prefix_caching);
  const auto shared = random_ids(700, 31);
  auto a = shared, b = shared;
  const auto a_tail = random_ids(300, 32), b_tail = random_ids(200, 33);
  a.insert(a.end(), a_tail.begin(), a_tail.end());
  b.insert(b.end(), b_tail.begin(), b_tail.end());
  Engine e(tiny_config(), c, fake_factory());
  EXPECT_EQ(finish_of(*e.add_request({a, greedy(3), {}})).usage.cached_tokens, 0);
  EXPECT_EQ(finish_of(*e.add_request({b, greedy(3), {}})).usage.cached_tokens, 512);
  const EngineStats s = stats_after(e, 2);
  ASSERT_FALSE(s.groups.empty());
  for (const KvGroupUsage& g : s.groups) EXPECT_EQ(g.hit_tokens, 512) << g.name;
  EXPECT_EQ(s.prefix_hit_tokens, 512);
}

TEST(Engine, ShutdownAbortsWhatIsUnfinished) {
  auto e = std::make_unique<Engine>(tiny_config(), small_config(),
                                    fake_factory([](const Schedule&) { std::this_thread::sleep_for(1ms); }));
  auto a = e->add_request({random_ids(10, 1), greedy(1000), {}});
  e->shutdown();
  EXPECT_EQ(*finish_of(*a).finish_reason, FinishReason::kAbort);
  EXPECT_THROW(e->add_request({random_ids(10, 1), greedy(1), {}}), Error);
}

}  // namespace
}  // namespace dsv4
