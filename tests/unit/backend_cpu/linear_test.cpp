#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::Fp4Weight;
using testing::Fp8Weight;
using testing::random_bf16;

// The activation quantizer of §9.3: e4m3 values and ue8m0 scales per 128.
void quantize_acts(const std::vector<uint16_t>& x, int64_t rows, int64_t k, std::vector<float>& a,
                   std::vector<float>& sa) {
  a.assign(static_cast<size_t>(rows * k), 0);
  sa.assign(static_cast<size_t>(rows * k / 128), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 128; ++b) {
      float blk[128];
      uint8_t codes[128];
      for (int i = 0; i < 128; ++i) blk[i] = bf(x[static_cast<size_t>(r * k + b * 128 + i)]);
      sa[static_cast<size_t>(r * k / 128 + b)] = ue8m0_to_float(quantize_block_e4m3(blk, codes));
      for (int i = 0; i < 128; ++i) a[static_cast<size_t>(r * k + b * 128 + i)] = e4m3_to_float(codes[i]);
    }
  }
}

// The documented order for FP8: per 128-block, products in ascending k, then C += P·(sa·sb).
std::vector<uint16_t> emulate_fp8(const std::vector<uint16_t>& x, int64_t rows, const Fp8Weight& w) {
  std::vector<float> a, sa;
  quantize_acts(x, rows, w.cols, a, sa);
  std::vector<uint16_t> y(static_cast<size_t>(rows * w.rows));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      float c = 0;
      for (int64_t kb = 0; kb < w.cols / 128; ++kb) {
        float p = 0;
        for (int64_t k = kb * 128; k < (kb + 1) * 128; ++k) {
          p += a[static_cast<size_t>(m * w.cols + k)] * e4m3_to_float(w.data[static_cast<size_t>(n * w.cols + k)]);
        }
        const float sb = ue8m0_to_float(w.scale[static_cast<size_t>((n / 128) * ((w.cols + 127) / 128) + kb)]);
        c += p * (sa[static_cast<size_t>(m * w.cols / 128 + kb)] * sb);
      }
      y[static_cast<size_t>(m * w.rows + n)] = float_to_bf16(c);
    }
  }
  return y;
}

// FP4: per 32-block, C += (P·sa)·sb.
std::vector<uint16_t> emulate_fp4(const std::vector<uint16_t>& x, int64_t rows, const Fp4Weight& w) {
  std::vector<float> a, sa;
  quantize_acts(x, rows, w.cols, a, sa);
  std::vector<uint16_t> y(static_cast<size_t>(rows * w.rows));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      float c = 0;
      for (int64_t kb = 0; kb < w.cols / 32; ++kb) {
        float p = 0;
        for (int64_t k = kb * 32; k < (kb + 1) * 32; ++k) {
          p += a[static_cast<size_t>(m * w.cols + k)] * e2m1_to_float(fp4_at(w.data.data() + n * (w.cols / 2), k));
        }
        const float sb = ue8m0_to_float(w.scale[static_cast<size_t>(n * (w.cols / 32) + kb)]);
        c += p * sa[static_cast<size_t>(m * w.cols / 128 + kb / 4)] * sb;
      }
      y[static_cast<size_t>(m * w.rows + n)] = float_to_bf16(c);
    }
  }
  return y;
}

// Double-precision check: y ≈ Q8(x) · W (dequantized), within bf16 output rounding plus slack.
template <typename W>
void expect_close_to_double(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, int64_t rows, const W& w) {
  std::vector<float> q(x.size());
  for (size_t i = 0; i < x.size(); ++i) q[i] = bf(x[i]);
  for (int64_t r = 0; r < rows; ++r)
    fake_quant_e4m3(std::span<float>(q).subspan(static_cast<size_t>(r * w.cols), static_cast<size_t>(w.cols)), 128);
  const auto block = w.block();
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double t = double{q[static_cast<size_t>(m * w.cols + k)]} * block.at(n, k);
        ref += t;
        mag += std::fabs(t);
      }
      EXPECT_NEAR(bf(y[static_cast<size_t>(m * w.rows + n)]), ref, std::fabs(ref) / 128 + mag * 1e-6) << m << "," << n;
    }
  }
}

std::vector<uint16_t> run(Ops& ops, const std::vector<uint16_t>& x, int64_t rows, const Weight& w, int groups = 1) {
  std::vector<uint16_t> y(static_cast<size_t>(rows * w.rows));
  ops.linear({.x = x.data(), .rows = rows, .w = w, .y = y.data(), .groups = groups});
  return y;
}

TEST(Linear, Fp8MatchesTheDocumentedOrderBitForBit) {
  std::mt19937 rng(11);
  CpuOps ops(2);
  const Fp8Weight w(200, 384, rng);  // N crosses a 128-row scale block and a partial tile
  const auto x = random_bf16(5 * 384, rng);
  const auto y = run(ops, x, 5, w.view());
  EXPECT_EQ(y, emulate_fp8(x, 5, w));
  expect_close_to_double(x, y, 5, w);
}

TEST(Linear, Fp4MatchesTheDocumentedOrderBitForBit) {
  std::mt19937 rng(12);
  CpuOps ops(2);
  const Fp4Weight w(96, 256, rng);
  const auto x = random_bf16(7 * 256, rng, 3.0f);
  const auto y = run(ops, x, 7, w.view());
  EXPECT_EQ(y, emulate_fp4(x, 7, w));
  expect_close_to_double(x, y, 7, w);
}

