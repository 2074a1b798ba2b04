// Sampler: each option against its definition on small hand-made logits.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "core/error.h"

namespace dsv4 {
namespace {

SamplingParams params(double temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

int32_t once(Sampler& s, const std::vector<float>& logits, const SamplingParams& p, uint64_t seed = 1) {
  SamplerState st = s.start(p, {}, seed);
  return s.sample(logits, st).token;
}

TEST(Sampler, GreedyTakesTheFirstMaximumAndNeverAnIdAtOrAboveTheLimit) {
  Sampler s(6, 4, -1);
  EXPECT_EQ(once(s, {0, 3, 3, 1, 0, 0}, params(0)), 1);
  EXPECT_EQ(once(s, {0, 1, 2, 1, 50, 90}, params(0)), 2);  // 4 and 5 are past the tokenizer
  for (uint64_t seed = 0; seed < 200; ++seed) {
    EXPECT_LT(once(s, {0, 0, 0, 0, 30, 30}, params(1.0), seed), 4);
  }
}

TEST(Sampler, SeededDrawsAreReproducibleAndFollowTheDistribution) {
  Sampler s(4, 4, -1);
  const std::vector<float> logits = {0, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = 1:2:3:4 / 10
  SamplerState a = s.start(params(1.0), {}, 42), b = s.start(params(1.0), {}, 42), c = s.start(params(1.0), {}, 43);
  std::map<int32_t, int> counts;
  bool differs = false;
  for (int i = 0; i < 20000; ++i) {
    const int32_t x = s.sample(logits, a).token;
    EXPECT_EQ(x, s.sample(logits, b).token);
    differs = differs || x != s.sample(logits, c).token;
    ++counts[x];
  }
  EXPECT_TRUE(differs);
  for (int32_t id = 0; id < 4; ++id) EXPECT_NEAR(counts[id] / 20000.0, (id + 1) / 10.0, 0.015) << id;
  SamplingParams seeded = params(1.0);
  seeded.seed = 5;
  EXPECT_EQ(s.start(seeded, {}, 1).rng(), s.start(seeded, {}, 2).rng());  // the request's seed wins
}

TEST(Sampler, TopKTopPAndMinPKeepTheMostLikely) {
  Sampler s(5, 5, -1);
  const std::vector<float> logits = {std::log(0.1f), std::log(0.4f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams k = params(1.0), p = params(1.0), m = params(1.0);
  k.top_k = 2;
  p.top_p = 0.65;  // 0.4 + 0.3 reaches it
  m.min_p = 0.5;   // keeps p >= 0.2
  for (uint64_t seed = 0; seed < 300; ++seed) {
    EXPECT_TRUE(once(s, logits, k, seed) == 1 || once(s, logits, k, seed) == 2);
    const int32_t tp = once(s, logits, p, seed), tm = once(s, logits, m, seed);
    EXPECT_TRUE(tp == 1 || tp == 2) << tp;
    EXPECT_TRUE(tm == 1 || tm == 2) << tm;
  }
  k.top_k = 1;
  p.top_p = 0.01;
  EXPECT_EQ(once(s, logits, k), 1);
  EXPECT_EQ(once(s, logits, p), 1);
}

TEST(Sampler, PenaltiesFollowTheirFormulas) {
  Sampler s(4, 4, -1);
  // Repetition: positive logits divide, negative ones multiply; prompt ids count.
  SamplingParams r = params(0);
  r.repetition_penalty = 2.0;
  SamplerState st = s.start(r, std::vector<int32_t>{0}, 1);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, -1, -1}, st).token, 1);  // 3/2 < 2
  // Presence and frequency: logit - freq * count - presence, on output tokens only.
  SamplingParams f = params(0);
  f.frequency_penalty = 0.6;
  f.presence_penalty = 0.5;
  SamplerState sf = s.start(f, std::vector<int32_t>{2}, 1);
  const std::vector<float> logits = {0, 0, 1.0f, 0};
  EXPECT_EQ(s.sample(logits, sf).token, 2);
  EXPECT_EQ(s.sample(logits, sf).token, 0);  // 2 now at 1 - 0.6 - 0.5 < 0
}

TEST(Sampler, LogitBiasMinTokensAndStopIds) {
  Sampler s(5, 5, 4);
  SamplingParams b = params(0);
  b.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(once(s, {5, 0, 0, 0, 0}, b), 3);
  SamplingParams m = params(0);
  m.min_tokens = 2;
  m.stop_token_ids = {2};
  SamplerState st = s.start(m, {}, 1);
  const std::vector<float> logits = {0, 1, 5, 0, 9};  // EOS (4) then stop id 2 are the likeliest
  EXPECT_EQ(s.sample(logits, st).token, 1);
  EXPECT_EQ(s.sample(logits, st).token, 1);
  EXPECT_EQ(s.sample(logits, st).token, 4);  // min_tokens reached
  m.ignore_eos = true;                       // EOS is then an ordinary token, never masked
  EXPECT_EQ(once(s, logits, m), 4);
}

// allowed_token_ids on fresh random logits: greedy takes the best allowed id, draws never leave the set,
// and the greedy fast path is off while the set applies.
TEST(Sampler, AllowedTokenIdsKeepEveryTokenInsideTheSet) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  Sampler s(300, 290, 7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(300);
    for (float& v : logits) v = std::normal_distribution<float>(0, 3)(rng);
    SamplingParams p = params(trial % 2 ? 0.7 : 0);
    for (int i = 0; i < 1 + trial % 6; ++i) p.allowed_token_ids.push_back(static_cast<int32_t>(rng() % 300));
    p.allowed_token_ids.push_back(289);  // the last id below the limit
    SamplerState st = s.start(p, {}, rng());
    EXPECT_FALSE(s.plain_greedy(st));
    const int32_t t = s.sample(logits, st).token;
    ASSERT_NE(std::find(p.allowed_token_ids.begin(), p.allowed_token_ids.end(), t), p.allowed_token_ids.end()) << t;
    ASSERT_LT(t, 290);  // an allowed id past the limit stays out
    if (p.greedy()) {
      int32_t best = -1;
      for (int32_t id : p.allowed_token_ids)
        if (id < 290 && (best < 0 || logits[static_cast<size_t>(id)] > logits[static_cast<size_t>(best)] ||
                         (logits[static_cast<size_t>(id)] == logits[static_cast<size_t>(best)] && id < best)))
          best = id;
      EXPECT_EQ(t, best);
    }
  }
}

// bad_words: a one-id word is never sampled; a longer word's last id only right after the rest of it in
// the output (never matched against the prompt).
TEST(Sampler, BadWordsBanTheLastIdOnlyAfterTheRestOfTheWord) {
  Sampler s(6, 6, -1);
  SamplingParams p = params(0);
  p.bad_words = {{5}, {1, 2, 3}};
  SamplerState st = s.start(p, std::vector<int32_t>{1, 2}, 1);  // the prompt ends with 1, 2: no match
  const auto next = [&](std::vector<float> logits) { return s.sample(logits, st).token; };
  EXPECT_EQ(next({0, 0, 0, 9, 0, 10}), 3);  // 5 banned always; 3 allowed (the prompt does not count)
  EXPECT_EQ(next({0, 9, 0, 0, 0, 0}), 1);
  EXPECT_EQ(next({0, 0, 9, 0, 0, 0}), 2);
  EXPECT_FALSE(s.plain_greedy(st));
  EXPECT_EQ(next({0, 0, 0, 9, 1, 10}), 4);  // 1, 2 then 3: banned
  EXPECT_EQ(next({0, 0, 0, 9, 0, 0}), 3);   // after 4: allowed again
  SamplingParams one = params(0);
  one.bad_words = {{1, 2}};
  SamplerState plain = s.start(one, {}, 1);
  EXPECT_TRUE(s.plain_greedy(plain));  // nothing matches yet: the argmax may run where the logits are
}

TEST(TokenMask, BansAndAllowSetsIntersect) {
  TokenMask m(40);
  EXPECT_FALSE(m.restricts());
  m.ban(3);
  m.ban(3);
  m.ban(45);  // past the limit: never sampled anyway
  m.ban(1);
  EXPECT_EQ(std::vector<int32_t>(m.banned_ids().begin(), m.banned_ids().end()), (std::vector<int32_t>{1, 3}));
  const std::vector<int32_t> a = {0, 5, 33, 39, 77}, b = {5, 6, 39};
  const std::vector<uint32_t> sa = TokenMask::allow_set_of(a, 40), sb = TokenMask::allow_set_of(b, 40);
  std::vector<uint32_t> buffer;
  m.allow_only(sa);
  EXPECT_EQ(m.allow_set(buffer).data(), sa.data());  // one set: read where it lies, no copy
  EXPECT_TRUE(buffer.empty());
  m.allow_only(sb);
  const std::span<const uint32_t> both = m.allow_set(buffer);
  EXPECT_EQ(both.data(), buffer.data());  // several: intersected once into the buffer
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0], 1u << 5);
  EXPECT_EQ(both[1], 1u << 7);
  EXPECT_TRUE(m.banned(1));
  EXPECT_FALSE(m.banned(5));
}

