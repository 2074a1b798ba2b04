// The model runner's sample-op path (CPU backend) against the host sampler it replaced: a seeded
// non-greedy request, with penalties, bias, min_tokens masks, allowed_token_ids, bad_words and logprobs,
// must produce the tokens that the old sampler drew from the full logits. The old sampler's math is kept here as the
// reference (libm exp, sequential fp64 sums, one uniform per draw); the logits come from a second model over a dense
// cache (the CPU forward is bit-exact across caches), fed the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "backend/cpu/cpu_ops.h"
#include "engine/model_runner.h"
#include "engine_test_support.h"
#include "model/dense_kv.h"

namespace dsv4 {
namespace {

using namespace enginetest;

// The pre-op sampler, rule by rule.
struct OldSampler {
  SamplingParams p;
  int64_t limit;
  int32_t eos;
  std::mt19937_64 rng;
  std::unordered_set<int32_t> seen;
  std::unordered_map<int32_t, int32_t> counts;
  int64_t num_output = 0;
  std::vector<int32_t> output;

  int32_t next(const std::vector<float>& logits) {
    std::vector<double> z(logits.begin(), logits.begin() + limit);
    for (const auto& [id, b] : p.logit_bias) z[static_cast<size_t>(id)] += b;
    if (num_output < p.min_tokens) {
      for (int32_t id : p.stop_token_ids) z[static_cast<size_t>(id)] = -INFINITY;
      if (!p.ignore_eos) z[static_cast<size_t>(eos)] = -INFINITY;
    }
    if (!p.allowed_token_ids.empty()) {
      std::vector<double> kept(z.size(), -INFINITY);
      for (int32_t id : p.allowed_token_ids) kept[static_cast<size_t>(id)] = z[static_cast<size_t>(id)];
      z = kept;
    }
    for (const auto& word : p.bad_words) {  // the output ends with all of the word but its last id
      const size_t n = word.size() - 1;
      if (n <= output.size() && std::equal(word.begin(), word.end() - 1, output.end() - static_cast<ptrdiff_t>(n)))
        z[static_cast<size_t>(word.back())] = -INFINITY;
    }
    for (int32_t id : seen) {
      double& v = z[static_cast<size_t>(id)];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
    for (const auto& [id, n] : counts) z[static_cast<size_t>(id)] -= p.frequency_penalty * n + p.presence_penalty;
    const auto best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
    int32_t token = best;
    if (!p.greedy()) token = draw(z, z[static_cast<size_t>(best)]);
    ++num_output;
    output.push_back(token);
    ++counts[token];
    if (p.repetition_penalty != 1.0) seen.insert(token);
    return token;
  }

  int32_t draw(const std::vector<double>& z, double zmax) {
    std::vector<double> w(z.size());
    std::vector<int32_t> ids;
    for (size_t i = 0; i < z.size(); ++i) {
      w[i] = std::exp((z[i] - zmax) / p.temperature);
      if (w[i] > 0 && w[i] >= p.min_p) ids.push_back(static_cast<int32_t>(i));
    }
    const auto heavier = [&](int32_t a, int32_t b) {
      return w[static_cast<size_t>(a)] != w[static_cast<size_t>(b)]
                 ? w[static_cast<size_t>(a)] > w[static_cast<size_t>(b)]
                 : a < b;
    };
    std::sort(ids.begin(), ids.end(), heavier);
    if (p.top_k > 0 && static_cast<int64_t>(ids.size()) > p.top_k) ids.resize(static_cast<size_t>(p.top_k));
    double total = 0;
    for (int32_t id : ids) total += w[static_cast<size_t>(id)];
    if (p.top_p < 1) {
      double acc = 0;
      size_t n = 0;
      while (n < ids.size() && acc < p.top_p * total) acc += w[static_cast<size_t>(ids[n++])];
      ids.resize(n);
    }
    std::sort(ids.begin(), ids.end());
    total = 0;
    for (int32_t id : ids) total += w[static_cast<size_t>(id)];
    const double target = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    double acc = 0;
    for (int32_t id : ids) {
      acc += w[static_cast<size_t>(id)];
      if (acc > target) return id;
    }
    return ids.back();
  }
};

// `steps` tokens of one request through ModelRunner::execute, each checked against the old sampler on
// the logits of a reference model given the same history; the tokens go to `tokens` when given.
void expect_old_tokens(const SamplingParams& params, int steps, uint64_t seed, std::vector<int32_t>* tokens = nullptr) {
  const LoadedModel& m = tiny_model();
  TinyRunner t(base_config());
  KvCacheManager& kv = t.kv;
  ModelRunner& runner = t.runner;

  CpuOps ops(1);
  HostDevice dev;
  Model ref(m.config, m.weights, ops, dev);
  DenseKv dense(dev, m.config, 1, 256, kv_formats(KvDTypes{}));

  std::vector<int32_t> ids = random_ids(30, 7);
  OldSampler old{params,
                 m.config.vocab_size,
                 static_cast<int32_t>(m.config.eos_token_id),
                 std::mt19937_64(params.seed.value_or(seed)),
                 {},
                 {},
                 0,
                 {}};
  if (params.repetition_penalty != 1.0) old.seen.insert(ids.begin(), ids.end());
  kv.add_request(1, static_cast<int64_t>(ids.size()));
  runner.add_request(1, params, ids, seed);
  ASSERT_TRUE(kv.allocate(1, static_cast<int64_t>(ids.size()), ids));
  int64_t done = 0;  // positions the reference has run
  for (int step = 0; step < steps; ++step) {
    Schedule s;
    const int64_t start = step == 0 ? 0 : static_cast<int64_t>(ids.size()) - 1;
    s.chunks.push_back({1, start, {ids.begin() + start, ids.end()}, true, false});
    const auto out = runner.execute(s);
    ASSERT_EQ(out.size(), 1u);
    ForwardBatch b;
    b.add(0, done, ids.data() + done, static_cast<int64_t>(ids.size()) - done);
    done = static_cast<int64_t>(ids.size());
    const std::vector<float> logits = ref.forward(b, dense);
    ASSERT_EQ(out[0].token, old.next(logits)) << "step " << step;
    EXPECT_EQ(out[0].has_logprobs, params.logprobs >= 0);
    if (params.logprobs >= 0) {
      double mx = -INFINITY, sum = 0;
      for (float v : logits) mx = std::max<double>(mx, v);
      for (float v : logits) sum += std::exp(v - mx);
      EXPECT_NEAR(out[0].logprob, logits[static_cast<size_t>(out[0].token)] - mx - std::log(sum), 1e-5);
      ASSERT_EQ(out[0].top.size(), static_cast<size_t>(params.logprobs));
      EXPECT_EQ(out[0].top[0].token, std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    ids.push_back(out[0].token);
    if (tokens != nullptr) tokens->push_back(out[0].token);
    ASSERT_TRUE(kv.allocate(1, 1, ids));
  }
}

TEST(SamplePath, SeededTemperatureSamplingMatchesTheOldSampler) {
  SamplingParams p;
  p.temperature = 1.0;
  p.max_tokens = 64;
  expect_old_tokens(p, 16, 1234);
}

TEST(SamplePath, EveryRuleTogetherMatchesTheOldSampler) {
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 40;
  p.top_p = 0.9;
  p.min_p = 0.02;
  p.repetition_penalty = 1.3;
  p.presence_penalty = 0.4;
  p.frequency_penalty = 0.2;
  p.logit_bias = {{5, 2.0f}, {7, -3.0f}, {11, 0.5f}};
  p.min_tokens = 4;
  p.stop_token_ids = {9, 13};
  p.logprobs = 3;
  p.seed = 99;
  p.max_tokens = 64;
  expect_old_tokens(p, 16, 5);
}

// The token mask's rules (allowed_token_ids as an allow-set, bad words as mask edits) through the op,
// greedy and sampled, on fresh random ids. The bad words come from the unconstrained run's own tokens,
// so each changes the output: a one-id word bans a token the model chose, a two-id word the token that
// followed another.
TEST(SamplePath, AllowedIdsAndBadWordsMatchTheOldSampler) {
  const LoadedModel& m = tiny_model();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<int32_t> allowed;
  for (int i = 0; i < 40; ++i)
    allowed.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(m.config.vocab_size)));
  for (const bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    SamplingParams p = greedy(64);
    if (sampled) {
      p.temperature = 0.9;
      p.top_k = 50;
      p.seed = rng();
    }
    std::vector<int32_t> plain, kept, banned;
    expect_old_tokens(p, 10, 17, &plain);
    SamplingParams a = p;
    a.allowed_token_ids = allowed;
    expect_old_tokens(a, 10, 17, &kept);
    for (int32_t t : kept) EXPECT_NE(std::find(allowed.begin(), allowed.end(), t), allowed.end()) << t;
    SamplingParams b = p;
    b.bad_words = {{plain[2]}, {plain[4], plain[5]}};
    expect_old_tokens(b, 10, 17, &banned);
    EXPECT_NE(banned, plain);
    for (size_t i = 0; i < banned.size(); ++i) {
      EXPECT_NE(banned[i], plain[2]) << i;
      EXPECT_FALSE(i > 0 && banned[i - 1] == plain[4] && banned[i] == plain[5]) << i;
    }
    b.allowed_token_ids = allowed;
    expect_old_tokens(b, 10, 17);
  }
}

TEST(SamplePath, GreedyWithPenaltiesMatchesTheOldSampler) {
  SamplingParams p = greedy(64);
  p.ignore_eos = false;
  p.repetition_penalty = 1.5;
  p.frequency_penalty = 0.5;
  p.min_tokens = 3;
  expect_old_tokens(p, 12, 3);
}

}  // namespace
}  // namespace dsv4
