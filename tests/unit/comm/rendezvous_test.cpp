// The TCP rendezvous over localhost: ranks are threads, rank 0 listens on a free port.
#include "backend/comm/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "testing/error_of.h"
#include "testing/free_port.h"
#include "unit/comm/communicator_test_support.h"

namespace dsv4 {
namespace {

using commtest::has;
using std::chrono::milliseconds;
using testing::error_of;
using testing::free_port;
using Clock = std::chrono::steady_clock;

struct Joined {
  std::vector<std::byte> blob;
  std::string error;
};

// Runs the rendezvous for each (world size, rank) on its own thread; rank 0 offers `blob`.
std::vector<Joined> meet(const std::vector<std::pair<int, int>>& ranks, const std::vector<std::byte>& blob,
                         milliseconds timeout) {
  const int port = free_port();
  std::vector<Joined> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      const RendezvousOptions o{.master_addr = "localhost",
                                .master_port = port,
                                .world_size = ranks[i].first,
                                .rank = ranks[i].second,
                                .timeout = timeout};
      out[i].error =
          error_of([&] { out[i].blob = rendezvous(o, ranks[i].second == 0 ? blob : std::vector<std::byte>{}); });
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

std::vector<std::byte> unique_id() {
  const std::vector<uint8_t> b = commtest::random_bytes(128, 77);
  std::vector<std::byte> id(b.size());
  for (size_t i = 0; i < b.size(); ++i) id[i] = std::byte{b[i]};
  return id;
}

TEST(Rendezvous, EveryRankGetsRankZerosBlob) {
  // The others start first: they retry until rank 0 listens.
  const auto got = meet({{4, 3}, {4, 1}, {4, 2}, {4, 0}}, unique_id(), std::chrono::seconds(20));
  for (const Joined& j : got) {
    EXPECT_EQ(j.error, "");
    EXPECT_EQ(j.blob, unique_id());
  }
}

TEST(Rendezvous, OneRankNeedsNoNetwork) {
  const RendezvousOptions o{.world_size = 1, .rank = 0, .timeout = milliseconds(10)};
  EXPECT_EQ(rendezvous(o, unique_id()), unique_id());
}

TEST(Rendezvous, MissingPeerFailsEveryRankWithinTheTimeout) {
  const auto start = Clock::now();
  const auto got = meet({{3, 0}, {3, 1}}, unique_id(), milliseconds(300));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(has(got[0].error, "failed: rank(s) 2 never joined within 300 ms"));
  EXPECT_TRUE(has(got[1].error, "rank 1: rendezvous at localhost:"));
  EXPECT_TRUE(has(got[1].error, "rank(s) 2 never joined"));
}

TEST(Rendezvous, WorldSizeMismatchIsRefused) {
  const auto got = meet({{2, 0}, {3, 1}}, unique_id(), std::chrono::seconds(10));
  EXPECT_TRUE(has(got[0].error, "rank 1 has world size 3, rank 0 has 2"));
  EXPECT_TRUE(has(got[1].error, "rank 1 has world size 3, rank 0 has 2"));
}

TEST(Rendezvous, DuplicateRankIsRefused) {
  const auto got = meet({{3, 0}, {3, 1}, {3, 1}}, unique_id(), std::chrono::seconds(10));
  EXPECT_TRUE(has(got[0].error, "rank 1 joined twice"));
  EXPECT_TRUE(has(got[1].error, "rank 1 joined twice"));
  EXPECT_TRUE(has(got[2].error, "rank 1 joined twice"));
}

TEST(Rendezvous, NoRankZeroMeansAnErrorNotAHang) {
  const auto start = Clock::now();
  const auto got = meet({{2, 1}}, {}, milliseconds(200));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(has(got[0].error, "rank 1 could not reach rank 0 at localhost:"));
}

TEST(Rendezvous, GlobalRankIsTorchrunsNumbering) {
  EXPECT_EQ(global_rank(0, 8, 0), 0);
  EXPECT_EQ(global_rank(1, 8, 3), 11);
  EXPECT_TRUE(has(error_of([] { global_rank(1, 8, 8); }), "local rank 8 of 8 a node"));
}

}  // namespace
}  // namespace dsv4
