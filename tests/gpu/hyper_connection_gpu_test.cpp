// Hyper-connection kernels against the CPU ops: post bit-exact, pre/head within fp32 summation noise.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hyper_connection.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using gputest::random_bf16;

std::vector<float> randn(size_t n, uint32_t seed, float mean, float std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
  return b;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return 1e30;
    m = std::max(m, std::fabs(double{a[i]} - b[i]) / (std::fabs(double{b[i]}) + 1e-6));
  }
  return m;
}

// Worst |a - b| in bf16 ulps (2^-7 relative) of max(|b|, rms(b)): the weighted stream sums
// cancel, so an ulp count of a near-zero output would measure the cancellation, not the kernel.
double max_ulps_at_scale(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double ss = 0, m = 0;
  for (uint16_t v : b) ss += double{bf16_to_float(v)} * bf16_to_float(v);
  const double rms = std::sqrt(ss / static_cast<double>(b.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
    if (std::isnan(x)) return 1e30;
    m = std::max(m, std::fabs(x - y) / (0x1p-7 * std::max(std::fabs(y), rms)));
  }
  return m;
}

// Poisoned outputs: NaN for bf16, a value no op produces for fp32.
template <typename T>
std::vector<T> poisoned(size_t n) {
  return std::vector<T>(n, T(0x7fc0));
}

struct HcCase {
  int64_t tokens = 9, dim = 4096;
  int hc = 4;
  std::vector<uint16_t> h = to_bf16(randn(static_cast<size_t>(tokens * hc * dim), 1, 0, 2));
  std::vector<float> fn = randn(static_cast<size_t>(24 * hc * dim), 2, 0, 0.5f / 128), scale = randn(3, 3, 1, 0.1f),
                     base = randn(24, 4, 0, 0.1f);
};

TEST(CudaHyperConnection, PreMatchesCpu) {
  HcCase c;
  std::vector<uint16_t> x(static_cast<size_t>(c.tokens * c.dim));
  std::vector<float> post(static_cast<size_t>(c.tokens * c.hc)), comb(static_cast<size_t>(c.tokens * c.hc * c.hc));
  CpuOps cpu(2);
  cpu.hc_pre({c.h.data(), c.tokens, c.hc, c.dim, c.fn.data(), c.scale.data(), c.base.data(), 1e-6f, 1e-6f, 20, x.data(),
              post.data(), comb.data()});
  Dev<uint16_t> dh(c.h), dx(poisoned<uint16_t>(x.size()));
  Dev<float> dfn(c.fn), ds(c.scale), db(c.base), dpost(poisoned<float>(post.size())),
      dcomb(poisoned<float>(comb.size()));
  cuda::hc_pre(dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, 20, dx.p, dpost.p, dcomb.p, nullptr);
  EXPECT_LT(max_rel(dpost.get(), post), 1e-4);
  EXPECT_LT(max_rel(dcomb.get(), comb), 1e-4);
  EXPECT_LE(max_ulps_at_scale(dx.get(), x), 1.0);
}

TEST(CudaHyperConnection, PostIsBitExact) {
  HcCase c;
  const auto x = to_bf16(randn(static_cast<size_t>(c.tokens * c.dim), 5, 0, 1));
  const auto post = randn(static_cast<size_t>(c.tokens * c.hc), 6, 1, 0.3f);
  const auto comb = randn(static_cast<size_t>(c.tokens * c.hc * c.hc), 7, 0.25f, 0.1f);
  std::vector<uint16_t> want(c.h.size());
  CpuOps cpu(2);
  cpu.hc_post({x.data(), c.h.data(), post.data(), comb.data(), want.data(), c.tokens, c.hc, c.dim});
  Dev<uint16_t> dx(x), dh(c.h);
  Dev<float> dp(post), dc(comb);
  cuda::hc_post(dx.p, dh.p, dp.p, dc.p, dh.p, c.tokens, c.hc, c.dim, nullptr);  // in place, as the model runs it
  EXPECT_EQ(dh.get(), want);
}

TEST(CudaHyperConnection, HeadMatchesCpu) {
  HcCase c;
  const auto fn = randn(static_cast<size_t>(c.hc * c.hc * c.dim), 8, 0, 0.5f / 128), base = randn(4, 9, 0, 0.1f);
  const std::vector<float> scale = {1.1f};
  std::vector<uint16_t> y(static_cast<size_t>(c.tokens * c.dim));
  CpuOps cpu(2);
  cpu.hc_head({c.h.data(), c.tokens, c.hc, c.dim, fn.data(), scale.data(), base.data(), 1e-6f, 1e-6f, y.data()});
  Dev<uint16_t> dh(c.h), dy(poisoned<uint16_t>(y.size()));
  Dev<float> dfn(fn), ds(scale), db(base);
  cuda::hc_head(dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, dy.p, nullptr);
  EXPECT_LE(max_ulps_at_scale(dy.get(), y), 1.0);
}

}  // namespace
}  // namespace dsv4