TEST(Sampler, LogprobsAreTheRawDistribution) {
  Sampler s(4, 3, -1);
  SamplingParams p = params(0);
  p.logprobs = 2;
  p.logit_bias = {{0, 10.0f}};  // changes the choice, not the reported distribution
  SamplerState st = s.start(p, {}, 1);
  const SampledToken t = s.sample(std::vector<float>{1, 2, 3, 99}, st);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));  // id 3 is past the limit
  EXPECT_EQ(t.token, 0);
  ASSERT_TRUE(t.has_logprobs);
  EXPECT_NEAR(t.logprob, 1 - lse, 1e-5);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].token, 2);
  EXPECT_NEAR(t.top[0].logprob, 3 - lse, 1e-5);
  EXPECT_EQ(t.top[1].token, 1);
}

TEST(SamplingParams, ValidateNamesTheBadField) {
  SamplingParams p;
  EXPECT_NO_THROW(p.validate(10));
  const auto bad = [](auto change, const char* field) {
    SamplingParams q;
    change(q);
    try {
      q.validate(10);
      ADD_FAILURE() << field << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  bad([](SamplingParams& q) { q.temperature = -1; }, "temperature");
  bad([](SamplingParams& q) { q.top_p = 0; }, "top_p");
  bad([](SamplingParams& q) { q.top_k = -2; }, "top_k");
  bad([](SamplingParams& q) { q.min_p = 2; }, "min_p");
  bad([](SamplingParams& q) { q.max_tokens = 0; }, "max_tokens");
  bad([](SamplingParams& q) { q.min_tokens = 99; }, "min_tokens");
  bad([](SamplingParams& q) { q.logit_bias = {{10, 1.0f}}; }, "logit_bias");
  bad([](SamplingParams& q) { q.stop_token_ids = {-1}; }, "stop_token_ids");
  bad([](SamplingParams& q) { q.allowed_token_ids = {3, 10}; }, "allowed_token_ids");
  bad([](SamplingParams& q) { q.bad_words = {{1}, {}}; }, "bad_words");
  bad([](SamplingParams& q) { q.bad_words = {{1, 12}}; }, "bad_words");
  bad([](SamplingParams& q) { q.logprobs = 21; }, "logprobs");
  bad([](SamplingParams& q) { q.repetition_penalty = 0; }, "repetition_penalty");
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// A constraint that allows a fixed id set, remembering what it was told.
struct SetConstraint : TokenConstraint {
  std::vector<uint32_t> set;
  std::vector<int32_t>* accepted;
  std::span<const uint32_t> allowed() override { return set; }
  bool accept(int32_t t) override {
    if (t < 0 || !((set[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u)) return false;
    accepted->push_back(t);
    return true;
  }
  void rollback(size_t) override {}
};
struct SetFactory : TokenConstraintFactory {
  std::vector<int32_t> ids;
  int64_t limit = 0;
  std::vector<int32_t>* accepted;
  std::unique_ptr<TokenConstraint> make() const override {
    auto c = std::make_unique<SetConstraint>();
    c->set = TokenMask::allow_set_of(ids, limit);
    c->accepted = accepted;
    return c;
  }
};

// A constrained request samples only allowed ids (also the greedy one, which then is no plain argmax),
// tells the constraint each one, and min_tokens holds EOS back while something else is allowed; when
// the constraint allows only EOS, its id is taken rather than one it refuses.
TEST(Sampler, TokenConstraintAllowsOnlyItsIdsAndSeesEachToken) {
  Sampler s(70, 70, 3);
  std::vector<int32_t> accepted;
  auto f = std::make_shared<SetFactory>();
  f->ids = {5, 40, 3};
  f->limit = 70;
  f->accepted = &accepted;
  SamplingParams p = params(1.0);
  p.constraint = f;
  p.min_tokens = 2;
  std::vector<float> logits(70, 0.0f);
  logits[3] = 30;  // EOS is by far the most likely
  logits[69] = 50;
  SamplerState st = s.start(p, {}, 7);
  EXPECT_FALSE(s.plain_greedy(st));
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(logits, st).token;
    if (i < 2) {
      EXPECT_TRUE(t == 5 || t == 40) << t;  // min_tokens: EOS held back
    } else {
      EXPECT_EQ(t, 3);
    }
  }
  EXPECT_EQ(accepted.size(), 200u);
  f->ids = {3};
  SamplerState only = s.start(p, {}, 7);
  EXPECT_EQ(s.sample(logits, only).token, 3);
  SamplingParams g = params(0);
  g.constraint = f;
  SamplerState greedy = s.start(g, {}, 1);
  EXPECT_FALSE(s.plain_greedy(greedy));
  EXPECT_EQ(s.sample(logits, greedy).token, 3);
}

// A constraint that restricts nothing this step (a thinking budget not yet spent) applies no allow-set: a
// greedy request stays plain (the argmax where the logits are) and the constraint still sees its token.
TEST(Sampler, AConstraintThatRestrictsNothingKeepsGreedyPlain) {
  struct Open : SetConstraint {
    bool restricting = true;
    bool restricts() override { return restricting; }
    bool accept(int32_t t) override {
      if (restricting) return SetConstraint::accept(t);
      accepted->push_back(t);
      return true;
    }
  };
  struct OpenFactory : TokenConstraintFactory {
    std::vector<int32_t>* accepted;
    std::unique_ptr<TokenConstraint> make() const override {
      auto c = std::make_unique<Open>();
      const std::vector<int32_t> ids{5};
      c->set = TokenMask::allow_set_of(ids, 70);
      c->accepted = accepted;
      return c;
    }
  };
  Sampler s(70, 70, -1);
  std::vector<int32_t> accepted;
  auto f = std::make_shared<OpenFactory>();
  f->accepted = &accepted;
  SamplingParams g = params(0);
  g.constraint = f;
  SamplerState st = s.start(g, {}, 1);
  EXPECT_FALSE(s.plain_greedy(st));  // it restricts by default
  static_cast<Open*>(st.constraint.get())->restricting = false;
  EXPECT_TRUE(s.plain_greedy(st));
  EXPECT_FALSE(s.token_mask(st).restricts());
  std::vector<float> logits(70, 0.0f);
  logits[9] = 5;
  EXPECT_EQ(s.sample(logits, st).token, 9);
  EXPECT_EQ(accepted, (std::vector<int32_t>{9}));
  static_cast<Open*>(st.constraint.get())->restricting = true;
  EXPECT_TRUE(s.token_mask(st).restricts());
  EXPECT_EQ(s.sample(logits, st).token, 5);
}

// A grammar and allowed_token_ids / bad_words / logit_bias on one row: the intersection, through the one
// token mask; a row with a single allow-set hands the op the set where it lies (no copy per step).
TEST(Sampler, TokenConstraintIntersectsTheOtherMasks) {
  Sampler s(70, 70, -1);
  std::vector<int32_t> accepted;
  auto f = std::make_shared<SetFactory>();
  f->ids = {5, 6, 7, 40};
  f->limit = 70;
  f->accepted = &accepted;
  SamplingParams p = params(0);
  p.constraint = f;
  p.allowed_token_ids = {6, 7, 40, 41};
  p.bad_words = {{7}};
  p.logit_bias = {{40, 100.0f}};
  SamplerState st = s.start(p, {}, 1);
  const TokenMask mask = s.token_mask(st);
  std::vector<uint32_t> buffer;
  const std::span<const uint32_t> set = mask.allow_set(buffer);
  EXPECT_EQ(set.data(), buffer.data());
  EXPECT_EQ(set[0], (1u << 6) | (1u << 7));
  EXPECT_EQ(set[1], 1u << 8);
  EXPECT_TRUE(mask.banned(7));
  std::vector<float> logits(70, 0.0f);
  logits[5] = logits[7] = logits[41] = 90;
  EXPECT_EQ(s.sample(logits, st).token, 40);  // the bias lifts 40 over 6; 5, 7 and 41 are out
  logits[6] = 200;
  EXPECT_EQ(s.sample(logits, st).token, 6);

  SamplingParams only = params(0);
  only.constraint = f;
  SamplerState one = s.start(only, {}, 1);
  SampleInputs in;
  const SampleRow& row = s.prepare(one, in);
  ASSERT_EQ(row.allow_row, 0);
  EXPECT_EQ(in.allow[0], s.token_mask(one).allow_set(buffer).data());  // the constraint's own set
  EXPECT_TRUE(one.allow_buffer.empty());
  SamplingParams ids = params(0);
  ids.allowed_token_ids = {6, 9};
  SamplerState listed = s.start(ids, {}, 1);
  SampleInputs in2;
  EXPECT_EQ(in2.allow.size(), 0u);
  s.prepare(listed, in2);
  ASSERT_EQ(in2.allow.size(), 1u);
  EXPECT_EQ(in2.allow[0], listed.allowed.data());  // allowed_token_ids: the request's own set, no copy
}

}  // namespace
}  // namespace dsv4
