// Row-wise CUDA kernels against the CPU backend on fresh random inputs at V4-Flash and golden dims.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/row_kernels.h"
#include "backend/rope.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using gputest::random_bf16;

// Largest difference in bf16 ulps of the reference value (NaN never passes).
int max_ulp_diff(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  int worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    if (std::isnan(g) || std::isnan(w)) return 1 << 30;
    worst = std::max(worst, std::abs(static_cast<int>(got[i] & 0x7fff) - static_cast<int>(want[i] & 0x7fff)) +
                                (std::signbit(g) != std::signbit(w) && g != w ? (1 << 20) : 0));
  }
  return worst;
}

TEST(CudaRowKernels, RmsNormWithinOneUlp) {
  for (int64_t dim : {256, 4096, 1024}) {
    const int64_t rows = 37;
    const auto x = random_bf16(static_cast<size_t>(rows * dim), 1, 3.0f);
    const auto w = random_bf16(static_cast<size_t>(dim), 2);
    std::vector<uint16_t> want(x.size());
    CpuOps cpu(2);
    cpu.rms_norm({x.data(), want.data(), w.data(), rows, dim, 1e-6f});
    Dev<uint16_t> dx(x), dw(w), dy(std::vector<uint16_t>(x.size(), 0xffff));  // poisoned: NaN
    cuda::rms_norm(dx.p, dy.p, dw.p, rows, dim, 1e-6f, nullptr);
    EXPECT_LE(max_ulp_diff(dy.get(), want), 1) << dim;
  }
}

TEST(CudaRowKernels, HeadRmsNormWithinOneUlp) {
  const int64_t rows = 5;
  const int heads = 64, d = 512;
  const auto x = random_bf16(static_cast<size_t>(rows * heads * d), 3, 2.0f);
  auto want = x;
  CpuOps cpu(2);
  cpu.head_rms_norm({want.data(), rows, heads, d, 1e-6f});
  Dev<uint16_t> dx(x);
  cuda::head_rms_norm(dx.p, rows * heads, d, 1e-6f, nullptr);
  EXPECT_LE(max_ulp_diff(dx.get(), want), 1);
}

TEST(CudaRowKernels, RopeMatchesAtLargePositions) {
  const ModelConfig c = v4_flash_config();
  for (int ratio : {0, 4}) {
    const RopeConfig rc = rope_config(c, ratio);
    const int64_t rows = 64;
    const int heads = 8, d = 512;
    const auto x = random_bf16(static_cast<size_t>(rows * heads * d), 4);
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    std::mt19937 rng(5);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
    for (bool inverse : {false, true}) {
      auto want = x;
      CpuOps cpu(2);
      cpu.rope({want.data(), rows, heads, d, pos.data(), rc, inverse});
      Dev<uint16_t> dx(x);
      Dev<int32_t> dp(pos);
      Dev<float> df(rope_frequencies(rc));
      cuda::rope(dx.p, rows, heads, d, rc.rope_dim, dp.p, df.p, inverse, nullptr);
      EXPECT_LE(max_ulp_diff(dx.get(), want), 1) << "ratio " << ratio << " inverse " << inverse;
    }
  }
}

TEST(CudaRowKernels, HadamardBitExact) {
  const int64_t rows = 300;
  const auto x = random_bf16(static_cast<size_t>(rows * 128), 6);
  auto want = x;
  CpuOps cpu(2);
  cpu.hadamard({want.data(), rows, 128});
  Dev<uint16_t> dx(x);
  cuda::hadamard(dx.p, rows, 128, nullptr);
  EXPECT_EQ(dx.get(), want);
}

TEST(CudaRowKernels, QuantSimBitExact) {
  const int64_t rows = 33, cols = 448, stride = 512;
  const auto x = random_bf16(static_cast<size_t>(rows * stride), 7, 5.0f);
  auto want = x;
  CpuOps cpu(2);
  cpu.quant_sim({want.data(), rows, cols, stride, QuantSim::kFp8, 64});
  Dev<uint16_t> dx(x);
  cuda::quant_sim_e4m3(dx.p, rows, cols, stride, 64, nullptr);
  EXPECT_EQ(dx.get(), want);
  const auto y = random_bf16(static_cast<size_t>(rows * 4 * 128), 8);
  auto want4 = y;
  cpu.quant_sim({want4.data(), rows * 4, 128, 128, QuantSim::kFp4, 32});
  Dev<uint16_t> dy(y);
  cuda::quant_sim_e2m1(dy.p, rows * 4, 128, 128, nullptr);
  EXPECT_EQ(dy.get(), want4);
}

TEST(CudaRowKernels, EmbedCopiesRows) {
  const int64_t vocab = 1000, dim = 256, tokens = 50;
  const auto table = random_bf16(static_cast<size_t>(vocab * dim), 9);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  std::mt19937 rng(10);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  std::vector<uint16_t> want(static_cast<size_t>(tokens * 4 * dim));
  CpuOps cpu(2);
  cpu.embed({ids.data(), tokens, table.data(), vocab, dim, 4, want.data()});
  Dev<uint16_t> dt(table), dout(std::vector<uint16_t>(want.size(), 0xffff));
  Dev<int32_t> di(ids);
  cuda::embed(di.p, tokens, dt.p, vocab, dim, 4, dout.p, nullptr, nullptr);
  EXPECT_EQ(dout.get(), want);
}

TEST(CudaRowKernels, EmbedReportsBadIds) {
  const int64_t vocab = 10, dim = 64;
  const auto table = random_bf16(static_cast<size_t>(vocab * dim), 11);
  Dev<uint16_t> dt(table), dout(std::vector<uint16_t>(2 * dim, 0xffff));
  Dev<int32_t> di(std::vector<int32_t>{3, 10}), derr(std::vector<int32_t>{0});
  cuda::embed(di.p, 2, dt.p, vocab, dim, 1, dout.p, derr.p, nullptr);
  EXPECT_EQ(derr.get()[0], static_cast<int32_t>(cuda::DeviceError::kEmbedId));
  const auto out = dout.get();
  EXPECT_EQ(out[static_cast<size_t>(dim)], 0);  // the bad row is zeroed, not read out of bounds
}

}  // namespace
}  // namespace dsv4
