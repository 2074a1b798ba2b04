// ReplicaRouter: a prompt that continues one goes where most of it went, within a load margin; anything
// else goes to the least loaded replica.
#include "engine/replica_router.h"

#include <gtest/gtest.h>

#include <random>

#include "kv/block_hash.h"

namespace dsv4 {
namespace {

std::vector<int32_t> random_prompt(size_t n, std::mt19937& rng) {
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % 50000);
  return p;
}

std::vector<int32_t> continued(std::vector<int32_t> p, size_t more, std::mt19937& rng) {
  for (const int32_t t : random_prompt(more, rng)) p.push_back(t);
  return p;
}

TEST(ReplicaRouter, AContinuedPromptGoesWhereItsPrefixWent) {
  std::mt19937 rng(std::random_device{}());
  ReplicaRouter r(3);
  const auto a = random_prompt(600, rng);                      // two whole blocks
  EXPECT_EQ(r.route(a, "", std::vector<size_t>{4, 1, 3}), 1);  // the least loaded
  // The next turn: replica 1 is now busier than replica 0, but within the margin.
  EXPECT_EQ(r.route(continued(a, 300, rng), "", std::vector<size_t>{0, 2, 5}), 1);
  std::vector<uint64_t> hashes;
  extend_block_hashes(hashes, continued(a, 300, rng), prefix_hash_seed(""));
  EXPECT_EQ(r.matched(hashes), (std::vector<size_t>{0, 2, 0}));
}

// Of the replicas a prompt's prefix went to, the one holding the longest part of it wins.
TEST(ReplicaRouter, TheLongestMatchWins) {
  std::mt19937 rng(std::random_device{}());
  ReplicaRouter r(2);
  const auto a = random_prompt(300, rng), b = continued(a, 600, rng);
  ASSERT_EQ(r.route(a, "", std::vector<size_t>{1, 0}), 1);  // one block on replica 1
  ASSERT_EQ(r.route(b, "", std::vector<size_t>{0, 3}), 0);  // replica 1 too busy: three blocks on replica 0
  EXPECT_EQ(r.route(continued(b, 100, rng), "", std::vector<size_t>{1, 0}), 0);
  EXPECT_EQ(r.route(continued(a, 100, rng), "", std::vector<size_t>{1, 0}), 1);  // a's block is on both
}

TEST(ReplicaRouter, ABusyReplicaLosesItsAffinity) {
  std::mt19937 rng(std::random_device{}());
  ReplicaRouter r(2);
  const auto a = random_prompt(512, rng);
  ASSERT_EQ(r.route(a, "", std::vector<size_t>{0, 0}), 0);
  EXPECT_EQ(r.route(a, "", std::vector<size_t>{2, 0}), 0);                        // within the margin of 2
  EXPECT_EQ(r.route(a, "", std::vector<size_t>{3, 0}), 1);                        // beyond it
  EXPECT_EQ(r.route(a, "", std::vector<size_t>{1, 0}), 1);                        // both hold it now: the lighter
  EXPECT_EQ(ReplicaRouter::margin(40), 10u);                                      // a quarter when that is more
  EXPECT_EQ(r.route(random_prompt(200, rng), "", std::vector<size_t>{1, 0}), 1);  // no whole block: least loaded
}

TEST(ReplicaRouter, SaltsAndForgottenBlocksDoNotMatch) {
  std::mt19937 rng(std::random_device{}());
  ReplicaRouter r(2, /*capacity=*/2);
  const auto a = random_prompt(512, rng), b = random_prompt(512, rng);
  ASSERT_EQ(r.route(a, "alice", std::vector<size_t>{1, 0}), 1);
  EXPECT_EQ(r.route(a, "bob", std::vector<size_t>{0, 1}), 0);  // other salt: other blocks
  EXPECT_EQ(r.remembered(), 2u);
  ASSERT_EQ(r.route(b, "", std::vector<size_t>{1, 0}), 1);  // pushes a's blocks out
  EXPECT_EQ(r.remembered(), 2u);
  EXPECT_EQ(r.route(a, "alice", std::vector<size_t>{0, 1}), 0);  // forgotten: least loaded
}

}  // namespace
}  // namespace dsv4
