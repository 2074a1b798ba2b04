// A model sharded over threads (the host communicator) gives one rank's logits bit for bit, in every
// layout the tiny model takes: heads and rows split by TP rank, experts sliced or owned, replicas with
// their own sequences (prompts of other lengths, so that the expert exchange carries uneven counts).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>

#include "backend/comm/host_communicator.h"
#include "backend/comm/rank_threads.h"
#include "backend/cpu/cpu_ops.h"
#include "model/model.h"
#include "testing/layout_name.h"
#include "testing/prefill_decode.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;

uint32_t seed_of(int replica) { return 11 + static_cast<uint32_t>(replica); }

// The tiny preset, or with 2 x 256 wo_a rows: under tp 4 each rank's 128 rows then lie inside one output
// group (its wo_a reads that group's heads, gathered from two ranks).
const LoadedModel& model(bool wide_groups) {
  if (!wide_groups) return testing::tiny_model(5);
  static const LoadedModel m = [] {
    ModelConfig c = find_preset("tiny").config;
    c.o_lora_rank = 256;
    const auto dir = testing::temp_dir("tiny-wide-groups");
    write_random_checkpoint(c, 6, dir);
    return load_model(dir);
  }();
  return m;
}

std::vector<float> one_rank(int replica, bool wide_groups = false) {
  const LoadedModel& lm = model(wide_groups);
  HostDevice dev;
  CpuOps ops(1);
  Model m(lm.config, lm.weights, ops, dev);
  return testing::seeded_prefill_then_decode(m, dev, seed_of(replica));
}

// Each replica's logits as its TP rank 0 saw them (every TP rank of a replica must agree).
std::vector<std::vector<float>> sharded(const ParallelConfig& pc, bool wide_groups = false) {
  const LoadedModel& lm = model(wide_groups);
  const ParallelLayout layout = plan_parallel(lm.config, pc);
  const int world = pc.world();
  std::vector<std::unique_ptr<HostDevice>> devs;
  for (int r = 0; r < world; ++r) devs.push_back(std::make_unique<HostDevice>());
  auto world_group = std::make_shared<HostGroup>(world, 60s);
  std::vector<std::unique_ptr<HostCommunicator>> world_comms, tp_comms;
  for (int r = 0; r < world; ++r) world_comms.push_back(std::make_unique<HostCommunicator>(world_group, r, *devs[r]));
  for (int d = 0; d < pc.dp; ++d) {
    auto g = std::make_shared<HostGroup>(pc.tp, 60s);
    for (int t = 0; t < pc.tp; ++t)
      tp_comms.push_back(std::make_unique<HostCommunicator>(g, t, *devs[static_cast<size_t>(d * pc.tp + t)]));
  }
  std::vector<std::vector<float>> logits(static_cast<size_t>(world));
  std::vector<Communicator*> ranks;
  for (auto& c : world_comms) ranks.push_back(c.get());
  run_ranks(ranks, [&](Communicator& wc) {
    const int r = wc.rank();
    CpuOps ops(1);
    Model m(lm.config, lm.weights, ops, *devs[static_cast<size_t>(r)],
            ModelShard{layout, r, tp_comms[static_cast<size_t>(r)].get(), &wc});
    logits[static_cast<size_t>(r)] =
        testing::seeded_prefill_then_decode(m, *devs[static_cast<size_t>(r)], seed_of(layout.place(r).dp_rank));
  });
  for (int r = 0; r < world; ++r) {
    const int first = layout.place(r).dp_rank * pc.tp;
    EXPECT_EQ(logits[static_cast<size_t>(r)], logits[static_cast<size_t>(first)]) << "rank " << r;
  }
  std::vector<std::vector<float>> out;
  for (int d = 0; d < pc.dp; ++d) out.push_back(logits[static_cast<size_t>(d * pc.tp)]);
  return out;
}

class ShardedModel : public ::testing::TestWithParam<ParallelConfig> {};

TEST_P(ShardedModel, GivesOneRanksLogitsBitForBit) {
  const ParallelConfig pc = GetParam();
  const auto got = sharded(pc);
  for (int d = 0; d < pc.dp; ++d) {
    const auto want = one_rank(d);
    const auto& g = got[static_cast<size_t>(d)];
    ASSERT_EQ(g.size(), want.size());
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += g[i] != want[i];
    EXPECT_EQ(differ, 0u) << pc.describe() << ", replica " << d << ": " << differ << " of " << want.size()
                          << " logits differ";
  }
}

TEST(ShardedModelGroups, WoASlicesInsideAGroupReadThatGroupsGatheredHeads) {
  const ParallelConfig pc{4, 1, false};
  const ParallelLayout l = plan_parallel(model(true).config, pc);
  ASSERT_TRUE(l.wo_a.split());
  ASSERT_FALSE(l.wo_a_local);
  EXPECT_EQ(sharded(pc, true)[0], one_rank(0, true));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedModel,
                         ::testing::Values(ParallelConfig{2, 1, false}, ParallelConfig{4, 1, false},
                                           ParallelConfig{2, 1, true}, ParallelConfig{4, 1, true},
                                           ParallelConfig{1, 2, true}, ParallelConfig{1, 4, true},
                                           ParallelConfig{2, 2, true}, ParallelConfig{1, 2, false}),
                         testing::LayoutName());

}  // namespace
}  // namespace dsv4
