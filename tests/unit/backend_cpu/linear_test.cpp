#include <gtest/gtest.h>

#include <cmath>
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

// How a reference block sum is taken: the documented order, the exact sum of the block's products
// rounded once to fp32 (computed here in integers: an e4m3 value times 2^9 and an e2m1 value times 2
// are integers), or the former order, one fp32 chain in ascending k (kept to show that the data tells
// the two apart).
enum class BlockSum { kExact, kSequential };

// Unscaled value (n, k) of an FP8 or FP4 weight.
float weight_value(const Weight& w, int64_t n, int64_t k) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  return w.type == WeightType::kFp4Block ? e2m1_to_float(fp4_at(data + n * (w.cols / 2), k))
                                         : e4m3_to_float(data[n * w.cols + k]);
}

// The block sum of activation values a[0, len) with weight row n at columns k0...
float block_sum(const float* a, const Weight& w, int64_t n, int64_t k0, int len, BlockSum order) {
  if (order == BlockSum::kSequential) {
    float p = 0;
    for (int i = 0; i < len; ++i) p += a[i] * weight_value(w, n, k0 + i);
    return p;
  }
  const bool fp4 = w.type == WeightType::kFp4Block;
  const float w_int = fp4 ? 2.0f : 512.0f;  // e2m1 * 2, e4m3 * 2^9: integers
  int64_t sum = 0;
  for (int i = 0; i < len; ++i) {
    const float ai = a[i] * 512.0f, wi = weight_value(w, n, k0 + i) * w_int;
    EXPECT_TRUE(ai == std::rint(ai) && wi == std::rint(wi));
    sum += static_cast<int64_t>(ai) * static_cast<int64_t>(wi);
  }
  return std::ldexp(static_cast<float>(sum), fp4 ? -10 : -18);  // int64 -> fp32 rounds to nearest even
}

// The documented GEMM of a block-scaled weight, fp32 outputs: per K-block (128 for FP8, 32 for FP4)
// the block sum P, then C += P·(sa·sb) (FP8) or C += (P·sa)·sb (FP4) in ascending block order.
std::vector<float> emulate(const std::vector<uint16_t>& x, int64_t rows, const Weight& w,
                           BlockSum order = BlockSum::kExact) {
  std::vector<float> a, sa;
  quantize_acts(x, rows, w.cols, a, sa);
  const bool fp4 = w.type == WeightType::kFp4Block;
  const int block = fp4 ? 32 : 128;
  std::vector<float> y(static_cast<size_t>(rows * w.rows));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      float c = 0;
      for (int64_t kb = 0; kb < w.cols / block; ++kb) {
        const float p = block_sum(&a[static_cast<size_t>(m * w.cols + kb * block)], w, n, kb * block, block, order);
        const float s = sa[static_cast<size_t>(m * w.cols / 128 + kb * block / 128)];
        if (fp4) {
          c += p * s * ue8m0_to_float(w.scale[n * (w.cols / 32) + kb]);
        } else {
          c += p * (s * ue8m0_to_float(w.scale[(n / 128) * ((w.cols + 127) / 128) + kb]));
        }
      }
      y[static_cast<size_t>(m * w.rows + n)] = c;
    }
  }
  return y;
}

