#include "model/step_shape.h"

#include <gtest/gtest.h>

#include <utility>

#include "model_tools/presets.h"

namespace dsv4 {
namespace {

TEST(StepShape, BatchBuckets) {
  const std::pair<int64_t, int64_t> want[] = {{0, 0},  {1, 1},   {2, 2},     {3, 4},  {5, 8},
                                              {9, 16}, {17, 24}, {256, 256}, {257, 0}};  // (batch, bucket)
  for (const auto& [batch, bucket] : want) EXPECT_EQ(batch_bucket(batch), bucket) << batch;
}

TEST(StepShape, WidthBucketsAreAtMostAQuarterWider) {
  const std::pair<int64_t, int64_t> want[] = {{0, 0}, {1, 16}, {16, 16}, {17, 32}, {129, 160}};  // (width, bucket)
  for (const auto& [width, bucket] : want) EXPECT_EQ(width_bucket(width), bucket) << width;
  for (int64_t w = 1; w < 300000; w += 7) {
    const int64_t b = width_bucket(w);
    ASSERT_GE(b, w);
    ASSERT_LT(b, w + std::max<int64_t>(16, w / 4 + 1)) << w;
    ASSERT_EQ(width_bucket(b), b) << w;  // a bucket is its own bucket
  }
}

TEST(StepShape, DecodeOnlyBatchesHaveAShape) {
  const ModelConfig& c = find_preset("tiny").config;  // ratios 4 and 128
  const int32_t ids[4] = {1, 2, 3, 4};
  ForwardBatch b;
  b.add(0, 130, ids, 1);
  b.add(1, 7, ids + 1, 1);
  b.add(2, 300, ids + 2, 1);
  const auto shape = decode_shape(c, b);
  ASSERT_TRUE(shape);
  EXPECT_EQ(shape->batch, 4);
  EXPECT_EQ(shape->widths, (std::vector<int32_t>{width_bucket(301 / 4), width_bucket(301 / 128)}));

  const ForwardBatch p = pad_batch(b, *shape);
  ASSERT_EQ(p.seqs.size(), 4u);
  EXPECT_TRUE(p.seqs[3].shadow);
  EXPECT_EQ(p.seqs[3].seq, 0);
  EXPECT_EQ(p.seqs[3].start, 130);
  EXPECT_EQ(p.token_ids[3], 1);
  EXPECT_FALSE(decode_shape(c, p));  // shadows are never padded again

  ForwardBatch prefill;
  prefill.add(0, 0, ids, 4);
  EXPECT_FALSE(decode_shape(c, prefill));
  ForwardBatch quiet;
  quiet.add(0, 9, ids, 1, false);
  EXPECT_FALSE(decode_shape(c, quiet));
}

}  // namespace
}  // namespace dsv4
