// Row-wise CUDA kernels against the CPU backend, bit for bit, on fresh random inputs at V4-Flash and
// golden dims; the inputs are checked to expose the summation order and the cos/sin rounding.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/rotary.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/row_kernels.h"
#include "backend/rope.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using gputest::random_bf16;

// Normal values times 2^U(-spread, spread): mixed magnitudes, so that the summation order shows.
std::vector<uint16_t> mixed_bf16(size_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> d(0, 1);
  std::uniform_real_distribution<float> e(-spread, spread);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng) * std::exp2(e(rng)));
  return v;
}

// The CPU's rms_norm of one row with the squares summed sequentially instead of in its 8 lanes.
std::vector<uint16_t> rms_norm_sequential(const uint16_t* x, const uint16_t* w, int64_t d, float eps) {
  float ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += bf16_to_float(x[i]) * bf16_to_float(x[i]);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  std::vector<uint16_t> y(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i)
    y[static_cast<size_t>(i)] = float_to_bf16(bf16_to_float(w[i]) * (bf16_to_float(x[i]) * r));
  return y;
}

// The same for head_rms_norm (every step a bf16 op).
std::vector<uint16_t> head_norm_sequential(const uint16_t* x, int d, float eps) {
  float s = 0;
  for (int i = 0; i < d; ++i) s += round_bf16(bf16_to_float(x[i]) * bf16_to_float(x[i]));
  const float mean = round_bf16(s / static_cast<float>(d));
  const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + eps)));
  std::vector<uint16_t> y(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) y[static_cast<size_t>(i)] = float_to_bf16(bf16_to_float(x[i]) * r);
  return y;
}

// How many rows of n outputs differ between the CPU's `want` and another order's `alt`.
int rows_that_differ(const std::vector<uint16_t>& want, const std::vector<uint16_t>& alt, int64_t n) {
  int count = 0;
  for (size_t r = 0; r * n < want.size(); ++r)
    count += !std::equal(want.begin() + static_cast<int64_t>(r) * n, want.begin() + static_cast<int64_t>(r + 1) * n,
                         alt.begin() + static_cast<int64_t>(r) * n);
  return count;
}

TEST(CudaRowKernels, RmsNormBitExact) {
  std::mt19937 rng(1);
  for (int64_t dim : {256, 1024, 4096, 7168, 100, 5000, 12000}) {           // every row-kernel size and the chunked one
    const int64_t rows = std::max<int64_t>(300, (int64_t{1} << 20) / dim);  // enough outputs to show the order
    const auto x = mixed_bf16(static_cast<size_t>(rows * dim), rng, 6);
    const auto w = mixed_bf16(static_cast<size_t>(dim), rng, 1);
    std::vector<uint16_t> want(x.size()), alt;
    CpuOps cpu(2);
    cpu.rms_norm({x.data(), want.data(), w.data(), rows, dim, 1e-6f});
    for (int64_t r = 0; r < rows; ++r) {
      const auto y = rms_norm_sequential(x.data() + r * dim, w.data(), dim, 1e-6f);
      alt.insert(alt.end(), y.begin(), y.end());
    }
    ASSERT_GT(rows_that_differ(want, alt, dim), 0) << "inputs blind to the summation order, dim " << dim;
    Dev<uint16_t> dx(x), dw(w), dy(std::vector<uint16_t>(x.size(), 0xffff));  // poisoned: NaN
    cuda::rms_norm({dx.p, dy.p, dw.p, rows, dim, 1e-6f}, nullptr);
    EXPECT_EQ(dy.get(), want) << dim;
    cuda::rms_norm({dx.p, dx.p, dw.p, rows, dim, 1e-6f}, nullptr);  // in place
    EXPECT_EQ(dx.get(), want) << dim;
  }
}

