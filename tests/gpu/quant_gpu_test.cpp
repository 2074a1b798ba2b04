// The CUDA activation quantizers against the CPU ones: bit-identical codes and scales.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant.h"
#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;

// Outputs start as 0xAB bytes, so a code or scale no thread wrote shows.
std::vector<uint8_t> poisoned(size_t n) { return std::vector<uint8_t>(n, 0xAB); }

// bf16 inputs over many magnitudes (per-row scale), never all zero, with a few exact ties.
std::vector<uint16_t> random_rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> e(-20.0f, 12.0f);
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp2(e(rng));
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(r * cols + c)] = float_to_bf16(n(rng) * s);
  }
  return x;
}

TEST(CudaQuant, E4M3MatchesCpuBitForBit) {
  for (int blk : {64, 128}) {
    const int64_t rows = 257, cols = 1024;
    const auto x = random_rows(rows, cols, 17 + static_cast<uint32_t>(blk));
    Dev<uint16_t> dx(x);
    Dev<uint8_t> codes(poisoned(x.size())), scales(poisoned(x.size() / static_cast<size_t>(blk)));
    cuda::quantize_e4m3(dx.p, rows, cols, blk, codes.p, scales.p, nullptr);
    const auto gc = codes.get(), gs = scales.get();
    std::vector<float> block(static_cast<size_t>(blk));
    std::vector<uint8_t> want(static_cast<size_t>(blk));
    for (size_t b = 0; b < gs.size(); ++b) {
      for (int i = 0; i < blk; ++i)
        block[static_cast<size_t>(i)] = bf16_to_float(x[b * static_cast<size_t>(blk) + static_cast<size_t>(i)]);
      ASSERT_EQ(gs[b], quantize_block_e4m3(block, want)) << "block " << b;
      for (int i = 0; i < blk; ++i)
        ASSERT_EQ(gc[b * static_cast<size_t>(blk) + static_cast<size_t>(i)], want[static_cast<size_t>(i)])
            << b << " " << i;
    }
  }
}

TEST(CudaQuant, E2M1MatchesCpuBitForBit) {
  const int64_t rows = 129, cols = 512;
  const auto x = random_rows(rows, cols, 5);
  Dev<uint16_t> dx(x);
  Dev<uint8_t> packed(poisoned(x.size() / 2)), scales(poisoned(x.size() / 32));
  cuda::quantize_e2m1(dx.p, rows, cols, packed.p, scales.p, nullptr);
  const auto gp = packed.get(), gs = scales.get();
  std::vector<float> block(32);
  std::vector<uint8_t> want(32);
  for (size_t b = 0; b < gs.size(); ++b) {
    for (size_t i = 0; i < 32; ++i) block[i] = bf16_to_float(x[b * 32 + i]);
    ASSERT_EQ(gs[b], quantize_block_e2m1(block, want)) << "block " << b;
    for (size_t i = 0; i < 32; i += 2) ASSERT_EQ(gp[b * 16 + i / 2], want[i] | (want[i + 1] << 4)) << b << " " << i;
  }
}

TEST(CudaQuant, RejectsBadBlocks) {
  EXPECT_THROW(cuda::quantize_e4m3(nullptr, 1, 100, 64, nullptr, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::quantize_e2m1(nullptr, 1, 48, nullptr, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace dsv4