TEST(Linear, Fp8AtV4FlashWqaDims) {
  std::mt19937 rng(13);
  CpuOps ops(2);
  const Fp8Weight w(1024, 4096, rng);
  const auto x = random_bf16(4096, rng);
  EXPECT_EQ(run(ops, x, 1, w.view()), emulate_fp8(x, 1, w));
}

TEST(Linear, PlainWeightsAreTrueFp32InAscendingK) {
  std::mt19937 rng(14);
  CpuOps ops(3);
  const int64_t rows = 3, n = 37, k = 300;  // K need not be a multiple of 128 for plain weights
  const auto x = random_bf16(static_cast<size_t>(rows * k), rng);
  const auto wb = random_bf16(static_cast<size_t>(n * k), rng, 0.1f);
  const auto wf = testing::random_f32(static_cast<size_t>(n * k), rng, 0.1f);
  std::vector<float> yb(static_cast<size_t>(rows * n)), yf(yb.size());
  ops.linear(
      {.x = x.data(), .rows = rows, .w = Weight::bf16(wb.data(), n, k), .y = yb.data(), .y_type = ActType::kF32});
  ops.linear({.x = x.data(), .rows = rows, .w = Weight::f32(wf.data(), n, k), .y = yf.data(), .y_type = ActType::kF32});
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t j = 0; j < n; ++j) {
      float cb = 0, cf = 0;
      for (int64_t i = 0; i < k; ++i) {
        cb += bf(x[static_cast<size_t>(m * k + i)]) * bf(wb[static_cast<size_t>(j * k + i)]);
        cf += bf(x[static_cast<size_t>(m * k + i)]) * wf[static_cast<size_t>(j * k + i)];
      }
      EXPECT_EQ(yb[static_cast<size_t>(m * n + j)], cb);
      EXPECT_EQ(yf[static_cast<size_t>(m * n + j)], cf);
    }
  }
}

TEST(Linear, GroupedEqualsOneLinearPerGroup) {
  std::mt19937 rng(15);
  CpuOps ops(2);
  const int groups = 2;
  const int64_t rows = 4, kg = 256, ng = 128;
  const auto x = random_bf16(static_cast<size_t>(rows * groups * kg), rng);
  const auto w = random_bf16(static_cast<size_t>(groups * ng * kg), rng, 0.05f);
  const auto y = run(ops, x, rows, Weight::bf16(w.data(), groups * ng, kg), groups);
  for (int g = 0; g < groups; ++g) {
    std::vector<uint16_t> yg(static_cast<size_t>(rows * ng));
    ops.linear({.x = x.data() + g * kg,
                .rows = rows,
                .w = Weight::bf16(w.data() + g * ng * kg, ng, kg),
                .y = yg.data(),
                .x_stride = groups * kg});
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t j = 0; j < ng; ++j) {
        ASSERT_EQ(y[static_cast<size_t>(m * groups * ng + g * ng + j)], yg[static_cast<size_t>(m * ng + j)]);
      }
    }
  }
}

TEST(Linear, RowsAreBatchAndThreadInvariant) {
  std::mt19937 rng(16);
  CpuOps one(1), three(3);
  const Fp8Weight w(160, 256, rng);
  const int64_t rows = 300;  // crosses the 64-row chunks and the 256-row activation batches
  const auto x = random_bf16(static_cast<size_t>(rows * 256), rng);
  const auto y1 = run(one, x, rows, w.view());
  EXPECT_EQ(run(three, x, rows, w.view()), y1);
  for (int64_t r : {0L, 63L, 64L, 255L, 256L, 299L}) {
    const std::vector<uint16_t> xr(x.begin() + r * 256, x.begin() + (r + 1) * 256);
    const auto yr = run(three, xr, 1, w.view());
    EXPECT_TRUE(std::equal(yr.begin(), yr.end(), y1.begin() + r * 160)) << "row " << r;
  }
}

TEST(Linear, StridedOutputAndZeroRows) {
  std::mt19937 rng(17);
  CpuOps ops(2);
  const Fp4Weight w(32, 128, rng);
  const auto x = random_bf16(2 * 128, rng);
  std::vector<float> y(2 * 40, -7.0f);
  ops.linear({.x = x.data(), .rows = 2, .w = w.view(), .y = y.data(), .y_type = ActType::kF32, .y_stride = 40});
  for (int j = 32; j < 40; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], -7.0f);  // padding untouched
  EXPECT_NE(y[0], -7.0f);
  ops.linear({.x = nullptr, .rows = 0, .w = w.view(), .y = nullptr});
}

TEST(Linear, RejectsBadParameters) {
  std::mt19937 rng(18);
  CpuOps ops(1);
  const Fp8Weight w(8, 128, rng);
  const auto x = random_bf16(128, rng);
  std::vector<uint16_t> y(8);
  const LinearParams good{.x = x.data(), .rows = 1, .w = w.view(), .y = y.data()};
  auto expect_error = [&](LinearParams p, const char* text) {
    try {
      ops.linear(p);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  LinearParams p = good;
  p.x = nullptr;
  expect_error(p, "x is null");
  p = good;
  p.w.scale = nullptr;
  expect_error(p, "has no scale");
  p = good;
  p.w.cols = 100;
  expect_error(p, "not a multiple of 128");
  p = good;
  p.groups = 3;
  expect_error(p, "groups");
  p = good;
  p.y_stride = 4;
  expect_error(p, "y_stride");
  p = good;
  p.rows = -1;
  expect_error(p, "rows must be >= 0");
}

}  // namespace
}  // namespace dsv4