// A head whose bf16 squares are two large ones summing to a bf16 rounding tie (2^2k (1 + 2^-8)) and many
// tiny ones totalling a few fp32 ulps of it: whether the tiny squares are absorbed one by one or summed
// first decides the mean's rounding, so the summation order shows in the output.
std::vector<uint16_t> near_tie_head(int d, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-4.0f, 1.0f);
  std::uniform_int_distribution<int> at(0, d - 1), k(-3, 3);
  const float scale = std::exp2(static_cast<float>(k(rng)));
  const float tiny = -11.0f - 0.5f * std::log2(static_cast<float>(d));  // d tiny squares sum to ~2^-22
  std::vector<uint16_t> v(static_cast<size_t>(d));
  for (auto& x : v) x = float_to_bf16((rng() & 1 ? 1.0f : -1.0f) * std::exp2(tiny + u(rng)) * scale);
  const int a = at(rng);
  int b = at(rng);
  while (b == a) b = at(rng);
  v[static_cast<size_t>(a)] = float_to_bf16(scale);
  v[static_cast<size_t>(b)] = float_to_bf16(0.0625f * scale);
  return v;
}

struct HeadCase {
  int64_t rows;
  int heads, d;
};

// Mixed-magnitude heads with near-tie heads planted where they expose the order; returns how many do.
int head_inputs(const HeadCase& c, std::mt19937& rng, std::vector<uint16_t>& x) {
  x = mixed_bf16(static_cast<size_t>(c.rows * c.heads * c.d), rng, 4);
  if ((c.d & (c.d - 1)) != 0) return 0;  // the mean's division rounds: no exact tie to plant
  int planted = 0;
  CpuOps cpu(1);
  for (int64_t h = 0; h < c.rows * c.heads && planted < 64; h += 2) {
    for (int tries = 0; tries < 200; ++tries) {
      auto head = near_tie_head(c.d, rng);
      auto want = head;
      cpu.head_rms_norm({want.data(), 1, 1, c.d, 1e-6f});
      if (want == head_norm_sequential(head.data(), c.d, 1e-6f)) continue;
      std::copy(head.begin(), head.end(), x.begin() + h * c.d);
      ++planted;
      break;
    }
  }
  return planted;
}

TEST(CudaRowKernels, HeadRmsNormBitExact) {
  std::mt19937 rng(3);
  for (const HeadCase& c : {HeadCase{5, 64, 512}, HeadCase{33, 4, 128}, HeadCase{3, 5, 100}}) {
    std::vector<uint16_t> x;
    const int planted = head_inputs(c, rng, x);
    if (c.d != 100) {
      ASSERT_GT(planted, 0) << "no order-sensitive head found, d " << c.d;
    }
    auto want = x;
    CpuOps cpu(2);
    cpu.head_rms_norm({want.data(), c.rows, c.heads, c.d, 1e-6f});
    Dev<uint16_t> dx(x);
    cuda::head_rms_norm({dx.p, c.rows, c.heads, c.d, 1e-6f}, nullptr, nullptr);
    EXPECT_EQ(dx.get(), want) << "d " << c.d << ", " << planted << " order-sensitive heads";
  }
}

std::vector<int32_t> large_positions(int64_t rows, std::mt19937& rng) {
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
  pos[0] = 0;
  return pos;
}

// The fused norm + RoPE against the CPU's norm then rope.
TEST(CudaRowKernels, HeadRmsNormRopeBitExact) {
  const ModelConfig c = v4_flash_config();
  std::mt19937 rng(4);
  for (const HeadCase& hc : {HeadCase{37, 64, 512}, HeadCase{33, 4, 128}}) {
    for (int ratio : {0, 4}) {
      const RopeConfig rc = rope_config(c, ratio);
      std::vector<uint16_t> x;
      head_inputs(hc, rng, x);
      const auto pos = large_positions(hc.rows, rng);
      auto want = x;
      CpuOps cpu(2);
      cpu.head_rms_norm({want.data(), hc.rows, hc.heads, hc.d, 1e-6f, pos.data(), rc});
      Dev<uint16_t> dx(x);
      Dev<int32_t> dp(pos);
      Dev<float> df(rope_frequencies(rc));
      cuda::head_rms_norm({dx.p, hc.rows, hc.heads, hc.d, 1e-6f, dp.p, rc}, df.p, nullptr);
      EXPECT_EQ(dx.get(), want) << "d " << hc.d << " ratio " << ratio;
    }
  }
}

