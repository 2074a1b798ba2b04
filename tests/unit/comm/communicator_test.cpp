// Every collective on 1 to 4 ranks (threads), through the host communicator and through the staged one
// (over a device the host does not read directly): both must give the results computed by the test, the
// same bits on every rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "backend/comm/host_communicator.h"
#include "backend/comm/rank_threads.h"
#include "backend/comm/staged_communicator.h"
#include "unit/comm/communicator_test_support.h"

namespace dsv4 {
namespace {

enum class Kind { kHost, kStaged };

struct Case {
  Kind kind;
  int size;
};

class CommunicatorTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const int n = GetParam().size;
    if (GetParam().kind == Kind::kHost) {
      for (auto& c : make_host_communicators(n, std::chrono::seconds(30), device_)) comms_.push_back(std::move(c));
    } else {
      const std::vector<Device*> devices(static_cast<size_t>(n), &far_);
      for (auto& c : make_staged_communicators(devices, std::chrono::seconds(30))) comms_.push_back(std::move(c));
    }
  }
  std::vector<Communicator*> ranks() const {
    std::vector<Communicator*> r;
    for (const auto& c : comms_) r.push_back(c.get());
    return r;
  }
  // Runs a reduction check on every rank; every rank's bits must be the same.
  void expect_same_bits(const std::function<std::vector<uint8_t>(Communicator&)>& check) {
    std::vector<std::vector<uint8_t>> got(comms_.size());
    run_ranks(ranks(), [&](Communicator& c) { got[static_cast<size_t>(c.rank())] = check(c); });
    for (size_t r = 1; r < got.size(); ++r) EXPECT_EQ(got[r], got[0]) << "rank " << r << " differs from rank 0";
  }

  HostDevice device_;
  commtest::FarDevice far_;  // the staged communicators' device
  std::vector<std::unique_ptr<Communicator>> comms_;
};

TEST_P(CommunicatorTest, AllGather) {
  run_ranks(ranks(), [](Communicator& c) {
    for (size_t bytes : {size_t{1}, size_t{37}, size_t{4096}, size_t{0}}) commtest::check_all_gather(c, bytes, 11);
  });
}

TEST_P(CommunicatorTest, AllGatherInPlace) {
  run_ranks(ranks(), [](Communicator& c) {
    const size_t bytes = 53;
    std::vector<uint8_t> want, buf(bytes * static_cast<size_t>(c.size()), 0xA5);
    for (int p = 0; p < c.size(); ++p) {
      const auto in = commtest::random_bytes(bytes, commtest::seed_of(p, 12));
      want.insert(want.end(), in.begin(), in.end());
      if (p == c.rank()) std::copy(in.begin(), in.end(), buf.begin() + static_cast<ptrdiff_t>(bytes) * p);
    }
    DeviceArray<uint8_t> d(c.device(), buf);
    c.all_gather(d.data() + bytes * static_cast<size_t>(c.rank()), d.data(), bytes);
    EXPECT_EQ(d.to_host(), want);
  });
}

TEST_P(CommunicatorTest, AllReduce) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    expect_same_bits([t](Communicator& c) { return commtest::check_all_reduce(c, 1001, t, 21); });
  }
}

TEST_P(CommunicatorTest, AllReduceInPlace) {
  run_ranks(ranks(), [](Communicator& c) {
    const auto in = commtest::reduce_inputs(c.size(), 257, DType::kBF16, 22);
    DeviceArray<uint8_t> d(c.device(), in[static_cast<size_t>(c.rank())]);
    c.all_reduce(d.data(), d.data(), 257, DType::kBF16);
    EXPECT_EQ(d.to_host(), commtest::expected_sum(in, 0, 257, DType::kBF16));
  });
}

TEST_P(CommunicatorTest, ReduceScatter) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    run_ranks(ranks(), [t](Communicator& c) { commtest::check_reduce_scatter(c, 333, t, 31); });
  }
}

TEST_P(CommunicatorTest, AllToAllUnevenCounts) {
  run_ranks(ranks(), [](Communicator& c) {
    for (uint32_t salt = 41; salt < 46; ++salt) commtest::check_all_to_all(c, salt);
  });
}

TEST_P(CommunicatorTest, Broadcast) {
  run_ranks(ranks(), [](Communicator& c) {
    for (int root = 0; root < c.size(); ++root) commtest::check_broadcast(c, 129, root, 51);
  });
}

TEST_P(CommunicatorTest, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived{0};
  run_ranks(ranks(), [&](Communicator& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * c.rank()));
    ++arrived;
    c.barrier();
    EXPECT_EQ(arrived.load(), c.size()) << "rank " << c.rank() << " left the barrier early";
  });
}

// Many collectives back to back: a fast rank must not overwrite what a slow one still reads.
TEST_P(CommunicatorTest, BackToBack) {
  run_ranks(ranks(), [](Communicator& c) {
    for (uint32_t i = 0; i < 50; ++i) {
      commtest::check_all_gather(c, 16 + i, 60 + i);
      commtest::check_all_reduce(c, 17 + i, DType::kF32, 60 + i);
    }
  });
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.kind == Kind::kHost ? "host_" : "staged_") + std::to_string(info.param.size);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommunicatorTest,
                         ::testing::Values(Case{Kind::kHost, 1}, Case{Kind::kHost, 2}, Case{Kind::kHost, 3},
                                           Case{Kind::kHost, 4}, Case{Kind::kStaged, 1}, Case{Kind::kStaged, 2},
                                           Case{Kind::kStaged, 3}, Case{Kind::kStaged, 4}),
                         case_name);

}  // namespace
}  // namespace dsv4
