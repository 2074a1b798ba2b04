// Where an engine's ranks go and how they meet: threads over the host communicator on the CPU, NCCL
// where every rank has a GPU, collectives staged through host memory where ranks share GPUs.
#include "backend/rank_group.h"

#include <gtest/gtest.h>

#include <random>

#include "backend/comm/rank_threads.h"
#include "backend/comm/staged_communicator.h"

namespace dsv4 {
namespace {

TEST(RankPlacement, CpuRanksAreThreadsOverTheHostCommunicator) {
  const RankPlacement p = place_ranks("cpu", 4);
  EXPECT_EQ(p.kind, CommKind::kHost);
  EXPECT_EQ(p.gpus, 0);
  EXPECT_EQ(p.gpu_of(3), 0);
}

TEST(RankPlacement, EveryRankHasAGpuOfItsOwnWhenThereAreEnough) {
  const RankPlacement p = place_ranks("cuda", 4, 8);
  EXPECT_EQ(p.kind, CommKind::kNccl);
  EXPECT_EQ(p.gpus, 4);
  EXPECT_EQ(p.ranks_per_gpu, 1);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(p.gpu_of(r), r);
  EXPECT_NE(p.describe(4).find("NCCL"), std::string::npos);
}

TEST(RankPlacement, RanksShareGpusThroughStagedCollectivesWhenThereAreFewer) {
  const RankPlacement one = place_ranks("cuda", 4, 1);
  EXPECT_EQ(one.kind, CommKind::kStaged);
  EXPECT_EQ(one.ranks_per_gpu, 4);
  EXPECT_EQ(one.gpu_of(3), 0);
  const RankPlacement some = place_ranks("cuda", 6, 4);
  EXPECT_EQ(some.kind, CommKind::kStaged);
  EXPECT_EQ(some.ranks_per_gpu, 2);
  EXPECT_EQ(some.gpu_of(5), 1);
  EXPECT_THROW(place_ranks("cuda", 2, 0), Error);
}

// A group of one (a replica with one tensor-parallel rank) never loads NCCL: it has no peer to meet.
TEST(RankGroup, AGroupOfOneNeedsNoNccl) {
  EXPECT_EQ(RankGroup(CommKind::kNccl, 1, std::chrono::seconds(1)).kind(), CommKind::kStaged);
}

// The staged members work on any device: here host memory, as on the GPU through its copies.
TEST(RankGroup, MembersOfEachKindMeetTheirPeers) {
  for (const CommKind kind : {CommKind::kHost, CommKind::kStaged}) {
    constexpr int kRanks = 3;
    RankGroup group(kind, kRanks, std::chrono::seconds(10));
    std::vector<std::unique_ptr<HostDevice>> devs;
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < kRanks; ++r) {
      devs.push_back(std::make_unique<HostDevice>());
      comms.push_back(group.member(*devs.back(), r));
    }
    EXPECT_EQ(kind == CommKind::kStaged, dynamic_cast<StagedCommunicator*>(comms[1].get()) != nullptr);
    std::mt19937 rng(std::random_device{}());
    std::vector<uint64_t> sent(kRanks);
    for (uint64_t& v : sent) v = rng();
    std::vector<std::vector<uint64_t>> got(kRanks, std::vector<uint64_t>(kRanks));
    std::vector<Communicator*> ranks;
    for (auto& c : comms) ranks.push_back(c.get());
    run_ranks(ranks, [&](Communicator& c) {
      const auto r = static_cast<size_t>(c.rank());
      c.all_gather(&sent[r], got[r].data(), sizeof(uint64_t));
    });
    for (const auto& g : got) EXPECT_EQ(g, sent) << comm_kind_name(kind);
  }
}

}  // namespace
}  // namespace dsv4
