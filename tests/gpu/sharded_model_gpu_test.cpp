// The sharded model on CUDA: ranks as threads sharing the one GPU, each with its own CudaDevice and
// CudaOps, meeting through the host-staged communicator. On the exact tier every layout gives the CPU's
// one-rank logits bit for bit (CUDA's exact ops are the CPU's bits).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include "backend/backend.h"
#include "backend/comm/rank_threads.h"
#include "backend/comm/staged_communicator.h"
#include "backend/cpu/cpu_ops.h"
#include "model/model.h"
#include "testing/layout_name.h"
#include "testing/prefill_decode.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

using namespace std::chrono_literals;
class CudaShardedModel : public ::testing::TestWithParam<ParallelConfig> {};

TEST_P(CudaShardedModel, RanksSharingTheGpuGiveTheCpusOneRankBits) {
  const ParallelConfig pc = GetParam();
  const LoadedModel& lm = testing::tiny_model(5);
  const ParallelLayout layout = plan_parallel(lm.config, pc);
  const int world = pc.world();
  std::vector<Backend> backends;
  std::vector<Device*> devices;
  for (int r = 0; r < world; ++r) {
    backends.push_back(make_backend("cuda", 0, Numerics::kExact));
    devices.push_back(backends.back().device.get());
  }
  auto world_comms = make_staged_communicators(devices, 120s);
  std::vector<std::unique_ptr<StagedCommunicator>> tp_comms;
  for (int d = 0; d < pc.dp; ++d) {
    const std::vector<Device*> group(devices.begin() + d * pc.tp, devices.begin() + (d + 1) * pc.tp);
    for (auto& c : make_staged_communicators(group, 120s)) tp_comms.push_back(std::move(c));
  }
  std::vector<std::vector<float>> got(static_cast<size_t>(world));
  std::vector<Communicator*> ranks;
  for (auto& c : world_comms) ranks.push_back(c.get());
  run_ranks(ranks, [&](Communicator& wc) {
    const auto r = static_cast<size_t>(wc.rank());
    Model m(lm.config, lm.weights, *backends[r].ops, *backends[r].device,
            ModelShard{layout, wc.rank(), tp_comms[r].get(), &wc});
    got[r] = testing::seeded_prefill_then_decode(m, *backends[r].device,
                                                 21 + static_cast<uint32_t>(layout.place(wc.rank()).dp_rank));
  });
  for (int r = 0; r < world; ++r) {
    HostDevice host;
    CpuOps cpu(2);
    Model one(lm.config, lm.weights, cpu, host);
    const auto want =
        testing::seeded_prefill_then_decode(one, host, 21 + static_cast<uint32_t>(layout.place(r).dp_rank));
    ASSERT_EQ(got[static_cast<size_t>(r)].size(), want.size());
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[static_cast<size_t>(r)][i] != want[i];
    EXPECT_EQ(differ, 0u) << pc.describe() << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaShardedModel,
                         ::testing::Values(ParallelConfig{2, 1, false}, ParallelConfig{2, 1, true},
                                           ParallelConfig{1, 2, true}),
                         testing::LayoutName());

}  // namespace
}  // namespace dsv4
