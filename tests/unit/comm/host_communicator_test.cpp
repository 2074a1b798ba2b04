// The host communicator's failures: errors within the timeout, never hangs; an aborting rank fails
// every rank; calls that differ across ranks are reported by name.
#include "backend/comm/host_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/comm/rank_order_sum.h"
#include "backend/comm/rank_threads.h"
#include "backend/comm/staged_communicator.h"
#include "testing/error_of.h"
#include "unit/comm/communicator_test_support.h"

namespace dsv4 {
namespace {

using commtest::has;
using std::chrono::milliseconds;
using testing::error_of;

using Clock = std::chrono::steady_clock;

// Runs fn(rank) on a thread per rank; returns each rank's error message ("" for none).
std::vector<std::string> errors_of(int ranks, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] { errors[static_cast<size_t>(r)] = error_of([&] { fn(r); }); });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(HostCommunicator, PeerThatNeverJoinsTimesOut) {
  HostDevice dev;
  auto group = std::make_shared<HostGroup>(3, milliseconds(150));
  HostCommunicator r0(group, 0, dev), r1(group, 1, dev), r2(group, 2, dev);  // rank 2 never calls
  std::vector<HostCommunicator*> comms{&r0, &r1};
  const auto start = Clock::now();
  const auto errors = errors_of(2, [&](int r) {
    std::vector<uint8_t> in(8, 1), out(24);
    comms[static_cast<size_t>(r)]->barrier();  // collective #1
    comms[static_cast<size_t>(r)]->all_gather(in.data(), out.data(), 8);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  for (const std::string& e : errors) {
    EXPECT_TRUE(has(e, "barrier #1 timed out after 150 ms"));
    EXPECT_TRUE(has(e, "rank(s) 2 never arrived"));
  }
  // The group is broken for good: later calls fail at once.
  EXPECT_TRUE(has(error_of([&] { r2.barrier(); }), "never arrived"));
}

TEST(HostCommunicator, TimeoutNamesEveryMissingRank) {
  HostDevice dev;
  auto comms = make_host_communicators(4, milliseconds(100), dev);
  EXPECT_TRUE(has(error_of([&] { comms[1]->barrier(); }), "on rank 1: rank(s) 0, 2, 3 never arrived"));
}

TEST(HostCommunicator, RankWhoseCommunicatorIsGoneFailsPeersAtOnce) {
  HostDevice dev;
  auto comms = make_host_communicators(2, std::chrono::seconds(60), dev);
  const auto start = Clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    comms[1].reset();
  });
  const std::string e = error_of([&] { comms[0]->barrier(); });
  t.join();
  EXPECT_TRUE(has(e, "barrier #1: rank 1 left the group"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(HostCommunicator, AbortFailsEveryRankWithItsReason) {
  HostDevice dev;
  auto comms = make_host_communicators(3, std::chrono::seconds(60), dev);
  const auto start = Clock::now();
  const auto errors = errors_of(3, [&](int r) {
    if (r == 2) {
      std::this_thread::sleep_for(milliseconds(30));
      comms[2]->abort("out of memory loading layer 7");
      return;
    }
    std::vector<float> x(16, 1.0f);
    comms[static_cast<size_t>(r)]->all_reduce(x.data(), x.data(), 16, DType::kF32);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(errors[0], "HostCommunicator: rank 2 failed: out of memory loading layer 7");
  EXPECT_EQ(errors[1], errors[0]);
  EXPECT_EQ(error_of([&] { comms[0]->barrier(); }), errors[0]) << "later collectives fail too";
}

TEST(HostCommunicator, StagedAbortGoesThroughItsHostCommunicator) {
  HostDevice dev;
  auto host = make_host_communicators(2, std::chrono::seconds(60), dev);
  StagedCommunicator staged(dev, std::move(host[1]));
  staged.abort("bad weights");
  EXPECT_EQ(error_of([&] { host[0]->barrier(); }), "HostCommunicator: rank 1 failed: bad weights");
}

TEST(HostCommunicator, RunRanksFailsThePeersOfARankThatThrowsAtOnce) {
  HostDevice dev;
  auto comms = make_host_communicators(3, std::chrono::seconds(60), dev);
  const auto start = Clock::now();
  const std::string e = error_of([&] {
    run_ranks({comms[0].get(), comms[1].get(), comms[2].get()}, [](Communicator& c) {
      if (c.rank() == 1) fail("shard 1 of the weights is missing");
      c.barrier();
    });
  });
  EXPECT_EQ(e, "shard 1 of the weights is missing");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(error_of([&] { comms[0]->barrier(); }),
            "HostCommunicator: rank 1 failed: shard 1 of the weights is missing");
}

TEST(HostCommunicator, MismatchedCollectivesAreNamed) {
  HostDevice dev;
  auto comms = make_host_communicators(2, std::chrono::seconds(60), dev);
  const auto errors = errors_of(2, [&](int r) {
    std::vector<uint16_t> x(8, 0x3f80), out(16);
    if (r == 0) comms[0]->all_gather(x.data(), out.data(), 16);
    if (r == 1) comms[1]->all_reduce(x.data(), x.data(), 8, DType::kBF16);
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e,
              "HostCommunicator: collective #1 differs across ranks: rank 0 called all_gather(bytes=16), rank 1 called "
              "all_reduce(bytes=16, BF16)");
  }
}

TEST(HostCommunicator, MismatchedSizesAndRootsAreNamed) {
  HostDevice dev;
  auto bytes = make_host_communicators(3, std::chrono::seconds(60), dev);
  const auto e1 = errors_of(3, [&](int r) {
    std::vector<uint8_t> buf(64, 7);
    bytes[static_cast<size_t>(r)]->broadcast(buf.data(), r == 2 ? 32 : 64, 0);
  });
  EXPECT_TRUE(has(e1[0], "rank 0 called broadcast(bytes=64, root=0), rank 2 called broadcast(bytes=32, root=0)"));

  auto roots = make_host_communicators(2, std::chrono::seconds(60), dev);
  const auto e2 = errors_of(2, [&](int r) {
    std::vector<uint8_t> buf(64, 7);
    roots[static_cast<size_t>(r)]->broadcast(buf.data(), 64, r);
  });
  EXPECT_TRUE(has(e2[1], "rank 1 called broadcast(bytes=64, root=1)"));
}

TEST(HostCommunicator, MismatchedAllToAllCountsAreNamed) {
  HostDevice dev;
  auto comms = make_host_communicators(2, std::chrono::seconds(60), dev);
  const auto errors = errors_of(2, [&](int r) {
    std::vector<uint8_t> send(16, 3), recv(16);
    const std::vector<size_t> sends{4, 4}, recvs = r == 1 ? std::vector<size_t>{5, 4} : sends;
    comms[static_cast<size_t>(r)]->all_to_all(send.data(), sends, recv.data(), recvs);
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e, "HostCommunicator: all_to_all #1: rank 0 sends 4 bytes to rank 1, which expects 5");
  }
}

TEST(HostCommunicator, RefusesWhatItCannotDo) {
  commtest::FarDevice far;
  EXPECT_TRUE(has(error_of([&] { HostCommunicator(std::make_shared<HostGroup>(1, milliseconds(10)), 0, far); }),
                  "HostCommunicator needs a device with host memory"));
  HostDevice dev;
  auto comms = make_host_communicators(1, std::chrono::seconds(1), dev);
  std::vector<uint8_t> x(8);
  EXPECT_TRUE(has(error_of([&] { comms[0]->all_reduce(x.data(), x.data(), 1, DType::kI64); }),
                  "collectives reduce f32 or bf16 elements, not I64"));
  EXPECT_TRUE(has(error_of([&] { comms[0]->broadcast(x.data(), 8, 1); }), "broadcast from rank 1 in a group of 1"));
  const std::vector<size_t> two{1, 1};
  EXPECT_TRUE(has(error_of([&] { comms[0]->all_to_all(x.data(), two, x.data(), two); }),
                  "2 send and 2 recv counts for 1 ranks"));
}

// The sum is in rank order: (a + b) + c, which differs from a + (b + c) for these values.
TEST(HostCommunicator, SumsInRankOrder) {
  const float a = 1e8f, b = -1e8f, c = 1.0f;
  const std::vector<const void*> in{&a, &b, &c};
  float out = 0;
  rank_order_sum(in, &out, 1, DType::kF32);
  EXPECT_EQ(out, 1.0f);
  const std::vector<const void*> reversed{&c, &b, &a};
  rank_order_sum(reversed, &out, 1, DType::kF32);
  EXPECT_EQ(out, 0.0f);
}

}  // namespace
}  // namespace dsv4
