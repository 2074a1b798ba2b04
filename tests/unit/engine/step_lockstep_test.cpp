// StepLockstep: every replica leaves an iteration with the same decision, the OR of what they brought;
// none leaves before all arrived.
#include "engine/step_lockstep.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

namespace dsv4 {
namespace {

TEST(StepLockstep, EveryReplicaLeavesWithTheOrOfWhatTheyBrought) {
  constexpr int kReplicas = 4, kRounds = 300;
  StepLockstep gate(kReplicas);
  // brought[round][replica], fresh each run; the last round stops.
  std::mt19937 rng(std::random_device{}());
  std::vector<std::vector<int>> brought(kRounds, std::vector<int>(kReplicas));
  for (auto& round : brought)  // 0: nothing, 1: a batch, 2: work without a batch
    for (int& b : round) b = static_cast<int>(rng() % 3);
  std::vector<std::vector<StepLockstep::Decision>> got(kReplicas);
  std::atomic<int> inside{0};
  std::atomic<bool> early{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < kRounds; ++i) {
        inside.fetch_add(1);
        const int b = brought[static_cast<size_t>(i)][static_cast<size_t>(r)];
        const auto d = gate.arrive(b == 1, b != 0, i == kRounds - 1 && r == 2);
        // Everyone of this round arrived before anyone left it.
        if (inside.load() < kReplicas * (i + 1)) early = true;
        got[static_cast<size_t>(r)].push_back(d);
        if (d.stop) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(early.load());
  for (int r = 0; r < kReplicas; ++r) {
    ASSERT_EQ(got[static_cast<size_t>(r)].size(), static_cast<size_t>(kRounds));
    for (int i = 0; i < kRounds; ++i) {
      bool batch = false, work = false;
      for (int b : brought[static_cast<size_t>(i)]) {
        batch = batch || b == 1;
        work = work || b != 0;
      }
      const auto& d = got[static_cast<size_t>(r)][static_cast<size_t>(i)];
      EXPECT_EQ(d.step, batch) << "replica " << r << ", round " << i;
      EXPECT_EQ(d.busy, work) << "replica " << r << ", round " << i;
      EXPECT_EQ(d.stop, i == kRounds - 1) << "replica " << r << ", round " << i;
    }
  }
}

TEST(StepLockstep, OneReplicaDecidesAlone) {
  StepLockstep gate(1);
  EXPECT_TRUE(gate.arrive(true, true, false).step);
  EXPECT_FALSE(gate.arrive(false, false, false).step);
  const StepLockstep::Decision waiting = gate.arrive(false, true, false);
  EXPECT_FALSE(waiting.step);
  EXPECT_TRUE(waiting.busy);
  EXPECT_TRUE(gate.arrive(false, false, true).stop);
}

// Work noted between two gates makes the second busy (a replica may have taken the wake before the
// work reached its peer); work noted after a gate is seen against that gate's epoch.
TEST(StepLockstep, NotedWorkKeepsEveryReplicaComingBack) {
  StepLockstep gate(1);
  const StepLockstep::Decision quiet = gate.arrive(false, false, false);
  EXPECT_FALSE(quiet.busy);
  EXPECT_FALSE(gate.noted_since(quiet.epoch));
  gate.note_work();
  EXPECT_TRUE(gate.noted_since(quiet.epoch));  // a replica asleep after `quiet` wakes
  const StepLockstep::Decision next = gate.arrive(false, false, false);
  EXPECT_TRUE(next.busy);  // and every replica comes back once more
  EXPECT_FALSE(gate.noted_since(next.epoch));
  EXPECT_FALSE(gate.arrive(false, false, false).busy);
}

}  // namespace
}  // namespace dsv4
