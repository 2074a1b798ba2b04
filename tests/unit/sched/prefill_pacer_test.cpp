#include "sched/prefill_pacer.h"

#include <gtest/gtest.h>

#include <random>

namespace dsv4 {
namespace {

// Steps cost 8 ms of decodes, plus 2 ms for a prefill chunk as one more sequence, plus 0.5 ms per token.
double cost(int64_t chunk) { return 0.008 + (chunk > 0 ? 0.002 + 0.0005 * static_cast<double>(chunk) : 0); }

TEST(PrefillPacer, ConvergesToTheLargestChunkWithinTheSlack) {
  PrefillPacer p(0.5);
  EXPECT_TRUE(p.wants_decode_only_step());
  EXPECT_EQ(p.chunk(), 1);
  p.observe(4, 0, cost(0));
  EXPECT_FALSE(p.wants_decode_only_step());
  for (int i = 0; i < 40; ++i) p.observe(4, p.chunk(), cost(p.chunk()));
  EXPECT_EQ(p.chunk(), 4);  // 8 + 2 + 4 x 0.5 = 12 ms = 1.5 x 8 ms
  PrefillPacer wide(2.0);
  wide.observe(4, 0, cost(0));
  for (int i = 0; i < 40; ++i) wide.observe(4, wide.chunk(), cost(wide.chunk()));
  EXPECT_NEAR(static_cast<double>(wide.chunk()), 28, 1);  // 8 + 2 + 28 x 0.5 = 24 ms = 3 x 8 ms
}

// An absolute step time allowed beyond the slack: where the decode step is fast, chunks grow to it.
TEST(PrefillPacer, ConvergesToTheTargetStepTimeWhereItExceedsTheSlack) {
  PrefillPacer p(0.5, 0.030);
  p.observe(4, 0, cost(0));
  for (int i = 0; i < 60; ++i) p.observe(4, p.chunk(), cost(p.chunk()));
  EXPECT_NEAR(static_cast<double>(p.chunk()), 40, 1);  // 8 + 2 + 40 x 0.5 = 30 ms
  PrefillPacer below(0.5, 0.010);                      // a target under (1 + slack) x decode step: the slack decides
  below.observe(4, 0, cost(0));
  for (int i = 0; i < 40; ++i) below.observe(4, below.chunk(), cost(below.chunk()));
  EXPECT_EQ(below.chunk(), 4);
}

TEST(PrefillPacer, StaysNearTheTargetUnderNoise) {
  PrefillPacer p(0.5);
  p.observe(4, 0, cost(0));
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> noise(0.8, 1.25);
  double worst_mean = 0;
  for (int round = 0; round < 20; ++round) {
    double sum = 0;
    for (int i = 0; i < 20; ++i) {
      const int64_t c = p.chunk();
      const double t = cost(c) * noise(rng);
      sum += cost(c);
      p.observe(4, c, t);
    }
    worst_mean = std::max(worst_mean, sum / 20);
  }
  EXPECT_LE(worst_mean, 0.008 * 1.75);
  EXPECT_GE(p.chunk(), 1);
}

// A burst's first prompt runs alone: its step's cost a token sets the first chunk beside the decodes, under
// the target, instead of a ramp from one token. Steps here: 20 ms of decodes, 1 ms a chunk, 0.1 ms a token.
TEST(PrefillPacer, APrefillOnlyStepSeedsTheFirstChunk) {
  const auto step = [](int64_t chunk) { return 0.020 + (chunk > 0 ? 0.001 + 0.0001 * static_cast<double>(chunk) : 0); };
  PrefillPacer p(0.4, 0.150);
  p.observe(0, 2000, 0.001 + 0.0001 * 2000);  // the prompt alone: 0.1005 ms a token
  EXPECT_EQ(p.chunk(), 1);                    // no decode step measured yet: nothing to size against
  p.observe(1, 0, step(0));
  const int64_t first = p.chunk();
  EXPECT_NEAR(static_cast<double>(first), PrefillPacer::kSeedShare * 0.130 / 0.0001005, 2);
  EXPECT_LE(step(first), 0.150);
  for (int i = 0; i < 10; ++i) p.observe(1, p.chunk(), step(p.chunk()));
  EXPECT_NEAR(static_cast<double>(p.chunk()), 1290, 15);  // 20 + 1 + 1290 x 0.1 = 150 ms
  // Once a mixed step has steered the chunk, later prefill-only steps leave it alone.
  const int64_t steered = p.chunk();
  p.observe(0, 100, 1.0);
  p.observe(1, 0, step(0));
  EXPECT_EQ(p.chunk(), steered);
  // Without a prefill-only step of kSeedMinTokens or more the chunk ramps from one token, as before.
  PrefillPacer cold(0.4, 0.150);
  cold.observe(0, PrefillPacer::kSeedMinTokens - 1, 0.001 + 0.0001 * (PrefillPacer::kSeedMinTokens - 1));
  cold.observe(1, 0, step(0));
  EXPECT_EQ(cold.chunk(), 1);
}

TEST(PrefillPacer, RemeasuresTheDecodeStepNowAndThen) {
  PrefillPacer p(0.5);
  p.observe(2, 0, 0.004);
  for (int i = 0; i < PrefillPacer::kRemeasureSteps - 1; ++i) p.observe(2, 3, 0.005);
  EXPECT_FALSE(p.wants_decode_only_step());
  p.observe(2, 3, 0.005);
  EXPECT_TRUE(p.wants_decode_only_step());
  p.observe(2, 0, 0.004);
  EXPECT_FALSE(p.wants_decode_only_step());
  const int64_t before = p.chunk();
  p.observe(2, 1, 0.0041);  // a cheap remainder does not grow the chunk
  EXPECT_EQ(p.chunk(), before);
  p.observe(0, 500, 1.0);  // prefill-only steps change nothing once a mixed step steered the chunk
  EXPECT_EQ(p.chunk(), before);
  p.observe(2, 0, 0);  // nor do empty measurements
  EXPECT_NEAR(p.decode_step_seconds(), 0.004, 1e-12);
}

}  // namespace
}  // namespace dsv4