// (re, im) planted, for some (row, pair) of head 0, where the CPU's rotation and a slipped one (cos/sin
// rounded from double, or a fused multiply-add) round to different bf16 outputs; returns how many.
int plant_rope_pairs(std::vector<uint16_t>& x, const std::vector<int32_t>& pos, const std::vector<float>& freqs,
                     int heads, int d, bool inverse, std::mt19937& rng) {
  const int half = static_cast<int>(freqs.size());
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> cs(static_cast<size_t>(half)), sn(cs.size());
  const auto rot = [](float re, float im, float c, float s, bool fma) {
    return fma ? std::pair{float_to_bf16(std::fma(re, c, -(im * s))), float_to_bf16(std::fma(re, s, im * c))}
               : std::pair{float_to_bf16(re * c - im * s), float_to_bf16(re * s + im * c)};
  };
  int planted = 0;
  for (size_t r = 0; r < pos.size() && planted < 256; ++r) {
    cpu::rope_angles(freqs.data(), half, pos[r], cs.data(), sn.data());
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[r]) * freqs[static_cast<size_t>(i)];
      const float c = cs[static_cast<size_t>(i)],
                  s = inverse ? -sn[static_cast<size_t>(i)] : sn[static_cast<size_t>(i)];
      const float cd = static_cast<float>(std::cos(double{angle})),
                  sd = static_cast<float>(inverse ? -std::sin(double{angle}) : std::sin(double{angle}));
      const bool glibc_differs = cd != c || sd != s;
      for (int tries = 0; tries < (glibc_differs ? 1 << 16 : 1024); ++tries) {
        const float re = round_bf16(nd(rng)), im = round_bf16(nd(rng));
        const auto want = rot(re, im, c, s, false);
        if (want == rot(re, im, cd, sd, false) && want == rot(re, im, c, s, true)) continue;
        uint16_t* v = x.data() + r * heads * d + (d - 2 * half) + 2 * i;
        v[0] = float_to_bf16(re);
        v[1] = float_to_bf16(im);
        ++planted;
        break;
      }
    }
  }
  return planted;
}

