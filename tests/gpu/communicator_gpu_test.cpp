// The communicators on the GPU: NCCL with one rank a GPU (one rank on a single H200), and the host-staged
// communicator with two ranks sharing GPU 0, each with its own CudaDevice and stream, the way the sharded
// CUDA path is tested on one GPU. The same checks as the CPU suite (unit/comm), on device buffers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "backend/comm/rank_threads.h"
#include "backend/comm/staged_communicator.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/nccl_communicator.h"
#include "backend/cuda/nccl_library.h"
#include "backend/cuda/nccl_watchdog.h"
#include "testing/error_of.h"
#include "unit/comm/communicator_test_support.h"

namespace dsv4 {
namespace {

using cuda::CudaDevice;
using cuda::NcclCommunicator;

// Every collective on every rank; the rank's thread works on its device's GPU.
void check_collectives(const std::vector<Communicator*>& ranks) {
  run_ranks(ranks, [](Communicator& c) {
    ASSERT_EQ(cudaSetDevice(static_cast<CudaDevice&>(c.device()).ordinal()), cudaSuccess);
    for (size_t bytes : {size_t{1}, size_t{4099}, size_t{1} << 20}) commtest::check_all_gather(c, bytes, 11);
    for (DType t : {DType::kF32, DType::kBF16}) {
      commtest::check_all_reduce(c, 100003, t, 21);
      commtest::check_reduce_scatter(c, 4097, t, 31);
    }
    for (uint32_t salt = 41; salt < 46; ++salt) commtest::check_all_to_all(c, salt);
    for (int root = 0; root < c.size(); ++root) commtest::check_broadcast(c, 65537, root, 51);
    c.barrier();
  });
}

std::vector<Communicator*> pointers(const auto& owned) {
  std::vector<Communicator*> p;
  for (const auto& c : owned) p.push_back(c.get());
  return p;
}

TEST(NcclLibrary, LoadsOrSaysWhereItLooked) {
  EXPECT_GT(cuda::nccl_library().version, 0) << cuda::nccl_library().path;
  EXPECT_TRUE(commtest::has(testing::error_of([] { cuda::load_nccl_library({"/nowhere/libnccl.so.2"}); }),
                            "NCCL is not available: libnccl.so.2 was not found (tried /nowhere/libnccl.so.2)"));
}

// One rank a GPU (one rank on one GPU): the ranks join concurrently, as separate processes would.
TEST(NcclCommunicator, OneRankPerGpu) {
  const int n = cuda::device_count();
  ASSERT_GE(n, 1);
  const NcclCommunicator::UniqueId id = NcclCommunicator::make_unique_id();
  std::vector<std::unique_ptr<CudaDevice>> devices;
  for (int r = 0; r < n; ++r) devices.push_back(std::make_unique<CudaDevice>(r));
  std::vector<std::unique_ptr<NcclCommunicator>> comms(static_cast<size_t>(n));
  std::vector<std::thread> joining;
  for (int r = 0; r < n; ++r) {
    joining.emplace_back([&, r] {
      comms[static_cast<size_t>(r)] =
          std::make_unique<NcclCommunicator>(*devices[static_cast<size_t>(r)], id, r, n, std::chrono::seconds(120));
    });
  }
  for (std::thread& t : joining) t.join();
  check_collectives(pointers(comms));
}

// Ranks made one after another, on one thread, join at their first collective (an engine's replicas).
TEST(NcclCommunicator, RanksJoinAtTheirFirstCollective) {
  const int n = cuda::device_count();
  const NcclCommunicator::UniqueId id = NcclCommunicator::make_unique_id();
  std::vector<std::unique_ptr<CudaDevice>> devices;
  std::vector<std::unique_ptr<NcclCommunicator>> comms;
  for (int r = 0; r < n; ++r) {
    devices.push_back(std::make_unique<CudaDevice>(r));
    comms.push_back(std::make_unique<NcclCommunicator>(*devices.back(), id, r, n, std::chrono::seconds(120),
                                                       NcclCommunicator::Join::kAtFirstCollective));
  }
  check_collectives(pointers(comms));
  NcclCommunicator early(*devices[0], NcclCommunicator::make_unique_id(), 0, 2, std::chrono::seconds(60),
                         NcclCommunicator::Join::kAtFirstCollective);
  early.abort("a peer failed to load its weights");  // before the join: the join never waits for the peer
  EXPECT_TRUE(commtest::has(testing::error_of([&] { early.barrier(); }), "a peer failed to load its weights"));
}

TEST(NcclCommunicator, APeerThatNeverJoinsIsAnErrorNotAHang) {
  CudaDevice dev(0);
  const auto start = std::chrono::steady_clock::now();
  const std::string e = testing::error_of(
      [&] { NcclCommunicator(dev, NcclCommunicator::make_unique_id(), 0, 2, std::chrono::milliseconds(2000)); });
  EXPECT_TRUE(commtest::has(e, "NCCL joining on rank 0 of 2: not done within 2000 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(NcclCommunicator, AbortedCommunicatorNamesTheReason) {
  CudaDevice dev(0);
  NcclCommunicator comm(dev, NcclCommunicator::make_unique_id(), 0, 1, std::chrono::seconds(60));
  comm.barrier();
  comm.abort("rank 0 ran out of memory");
  EXPECT_TRUE(commtest::has(testing::error_of([&] { comm.barrier(); }),
                            "NCCL all_reduce on rank 0 of 1: the communicator was aborted (rank 0 ran out of memory)"));
}

// The watchdog on its own: a "collective" held up on the stream by a host function that sleeps.
TEST(NcclWatchdog, FiresWhenACollectiveIsOverdue) {
  CudaDevice dev(0);
  std::promise<std::string> fired;
  cuda::NcclWatchdog watchdog(
      0, std::chrono::milliseconds(100), [] { return std::string(); },
      [&](const std::string& why) { fired.set_value(why); });
  ASSERT_EQ(cudaLaunchHostFunc(
                dev.stream(), [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); }, nullptr),
            cudaSuccess);
  watchdog.watch("all_reduce", dev.stream());
  std::future<std::string> why = fired.get_future();
  ASSERT_EQ(why.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(commtest::has(why.get(), "all_reduce (collective #1) has not finished within 100 ms"));
  dev.synchronize();
}

TEST(NcclWatchdog, QuietWhileCollectivesFinishAndFiresOnAnAsyncError) {
  CudaDevice dev(0);
  std::atomic<bool> broken{false};
  std::promise<std::string> fired;
  cuda::NcclWatchdog watchdog(
      0, std::chrono::milliseconds(100), [&] { return broken ? "remote error" : ""; },
      [&](const std::string& why) { fired.set_value(why); });
  std::future<std::string> why = fired.get_future();
  for (int i = 0; i < 20; ++i) watchdog.watch("all_gather", dev.stream());
  dev.synchronize();
  EXPECT_EQ(why.wait_for(std::chrono::milliseconds(400)), std::future_status::timeout);
  broken = true;
  ASSERT_EQ(why.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(why.get(), "remote error");
}

TEST(StagedCommunicator, TwoRanksShareOneGpu) {
  CudaDevice a(0), b(0);  // each rank its own stream on the same GPU
  check_collectives(pointers(make_staged_communicators({&a, &b}, std::chrono::seconds(60))));
}

}  // namespace
}  // namespace dsv4
