// ParallelLayout: which layouts a model takes (and what a refusal names), how each weight is held
// across ranks, and the bytes each rank holds, checked against the release's tensor list summed
// independently of the layout's own accounting.
#include "model/parallel_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "model/model_shard.h"
#include "model/weights.h"
#include "model_tools/presets.h"
#include "testing/error_of.h"

namespace dsv4 {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

struct Bytes {
  uint64_t all = 0;     // every tensor
  uint64_t routed = 0;  // routed experts' tensors
};

Bytes tensor_bytes(const ModelConfig& c) {
  Bytes b;
  for (const auto& t : checkpoint_tensor_specs(c)) {
    const int64_t n = std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1}, std::multiplies<>());
    const uint64_t bytes = static_cast<uint64_t>(n) * dtype_size(t.dtype);
    b.all += bytes;
    if (t.name.find(".experts.") != std::string::npos && t.name.find("shared") == std::string::npos) b.routed += bytes;
  }
  return b;
}

TEST(ParallelLayout, SplitRowsTakesWholeGranulesOrReplicates) {
  EXPECT_EQ(split_rows(4096, 128, 8).parts, 8);
  EXPECT_EQ(split_rows(256, 128, 4).parts, 1);  // 64-row slices would cut FP8 scale blocks
  EXPECT_EQ(split_rows(256, 1, 4).parts, 4);
  EXPECT_EQ(split_rows(100, 1, 3).parts, 1);
  const RowSplit s = split_rows(4096, 128, 8);
  EXPECT_EQ(s.range(3).begin, 1536);
  EXPECT_EQ(s.range(3).end, 2048);
  EXPECT_EQ(split_rows(4096, 128, 1).range(0).size(), 4096);
}

TEST(ParallelLayout, OneRankHoldsEverything) {
  const ModelConfig& c = find_preset("tiny").config;
  const ParallelLayout l = plan_parallel(c, {});
  EXPECT_FALSE(l.heads.split());
  EXPECT_TRUE(l.wo_a_local);
  EXPECT_EQ(l.experts_of(0).size(), c.n_routed_experts);
  EXPECT_EQ(weight_bytes_of_rank(c, l, 0), tensor_bytes(c).all);
  EXPECT_EQ(describe_layout(c, l).size(), 1u);
}

// Only ranks that meet peers step eagerly: a data-parallel replica without expert parallelism holds the
// whole model (its decode steps may be recorded as CUDA graphs).
TEST(ParallelLayout, ReplicasWithoutExpertParallelismMeetNoPeers) {
  const ModelConfig& c = find_preset("tiny").config;
  const auto meets = [&](ParallelConfig pc) { return ModelShard{plan_parallel(c, pc), pc.world() - 1}.meets_peers(); };
  EXPECT_FALSE(meets({}));
  EXPECT_FALSE(meets({1, 2, false}));
  EXPECT_TRUE(meets({1, 2, true}));
  EXPECT_TRUE(meets({2, 1, false}));
  EXPECT_TRUE(meets({2, 2, false}));
}

TEST(ParallelLayout, TinyTensorParallelSplitsWhatDividesIntoScaleBlocks) {
  const ModelConfig& c = find_preset("tiny").config;  // 4 heads, 2 groups x 128, dim 256, inter 128
  const ParallelLayout two = plan_parallel(c, {2, 1, false});
  EXPECT_EQ(two.heads.range(1).begin, 2);
  EXPECT_TRUE(two.wo_a.split());
  EXPECT_TRUE(two.wo_a_local);  // one whole group per rank
  EXPECT_TRUE(two.wo_b.split());
  EXPECT_FALSE(two.shared_inter.split());  // 64 rows of an FP8 weight
  EXPECT_EQ(two.routed_inter.split(), c.expert_format != WeightFormat::kFp8);
  EXPECT_TRUE(two.vocab.split());

  const ParallelLayout four = plan_parallel(c, {4, 1, false});
  EXPECT_EQ(four.heads.range(3).begin, 3);
  EXPECT_FALSE(four.wo_a.split());
  EXPECT_FALSE(four.wo_a_local);  // the attention output is gathered before wo_a
  EXPECT_FALSE(four.wo_b.split());
  EXPECT_EQ(four.place(3).tp_rank, 3);
}