// Rows of many CTAs, and a decode step's few rows with their heads split over CTAs (evenly or not).
TEST(CudaRowKernels, RopeBitExactAtLargePositions) {
  const ModelConfig c = v4_flash_config();
  std::mt19937 rng(5);
  for (const HeadCase& hc : {HeadCase{64, 8, 512}, HeadCase{33, 4, 128}, HeadCase{2, 64, 128}, HeadCase{3, 64, 128}}) {
    for (int ratio : {0, 4}) {
      const RopeConfig rc = rope_config(c, ratio);
      const auto freqs = rope_frequencies(rc);
      const auto pos = large_positions(hc.rows, rng);
      for (bool inverse : {false, true}) {
        auto x = mixed_bf16(static_cast<size_t>(hc.rows * hc.heads * hc.d), rng, 3);
        ASSERT_GT(plant_rope_pairs(x, pos, freqs, hc.heads, hc.d, inverse, rng), 0);
        auto want = x;
        CpuOps cpu(2);
        cpu.rope({want.data(), hc.rows, hc.heads, hc.d, pos.data(), rc, inverse});
        Dev<uint16_t> dx(x);
        Dev<int32_t> dp(pos);
        Dev<float> df(freqs);
        cuda::rope({dx.p, hc.rows, hc.heads, hc.d, dp.p, rc, inverse}, df.p, nullptr);
        EXPECT_EQ(dx.get(), want) << "d " << hc.d << " ratio " << ratio << " inverse " << inverse;
      }
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
  cuda::hadamard({dx.p, rows, 128}, nullptr);
  EXPECT_EQ(dx.get(), want);
  // A warp a row from 32 (strides below 32 across lanes, wider ones in a lane's registers; 300 rows: a
  // part-filled last CTA), a block a row below; with the FP4 simulation after it (a warp's register i is
  // one 32-block): the CPU's bits every way.
  for (const int dim : {16, 32, 64, 128, 256, 512, 1024}) {
    for (const bool fp4 : {false, true}) {
      if (fp4 && dim < 32) continue;
      const auto xs = random_bf16(static_cast<size_t>(rows * dim), 60 + dim, 3.0f);
      auto q = xs;
      cpu.hadamard({q.data(), rows, dim, fp4});
      Dev<uint16_t> dq(xs);
      cuda::hadamard({dq.p, rows, dim, fp4}, nullptr);
      EXPECT_EQ(dq.get(), q) << "dim " << dim << " fp4 " << fp4;
    }
  }
}

TEST(CudaRowKernels, QuantSimBitExact) {
  const int64_t rows = 33, cols = 448, stride = 512;
  const auto x = random_bf16(static_cast<size_t>(rows * stride), 7, 5.0f);
  auto want = x;
  CpuOps cpu(2);
  cpu.quant_sim({want.data(), rows, cols, stride, QuantSim::kFp8, 64});
  Dev<uint16_t> dx(x);
  cuda::quant_sim({dx.p, rows, cols, stride, QuantSim::kFp8, 64}, nullptr);
  EXPECT_EQ(dx.get(), want);
  const auto y = random_bf16(static_cast<size_t>(rows * 4 * 128), 8);
  auto want4 = y;
  cpu.quant_sim({want4.data(), rows * 4, 128, 128, QuantSim::kFp4, 32});
  Dev<uint16_t> dy(y);
  cuda::quant_sim({dy.p, rows * 4, 128, 128, QuantSim::kFp4, 32}, nullptr);
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
  cuda::embed({di.p, tokens, dt.p, vocab, dim, 4, dout.p}, nullptr, nullptr);
  EXPECT_EQ(dout.get(), want);
}

TEST(CudaRowKernels, EmbedReportsBadIds) {
  const int64_t vocab = 10, dim = 64;
  const auto table = random_bf16(static_cast<size_t>(vocab * dim), 11);
  Dev<uint16_t> dt(table), dout(std::vector<uint16_t>(2 * dim, 0xffff));
  Dev<int32_t> di(std::vector<int32_t>{3, 10}), derr(std::vector<int32_t>{0});
  cuda::embed({di.p, 2, dt.p, vocab, dim, 1, dout.p}, derr.p, nullptr);
  EXPECT_EQ(derr.get()[0], static_cast<int32_t>(cuda::DeviceError::kEmbedId));
  const auto out = dout.get();
  EXPECT_EQ(out[static_cast<size_t>(dim)], 0);  // the bad row is zeroed, not read out of bounds
}

// Whole 16-byte vectors and odd widths alike give the CPU's rows; a bad index is reported, its row zeroed.
TEST(CudaRowKernels, GatherRowsMatchesCpu) {
  std::mt19937 rng(std::random_device{}());
  CpuOps cpu(2);
  for (const int64_t width : {int64_t{8192}, int64_t{26}}) {
    const int64_t in_rows = 40, rows = 96;
    std::vector<uint8_t> in(static_cast<size_t>(in_rows * width));
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    std::vector<int32_t> index(static_cast<size_t>(rows));
    for (auto& i : index) i = static_cast<int32_t>(rng() % in_rows);
    std::vector<uint8_t> want(static_cast<size_t>(rows * width));
    cpu.gather_rows({in.data(), in_rows, index.data(), rows, width, want.data()});
    Dev<uint8_t> din(in), dout(std::vector<uint8_t>(want.size(), 0xee));
    Dev<int32_t> di(index), derr(std::vector<int32_t>{0});
    cuda::gather_rows({din.p, in_rows, di.p, rows, width, dout.p}, derr.p, nullptr);
    EXPECT_EQ(dout.get(), want) << width;
    EXPECT_EQ(derr.get()[0], 0);
    index[5] = -1;
    Dev<int32_t> bad(index);
    cuda::gather_rows({din.p, in_rows, bad.p, rows, width, dout.p}, derr.p, nullptr);
    EXPECT_EQ(derr.get()[0], static_cast<int32_t>(cuda::DeviceError::kGatherRow));
    EXPECT_EQ(dout.get()[static_cast<size_t>(5 * width)], 0);
  }
}

}  // namespace
}  // namespace dsv4
