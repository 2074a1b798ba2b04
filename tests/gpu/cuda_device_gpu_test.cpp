// CudaDevice's wait accounting: the host time blocked in synchronize() grows by the wait for queued
// work (a long fill), never by more than the wall time around it, and not at all while nothing is
// queued long (the engine's per-step host work is the executor's step less this). Its upload that skips
// ranges (a padded step's unread rows) still delivers every other byte. Its memory counters see a
// transient allocation in the peak after it is released (bench step's activation peak).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "backend/cuda/cuda_device.h"

namespace dsv4 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CudaDevice, WaitedSecondsCountTheHostsWaitInSynchronize) {
  cuda::CudaDevice dev(0);
  constexpr size_t kBytes = size_t{1} << 30;
  void* p = dev.allocate(kBytes);
  dev.synchronize();
  const double before = dev.waited_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) dev.fill_zero(p, kBytes);  // ~20 GB of writes: milliseconds queued
  const double issued = seconds_since(t0);
  dev.synchronize();
  const double wall = seconds_since(t0);
  const double waited = dev.waited_seconds() - before;
  EXPECT_GT(waited, 0.5 * (wall - issued)) << "wall " << wall << " s, issued in " << issued << " s";
  EXPECT_LE(waited, wall);
  // Nothing queued: a synchronize waits (almost) nothing.
  const double idle = dev.waited_seconds();
  dev.synchronize();
  EXPECT_LT(dev.waited_seconds() - idle, 0.01);
  // A copy to the host after queued work waits in the copy itself (pageable memory): counted too.
  const double before_copy = dev.waited_seconds();
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) dev.fill_zero(p, kBytes);
  const double issued_copy = seconds_since(t1);
  int32_t word = -1;
  dev.to_host(&word, p, sizeof(word));
  const double wall_copy = seconds_since(t1);
  EXPECT_EQ(word, 0);
  EXPECT_GT(dev.waited_seconds() - before_copy, 0.5 * (wall_copy - issued_copy))
      << "wall " << wall_copy << " s, issued in " << issued_copy << " s";
  dev.release(p);
}

TEST(CudaDevice, AnUploadSkippingRangesDeliversEveryOtherByte) {
  cuda::CudaDevice dev(0);
  std::mt19937 rng(35);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t bytes = 1 + rng() % (size_t{1} << 20);
    std::vector<unsigned char> src(bytes), back(bytes);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    std::vector<Device::Range> skip;
    for (size_t at = rng() % 4096; at < bytes; at += 1 + rng() % 65536) {
      const size_t end = std::min(bytes, at + 1 + rng() % 32768);
      skip.push_back({at, end});
      at = end;
    }
    void* d = dev.allocate(bytes);
    dev.to_device_skipping(d, src.data(), bytes, skip);
    dev.to_host(back.data(), d, bytes);
    size_t at = 0;
    for (const Device::Range& r : skip) {
      for (; at < r.begin; ++at) ASSERT_EQ(back[at], src[at]) << "trial " << trial << ", byte " << at;
      at = r.end;
    }
    for (; at < bytes; ++at) ASSERT_EQ(back[at], src[at]) << "trial " << trial << ", byte " << at;
    dev.release(d);
  }
}

TEST(CudaDevice, MemoryPeakHoldsATransientAllocationAfterItsRelease) {
  cuda::CudaDevice dev(0);
  void* held = dev.allocate(size_t{64} << 20);
  dev.synchronize();
  dev.reset_memory_peak();
  const Device::MemoryUse before = dev.memory_use();
  EXPECT_GE(before.current, int64_t{64} << 20);
  EXPECT_EQ(before.peak, before.current) << "a reset restarts the mark from what is in use";
  constexpr int64_t kTransient = int64_t{256} << 20;
  void* t = dev.allocate(static_cast<size_t>(kTransient));
  dev.fill_zero(t, static_cast<size_t>(kTransient));
  dev.release(t);
  dev.synchronize();
  const Device::MemoryUse after = dev.memory_use();
  EXPECT_GE(after.peak - before.current, kTransient);
  EXPECT_LT(after.current, before.current + kTransient);
  EXPECT_GE(after.reserved, after.peak) << "the pool keeps the freed block";
  dev.reset_memory_peak();
  EXPECT_LT(dev.memory_use().peak, before.current + kTransient);
  dev.release(held);
}

}  // namespace
}  // namespace dsv4