TEST(ParallelLayout, ExpertParallelOwnsWholeExpertsAcrossEveryRank) {
  const ModelConfig& c = find_preset("tiny").config;
  const ParallelLayout l = plan_parallel(c, {1, 4, true});
  EXPECT_EQ(l.ep_size, 4);
  EXPECT_FALSE(l.routed_inter.split());
  const Bytes b = tensor_bytes(c);
  uint64_t sum = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(l.experts_of(r).begin, 2 * r);
    EXPECT_EQ(l.place(r).dp_rank, r);
    const uint64_t mine = weight_bytes_of_rank(c, l, r);
    EXPECT_EQ(mine, b.all - b.routed + b.routed / 4);
    sum += mine;
  }
  EXPECT_EQ(sum, 4 * (b.all - b.routed) + b.routed);
}

TEST(ParallelLayout, V4FlashFitsTwoH200sWithExpertParallelism) {
  const ModelConfig c = v4_flash_config();
  const uint64_t h200 = uint64_t{141} << 30;
  EXPECT_GT(tensor_bytes(c).all, h200);
  const ParallelLayout ep = plan_parallel(c, {2, 1, true});
  EXPECT_TRUE(ep.wo_a_local);
  for (int r = 0; r < 2; ++r) EXPECT_LT(weight_bytes_of_rank(c, ep, r), h200 * 7 / 10);
  const ParallelLayout tp8 = plan_parallel(c, {8, 1, false});
  EXPECT_EQ(tp8.heads.range(7).begin, 56);
  EXPECT_TRUE(tp8.wo_a_local);
  EXPECT_TRUE(tp8.routed_inter.split());
  EXPECT_EQ(weight_bytes_of_rank(c, tp8, 0), weight_bytes_of_rank(c, tp8, 7));
  EXPECT_LT(weight_bytes_of_rank(c, tp8, 0), tensor_bytes(c).all / 6);
  EXPECT_EQ(describe_layout(c, tp8).size(), 3u + 8u);
}

TEST(ParallelLayout, RefusalsNameLayoutsThatWork) {
  const ModelConfig& c = find_preset("tiny").config;
  const std::string heads = error_of([&] { plan_parallel(c, {3, 1, false}); });
  EXPECT_THAT(heads, HasSubstr("does not divide the 4 attention heads"));
  EXPECT_THAT(heads, HasSubstr("tp 1 x dp 3, experts whole"));
  const std::string experts = error_of([&] { plan_parallel(c, {1, 3, true}); });
  EXPECT_THAT(experts, HasSubstr("3 expert-parallel ranks do not divide the 8 routed experts"));
  EXPECT_THAT(error_of([&] { plan_parallel(c, {0, 1, false}); }), HasSubstr("at least 1"));
  ModelConfig odd = c;
  odd.index_n_heads = 2;
  EXPECT_THAT(error_of([&] { plan_parallel(odd, {4, 1, false}); }), HasSubstr("indexer heads"));
}

TEST(ParallelLayout, WorkingLayoutsListEveryAcceptedSplit) {
  const ModelConfig& c = find_preset("tiny").config;
  const auto four = working_layouts(c, 4);
  EXPECT_EQ(four.size(), 6u);  // tp 4, tp 2 x dp 2, tp 1 x dp 4, each with and without EP
  EXPECT_EQ(four.front(), (ParallelConfig{4, 1, false}));
  EXPECT_EQ(working_layouts(c, 1).size(), 1u);
  for (const auto& pc : four) EXPECT_NO_THROW(plan_parallel(c, pc)) << pc.describe();
}

}  // namespace
}  // namespace dsv4
