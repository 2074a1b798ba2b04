// Where an engine's ranks go and how they meet: threads over the host communicator on the CPU, NCCL
// where every rank has a GPU, collectives staged through host memory where ranks share GPUs.
#include "backend/rank_group.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "backend/comm/rank_threads.h"
#include "backend/comm/staged_communicator.h"
#include "testing/error_of.h"
#include "testing/free_port.h"

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

// Across hosts each host runs its share of the ranks, one GPU each, over NCCL.
TEST(RankPlacement, SeveralHostsEachRunTheirShareOverNccl) {
  const RankPlacement p = place_ranks("cuda", 16, 8, {2, 1, "10.0.0.1", 29500});
  EXPECT_EQ(p.kind, CommKind::kNccl);
  EXPECT_EQ(p.first_rank, 8);
  EXPECT_EQ(p.local_ranks, 8);
  EXPECT_EQ(p.gpu_of(9), 1);
  EXPECT_NE(p.describe(16).find("this host runs ranks 8-15"), std::string::npos) << p.describe(16);
}

TEST(RankPlacement, SeveralHostsAreRefusedWhereNcclCannotJoinThem) {
  const auto why = [](std::string_view backend, int world, int gpus, NodeConfig n) {
    return testing::error_of([&] { place_ranks(backend, world, gpus, n); });
  };
  EXPECT_NE(why("cpu", 4, 0, {2, 0}).find("use --backend cuda"), std::string::npos);
  EXPECT_NE(why("cuda", 16, 4, {2, 0}).find("sees 4 GPU(s)"), std::string::npos);
  EXPECT_NE(why("cuda", 6, 8, {4, 0}).find("do not divide over --nnodes 4"), std::string::npos);
  EXPECT_NE(why("cuda", 4, 8, {2, 2}).find("--node-rank 2 of --nnodes 2"), std::string::npos);
}

// Host 0 makes the groups' ids; every host gets them through the rendezvous (two hosts as threads).
TEST(AgreeNcclIds, EveryHostGetsHostZerosIds) {
  const int port = testing::free_port();
  std::mt19937 rng(std::random_device{}());
  std::vector<RankGroup::NcclId> made;
  const auto make = [&] {
    RankGroup::NcclId id;
    for (auto& b : id) b = static_cast<std::byte>(rng());
    made.push_back(id);
    return id;
  };
  std::vector<std::vector<RankGroup::NcclId>> got(2);
  std::vector<std::thread> hosts;
  for (int h = 0; h < 2; ++h)
    hosts.emplace_back([&, h] {
      got[static_cast<size_t>(h)] = agree_nccl_ids({2, h, "127.0.0.1", port}, 3, std::chrono::seconds(20), make);
    });
  for (auto& t : hosts) t.join();
  ASSERT_EQ(made.size(), 3u);  // host 0 alone made them
  EXPECT_EQ(got[0], made);
  EXPECT_EQ(got[1], made);
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
