// Weight shards: each view a rank computes with holds exactly the rows the layout gives it (bytes and
// scales compared with the full tensors), experts a rank does not own are empty, and placing a shard
// takes only what the rank holds.
#include "model/weight_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "model/placed_weights.h"
#include "testing/error_of.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

using ::testing::HasSubstr;

int64_t scale_cols(const LinearWeight& w) {
  return w.format == WeightFormat::kFp8 ? (w.in + 127) / 128 : w.format == WeightFormat::kFp4 ? w.in / 32 : 0;
}
int64_t row_bytes(const LinearWeight& w) {
  return w.format == WeightFormat::kFp8 ? w.in : w.format == WeightFormat::kFp4 ? w.in / 2 : 2 * w.in;
}

// The slice's rows and scales are the full weight's rows [first, first + slice.out).
void expect_rows_of(const LinearWeight& full, const LinearWeight& slice, int64_t first) {
  ASSERT_EQ(slice.format, full.format);
  ASSERT_EQ(slice.in, full.in);
  ASSERT_LE(first + slice.out, full.out);
  EXPECT_EQ(0, std::memcmp(slice.data, full.data + first * row_bytes(full), slice.out * row_bytes(full)));
  if (full.format == WeightFormat::kBf16) return;
  const int64_t block = full.format == WeightFormat::kFp8 ? 128 : 1;
  const int64_t rows = (slice.out + block - 1) / block;
  EXPECT_EQ(0, std::memcmp(slice.scale, full.scale + first / block * scale_cols(full), rows * scale_cols(full)));
}

TEST(WeightShard, WeightRowsSliceEveryFormatOnItsScaleGrid) {
  const ModelWeights& w = testing::tiny_model(5).weights;
  const LinearWeight& fp8 = w.layers[0].attn.wq_b;  // [4 x 128, 128]
  expect_rows_of(fp8, weight_rows(fp8, {128, 384}), 128);
  EXPECT_THAT(testing::error_of([&] { weight_rows(fp8, {64, 192}); }), HasSubstr("cut a 128-row scale block"));
  EXPECT_THAT(testing::error_of([&] { weight_rows(fp8, {0, 1024}); }), HasSubstr("outside"));
  const LinearWeight& routed = w.layers[1].ffn.experts[3].w1;
  expect_rows_of(routed, weight_rows(routed, {37, 101}), 37);
  expect_rows_of(w.head, weight_rows(w.head, {512, 1024}), 512);
}

TEST(WeightShard, TensorParallelRanksHoldTheirHeadsRowsAndVocabulary) {
  const LoadedModel& m = testing::tiny_model(5);
  const ModelConfig& c = m.config;
  const ParallelLayout l = plan_parallel(c, {2, 1, false});
  for (int r = 0; r < 2; ++r) {
    const ModelWeights s = shard_weights(m.weights, c, l, r);
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const BlockWeights &f = m.weights.layers[i], &b = s.layers[i];
      expect_rows_of(f.attn.wq_b, b.attn.wq_b, r * 2 * c.head_dim);
      EXPECT_EQ(b.attn.attn_sink, f.attn.attn_sink + 2 * r);
      expect_rows_of(f.attn.wo_a, b.attn.wo_a, r * c.o_lora_rank);
      expect_rows_of(f.attn.wo_b, b.attn.wo_b, r * c.dim / 2);
      EXPECT_EQ(b.attn.wq_a.data, f.attn.wq_a.data);    // replicated
      EXPECT_EQ(b.ffn.shared.w1.out, c.moe_inter_dim);  // 64-row halves would cut FP8 blocks
      for (size_t e = 0; e < b.ffn.experts.size(); ++e) {
        expect_rows_of(f.ffn.experts[e].w3, b.ffn.experts[e].w3, r * c.moe_inter_dim / 2);
        expect_rows_of(f.ffn.experts[e].w2, b.ffn.experts[e].w2, r * c.dim / 2);
      }
    }
    expect_rows_of(m.weights.head, s.head, r * c.vocab_size / 2);
  }
  EXPECT_EQ(PlacedWeights::bytes_needed(shard_weights(m.weights, c, l, 0), c),
            PlacedWeights::bytes_needed(shard_weights(m.weights, c, l, 1), c));
  EXPECT_LT(PlacedWeights::bytes_needed(shard_weights(m.weights, c, l, 0), c),
            PlacedWeights::bytes_needed(m.weights, c) * 3 / 4);
}

TEST(WeightShard, ExpertParallelRanksHoldOnlyTheirExperts) {
  const LoadedModel& m = testing::tiny_model(5);
  const ModelConfig& c = m.config;
  const ParallelLayout l = plan_parallel(c, {1, 4, true});
  for (int r = 0; r < 4; ++r) {
    const ModelWeights s = shard_weights(m.weights, c, l, r);
    for (size_t i = 0; i < s.layers.size(); ++i) {
      for (int e = 0; e < c.n_routed_experts; ++e) {
        const LinearWeight& w1 = s.layers[i].ffn.experts[static_cast<size_t>(e)].w1;
        if (e / 2 == r)
          expect_rows_of(m.weights.layers[i].ffn.experts[static_cast<size_t>(e)].w1, w1, 0);
        else
          EXPECT_EQ(w1.data, nullptr) << "rank " << r << " expert " << e;
      }
    }
    EXPECT_EQ(s.head.data, m.weights.head.data);
  }
  const ModelWeights one = shard_weights(m.weights, c, plan_parallel(c, {}), 0);
  EXPECT_EQ(PlacedWeights::bytes_needed(one, c), PlacedWeights::bytes_needed(m.weights, c));
}

}  // namespace
}  // namespace dsv4
