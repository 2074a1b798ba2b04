// The engine's ranks on CUDA, sharing the one GPU (collectives staged through host memory): a
// replica's tensor-parallel ranks, and expert-parallel replicas stepping together. On the exact tier
// each request's tokens are the CPU engine's with one rank.
#include <gtest/gtest.h>

#include "testing/layout_name.h"
#include "unit/engine/engine_test_support.h"

namespace dsv4 {
namespace {

using namespace enginetest;

std::vector<std::vector<int32_t>> serve(const char* backend, const ParallelConfig& pc) {
  EngineConfig c = base_config();
  c.backend = backend;
  c.numerics = "exact";
  c.parallel = pc;
  c.collective_timeout = std::chrono::seconds(60);
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 128;
  c.max_prefill_chunk = 64;
  Engine e(tiny_model().config, tiny_model().weights, c);
  return serve_spread(e);
}

class CudaEngineParallel : public ::testing::TestWithParam<ParallelConfig> {};

TEST_P(CudaEngineParallel, RanksSharingTheGpuServeTheCpusOneRankTokens) {
  static const auto want = serve("cpu", {});
  EXPECT_EQ(serve("cuda", GetParam()), want);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaEngineParallel,
                         ::testing::Values(ParallelConfig{2, 1, false}, ParallelConfig{2, 1, true},
                                           ParallelConfig{1, 2, true}, ParallelConfig{2, 2, true}),
                         testing::LayoutName());

}  // namespace
}  // namespace dsv4
