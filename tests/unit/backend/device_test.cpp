// The host device's copies: a copy that skips ranges moves every other byte and leaves the skipped
// ones as they were (a padded step's upload leaves out the rows no one reads).
#include "backend/device.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace dsv4 {
namespace {

TEST(HostDevice, ACopySkippingRangesMovesEveryOtherByte) {
  std::mt19937 rng(35);
  HostDevice dev;
  for (int trial = 0; trial < 200; ++trial) {
    const size_t bytes = 1 + rng() % 4096;
    std::vector<unsigned char> src(bytes), dst(bytes);
    for (auto& b : src) b = static_cast<unsigned char>(rng() | 1u);  // never 0: the untouched marker
    std::vector<Device::Range> skip;
    for (size_t at = rng() % 64; at < bytes; at += 1 + rng() % 512) {
      const size_t end = std::min(bytes, at + 1 + rng() % 256);
      skip.push_back({at, end});
      at = end;
    }
    dev.to_device_skipping(dst.data(), src.data(), bytes, skip);
    std::vector<bool> skipped(bytes, false);
    for (const Device::Range& r : skip)
      for (size_t i = r.begin; i < r.end; ++i) skipped[i] = true;
    for (size_t i = 0; i < bytes; ++i) {
      ASSERT_EQ(dst[i], skipped[i] ? 0 : src[i]) << "trial " << trial << ", byte " << i << " of " << bytes;
    }
  }
}

TEST(HostDevice, NothingSkippedIsAPlainCopy) {
  HostDevice dev;
  const std::vector<int32_t> src = {7, -1, 3, 9};
  std::vector<int32_t> dst(4, 0);
  dev.to_device_skipping(dst.data(), src.data(), sizeof(int32_t) * 4, {});
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace dsv4