std::vector<uint16_t> emulate_bf16(const std::vector<uint16_t>& x, int64_t rows, const Weight& w) {
  return testing::to_bf16(emulate(x, rows, w));
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

// The op's bf16 output against the documented order (the same bits) and against fp64 (close).
template <typename W>
void expect_documented_order(const W& w, int64_t rows, std::mt19937& rng, float x_scale = 1.0f) {
  CpuOps ops(2);
  const auto x = random_bf16(static_cast<size_t>(rows * w.cols), rng, x_scale);
  const auto y = run(ops, x, rows, w.view());
  EXPECT_EQ(y, emulate_bf16(x, rows, w.view()));
  expect_close_to_double(x, y, rows, w);
}

TEST(Linear, Fp8MatchesTheDocumentedOrderBitForBit) {
  std::mt19937 rng(11);
  const Fp8Weight w(200, 384, rng);  // N crosses a 128-row scale block and a partial tile
  expect_documented_order(w, 5, rng);
}

TEST(Linear, Fp4MatchesTheDocumentedOrderBitForBit) {
  std::mt19937 rng(12);
  const Fp4Weight w(96, 256, rng);
  expect_documented_order(w, 7, rng, 3.0f);
}

TEST(Linear, Fp8AtV4FlashWqaDims) {
  std::mt19937 rng(13);
  CpuOps ops(2);
  const Fp8Weight w(1024, 4096, rng);
  const auto x = random_bf16(4096, rng);
  EXPECT_EQ(run(ops, x, 1, w.view()), emulate_bf16(x, 1, w.view()));
}

// Block-scaled data whose block sums an fp32 chain in ascending k gets wrong: in every K-block
// (128 for FP8, 32 for FP4) a leading run of large products, then small ones of random sign, then the
// large ones again negated (mirrored activations against equal weights), so that they cancel exactly.
// At the peak of its partial sums a chain has an ulp far above the small products (FP8: ~2^-6
// against products down to 2^-18; FP4: 2^-9 against multiples of 2^-10) and rounds them away.
struct CancellingData {
  std::vector<uint16_t> x;
  std::vector<uint8_t> data, scale;
  Weight w;
};

CancellingData cancelling_data(WeightType type, int64_t rows, int64_t n, int64_t k, std::mt19937& rng) {
  const bool fp4 = type == WeightType::kFp4Block;
  const int block = fp4 ? 32 : 128, large = fp4 ? 12 : 32;  // large products at [0, large), mirrored at the end
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  // Positive e4m3 values with exponent field [elo, ehi] and mantissa [0, mhi].
  auto e4m3 = [&](int elo, int ehi, int mhi) {
    return e4m3_to_float(static_cast<uint8_t>(pick(elo, ehi) << 3 | pick(0, mhi)));
  };
  CancellingData d;
  d.x.resize(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 128; ++b) {
      const float s = std::ldexp(1.0f, pick(-6, 6));
      for (int64_t q = b * 128; q < (b + 1) * 128; q += block) {
        uint16_t* xb = d.x.data() + r * k + q;
        for (int i = 0; i < block; ++i) {
          const bool big = i < large, mirror = i >= block - large;
          if (mirror) {
            xb[i] = float_to_bf16(-bf16_to_float(xb[i - (block - large)]));
          } else {
            // Large: [256, 384]; the block's amax 400 keeps its scale at s (the codes come out unscaled).
            const float v = big ? e4m3(15, 15, 4) : e4m3(0, 4, 7) * (rng() % 2 ? -1.0f : 1.0f);
            xb[i] = float_to_bf16((q == b * 128 && i == 0 ? 400.0f : v) * s);
          }
        }
      }
    }
  }
  if (fp4) {
    d.data.assign(static_cast<size_t>(n * k / 2), 0);
    d.scale.resize(static_cast<size_t>(n * k / 32));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t q = 0; q < k; q += block) {
        for (int i = 0; i < block; ++i) {
          const int src = i >= block - large ? i - (block - large) : i;
          uint8_t code = 0;
          if (src != i) {
            code = fp4_at(d.data.data() + j * (k / 2), q + src);
          } else {
            code = static_cast<uint8_t>(i < large ? pick(6, 7) : pick(0, 15));  // large: 4 or 6
          }
          d.data[static_cast<size_t>(j * (k / 2) + (q + i) / 2)] |= static_cast<uint8_t>(code << ((q + i) % 2 * 4));
        }
      }
    }
  } else {
    d.data.resize(static_cast<size_t>(n * k));
    d.scale.resize(static_cast<size_t>((n + 127) / 128 * (k / 128)));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t q = 0; q < k; q += block) {
        uint8_t* wb = d.data.data() + j * k + q;
        for (int i = 0; i < block; ++i) {
          if (i >= block - large) {
            wb[i] = wb[i - (block - large)];
          } else {
            uint8_t c = 0x7f;
            while ((c & 0x7f) == 0x7f) c = static_cast<uint8_t>(i < large ? (pick(10, 15) << 3 | pick(0, 7)) : rng());
            wb[i] = static_cast<uint8_t>(c | (rng() % 2 ? 0x80 : 0));
          }
        }
      }
    }
  }
  for (auto& e : d.scale) e = static_cast<uint8_t>(pick(124, 130));
  d.w = fp4 ? Weight::fp4({d.data.data(), d.scale.data(), n, k}) : Weight::fp8({d.data.data(), d.scale.data(), n, k});
  return d;
}

// The block sums are exact and rounded once: bit for bit against integer block sums, on data where
// the former fp32 chain gives other results for most outputs (so the old order fails this test).
void expect_exact_block_sums(WeightType type, uint32_t seed) {
  std::mt19937 rng(seed);
  CpuOps ops(2);
  const int64_t rows = 3, n = 40, k = 384;  // a partial column tile, three activation blocks
  const CancellingData d = cancelling_data(type, rows, n, k, rng);
  std::vector<float> y(static_cast<size_t>(rows * n));
  ops.linear({.x = d.x.data(), .rows = rows, .w = d.w, .y = y.data(), .y_type = ActType::kF32});
  const auto exact = emulate(d.x, rows, d.w), chain = emulate(d.x, rows, d.w, BlockSum::kSequential);
  int64_t same = 0, chain_differs = 0, zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    same += std::memcmp(&y[i], &exact[i], sizeof(float)) == 0;
    chain_differs += chain[i] != exact[i];
    zeros += exact[i] == 0;
  }
  EXPECT_EQ(same, rows * n) << "outputs that differ from the exact block sums";
  EXPECT_GT(chain_differs, rows * n * 3 / 4) << "the data should tell the exact sums from an fp32 chain";
  EXPECT_LT(zeros, rows * n / 8);
  std::vector<uint16_t> yb(y.size());
  ops.linear({.x = d.x.data(), .rows = rows, .w = d.w, .y = yb.data()});
  EXPECT_EQ(yb, testing::to_bf16(exact));
}

TEST(Linear, Fp8BlockSumsAreExactRoundedOnce) { expect_exact_block_sums(WeightType::kFp8Block, 19); }

TEST(Linear, Fp4BlockSumsAreExactRoundedOnce) { expect_exact_block_sums(WeightType::kFp4Block, 20); }

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
