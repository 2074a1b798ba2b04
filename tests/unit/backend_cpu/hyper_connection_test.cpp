#include "backend/cpu/hyper_connection.h"

#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::random_bf16;

double sigmoid_d(double x) { return 1 / (1 + std::exp(-x)); }

// §4.2 in double.
std::vector<double> sinkhorn_d(std::vector<double> c, int hc, int iters, double eps) {
  for (int j = 0; j < hc; ++j) {
    double mx = -1e300, s = 0;
    for (int k = 0; k < hc; ++k) mx = std::max(mx, c[static_cast<size_t>(j * hc + k)]);
    for (int k = 0; k < hc; ++k) s += std::exp(c[static_cast<size_t>(j * hc + k)] - mx);
    for (int k = 0; k < hc; ++k)
      c[static_cast<size_t>(j * hc + k)] = std::exp(c[static_cast<size_t>(j * hc + k)] - mx) / s + eps;
  }
  auto cols = [&] {
    for (int k = 0; k < hc; ++k) {
      double s = 0;
      for (int j = 0; j < hc; ++j) s += c[static_cast<size_t>(j * hc + k)];
      for (int j = 0; j < hc; ++j) c[static_cast<size_t>(j * hc + k)] /= s + eps;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < hc; ++j) {
      double s = 0;
      for (int k = 0; k < hc; ++k) s += c[static_cast<size_t>(j * hc + k)];
      for (int k = 0; k < hc; ++k) c[static_cast<size_t>(j * hc + k)] /= s + eps;
    }
    cols();
  }
  return c;
}

TEST(Sinkhorn, IsDoublyStochasticAndMatchesDouble) {
  std::mt19937 rng(81);
  for (int trial = 0; trial < 20; ++trial) {
    auto c = testing::random_f32(16, rng, 1.0f);
    std::vector<double> cd(c.begin(), c.end());
    cpu::sinkhorn(c.data(), 4, 20, 1e-6f);
    const auto ref = sinkhorn_d(cd, 4, 20, 1e-6);
    for (int k = 0; k < 4; ++k) {
      double col = 0, row = 0;
      for (int j = 0; j < 4; ++j) {
        col += c[static_cast<size_t>(j * 4 + k)];
        row += c[static_cast<size_t>(k * 4 + j)];
      }
      EXPECT_NEAR(col, 1.0, 1e-5);  // the last step normalises columns
      EXPECT_NEAR(row, 1.0, 5e-3);  // 20 iterations leave rows nearly normalised
    }
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(c[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 1e-6);
  }
}

struct HcCase {
  int64_t tokens, dim;
  int hc = 4;
  std::vector<uint16_t> h;
  std::vector<float> fn, base, scale;
  HcCase(int64_t t, int64_t d, int mix, std::mt19937& rng) : tokens(t), dim(d) {
    h = random_bf16(static_cast<size_t>(t * hc * d), rng);
    fn = testing::random_f32(static_cast<size_t>(mix * hc * d), rng, 0.02f);
    base = testing::random_f32(static_cast<size_t>(mix), rng, 0.5f);
    scale = testing::random_f32(mix == 4 ? 1 : 3, rng, 0.5f);
  }
  // hc_pre over n tokens of streams from h (this case's or a part of them), into x, post and comb.
  HcPreParams pre(const uint16_t* from, int64_t n, uint16_t* x, float* post, float* comb) const {
    return {.h = from,
            .tokens = n,
            .hc = hc,
            .dim = dim,
            .fn = fn.data(),
            .scale = scale.data(),
            .base = base.data(),
            .x = x,
            .post = post,
            .comb = comb};
  }
  // mix of token t in double: (X·fnᵀ)·rs.
  std::vector<double> mix_d(int64_t t, int mix) const {
    const int64_t w = hc * dim;
    double ss = 0;
    for (int64_t i = 0; i < w; ++i)
      ss += double{bf(h[static_cast<size_t>(t * w + i)])} * bf(h[static_cast<size_t>(t * w + i)]);
    const double rs = 1 / std::sqrt(ss / w + 1e-6);
    std::vector<double> m(static_cast<size_t>(mix));
    for (int i = 0; i < mix; ++i) {
      double dv = 0;
      for (int64_t k = 0; k < w; ++k)
        dv += double{bf(h[static_cast<size_t>(t * w + k)])} * fn[static_cast<size_t>(i * w + k)];
      m[static_cast<size_t>(i)] = dv * rs;
    }
    return m;
  }
  double stream_sum(int64_t t, const std::vector<double>& pre, int64_t c) const {
    double y = 0;
    for (int j = 0; j < hc; ++j) y += pre[static_cast<size_t>(j)] * bf(h[static_cast<size_t>((t * hc + j) * dim + c)]);
    return y;
  }
};

TEST(HcPre, MatchesDoubleReference) {
  std::mt19937 rng(82);
  CpuOps ops(2);
  for (int64_t dim : {256L, 4096L}) {
    HcCase k(3, dim, 24, rng);
    std::vector<uint16_t> x(static_cast<size_t>(3 * dim));
    std::vector<float> post(12), comb(48);
    ops.hc_pre(k.pre(k.h.data(), 3, x.data(), post.data(), comb.data()));
    for (int64_t t = 0; t < 3; ++t) {
      const auto m = k.mix_d(t, 24);
      std::vector<double> pre(4), c(16);
      for (int j = 0; j < 4; ++j) {
        pre[static_cast<size_t>(j)] =
            sigmoid_d(m[static_cast<size_t>(j)] * k.scale[0] + k.base[static_cast<size_t>(j)]) + 1e-6;
        EXPECT_NEAR(post[static_cast<size_t>(t * 4 + j)],
                    2 * sigmoid_d(m[static_cast<size_t>(4 + j)] * k.scale[1] + k.base[static_cast<size_t>(4 + j)]),
                    1e-5);
      }
      for (int i = 0; i < 16; ++i)
        c[static_cast<size_t>(i)] = m[static_cast<size_t>(8 + i)] * k.scale[2] + k.base[static_cast<size_t>(8 + i)];
      const auto cref = sinkhorn_d(c, 4, 20, 1e-6);
      for (int i = 0; i < 16; ++i)
        EXPECT_NEAR(comb[static_cast<size_t>(t * 16 + i)], cref[static_cast<size_t>(i)], 1e-5);
      for (int64_t ch = 0; ch < dim; ++ch) {
        const double ref = k.stream_sum(t, pre, ch);
        ASSERT_NEAR(bf(x[static_cast<size_t>(t * dim + ch)]), ref, std::fabs(ref) / 128 + 1e-6) << ch;
      }
    }
  }
}

TEST(HcHead, MatchesDoubleReference) {
  std::mt19937 rng(83);
  CpuOps ops(2);
  HcCase k(2, 256, 4, rng);
  std::vector<uint16_t> y(512);
  ops.hc_head({.h = k.h.data(),
               .tokens = 2,
               .hc = 4,
               .dim = 256,
               .fn = k.fn.data(),
               .scale = k.scale.data(),
               .base = k.base.data(),
               .y = y.data()});
  for (int64_t t = 0; t < 2; ++t) {
    const auto m = k.mix_d(t, 4);
    std::vector<double> pre(4);
    for (int j = 0; j < 4; ++j)
      pre[static_cast<size_t>(j)] =
          sigmoid_d(m[static_cast<size_t>(j)] * k.scale[0] + k.base[static_cast<size_t>(j)]) + 1e-6;
    for (int64_t ch = 0; ch < 256; ++ch) {
      const double ref = k.stream_sum(t, pre, ch);
      ASSERT_NEAR(bf(y[static_cast<size_t>(t * 256 + ch)]), ref, std::fabs(ref) / 128 + 1e-6);
    }
  }
}

// out_norm folds the sublayer's (or the final) RMSNorm into hc_pre and hc_head: the bits of the op
// followed by rms_norm on its output, with random norm weights; post and comb unchanged.
TEST(HcPre, OutNormIsTheOpThenRmsNorm) {
  std::mt19937 rng(84);
  CpuOps ops(2);
  for (int64_t dim : {256L, 4096L}) {
    HcCase k(5, dim, 24, rng);
    std::vector<uint16_t> w(static_cast<size_t>(dim));
    std::normal_distribution<float> nd(1.0f, 0.3f);
    for (auto& v : w) v = float_to_bf16(nd(rng));
    const size_t n = static_cast<size_t>(5 * dim);
    std::vector<uint16_t> x(n), fused(n), y(n), head_fused(n);
    std::vector<float> post(20), comb(80), post2(20), comb2(80);
    ops.hc_pre(k.pre(k.h.data(), 5, x.data(), post.data(), comb.data()));
    ops.rms_norm({x.data(), x.data(), w.data(), 5, dim, 1e-6f});
    HcPreParams p = k.pre(k.h.data(), 5, fused.data(), post2.data(), comb2.data());
    p.out_norm = w.data();
    ops.hc_pre(p);
    EXPECT_EQ(fused, x) << dim;
    EXPECT_EQ(post2, post);
    EXPECT_EQ(comb2, comb);
    HcHeadParams hp{.h = k.h.data(),
                    .tokens = 5,
                    .hc = 4,
                    .dim = dim,
                    .fn = k.fn.data(),
                    .scale = k.scale.data(),
                    .base = k.base.data(),
                    .y = y.data()};
    ops.hc_head(hp);
    ops.rms_norm({y.data(), y.data(), w.data(), 5, dim, 1e-6f});
    hp.y = head_fused.data();
    hp.out_norm = w.data();
    ops.hc_head(hp);
    EXPECT_EQ(head_fused, y) << dim;
  }
}

// hc_post has no reduction of open order: bit-exact against the formula, in place too.
TEST(HcPost, ExactAndInPlace) {
  std::mt19937 rng(84);
  CpuOps ops(2);
  const int64_t T = 3, D = 4096;
  const auto x = random_bf16(static_cast<size_t>(T * D), rng);
  const auto res = random_bf16(static_cast<size_t>(T * 4 * D), rng);
  const auto post = testing::random_f32(static_cast<size_t>(T * 4), rng);
  const auto comb = testing::random_f32(static_cast<size_t>(T * 16), rng);
  std::vector<uint16_t> out(res.size());
  HcPostParams p{.x = x.data(),
                 .residual = res.data(),
                 .post = post.data(),
                 .comb = comb.data(),
                 .out = out.data(),
                 .tokens = T,
                 .hc = 4,
                 .dim = D};
  ops.hc_post(p);
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < 4; ++k)
      for (int64_t c = 0; c < D; ++c) {
        float s = 0;
        for (int j = 0; j < 4; ++j)
          s += comb[static_cast<size_t>(t * 16 + j * 4 + k)] * bf(res[static_cast<size_t>((t * 4 + j) * D + c)]);
        ASSERT_EQ(out[static_cast<size_t>((t * 4 + k) * D + c)],
                  float_to_bf16(post[static_cast<size_t>(t * 4 + k)] * bf(x[static_cast<size_t>(t * D + c)]) + s));
      }
  auto inplace = res;
  p.residual = p.out = inplace.data();
  ops.hc_post(p);
  EXPECT_EQ(inplace, out);
}

// hc_post_pre is the post, then the pre on the streams it wrote (in place, post and comb shared as in the
// model); a pre that reads other streams, or another shape, is refused.
TEST(HcPostPre, IsThePostThenThePre) {
  std::mt19937 rng(87);
  CpuOps ops(2);
  const int64_t T = 3, D = 256;
  HcCase k(T, D, 24, rng);
  const auto y = random_bf16(static_cast<size_t>(T * D), rng);
  const auto post0 = testing::random_f32(static_cast<size_t>(T * 4), rng);
  const auto comb0 = testing::random_f32(static_cast<size_t>(T * 16), rng);
  auto h_apart = k.h, h_fused = k.h;
  std::vector<uint16_t> x_apart(static_cast<size_t>(T * D)), x_fused(x_apart.size());
  auto post_apart = post0, comb_apart = comb0, post_fused = post0, comb_fused = comb0;
  ops.hc_post({y.data(), h_apart.data(), post_apart.data(), comb_apart.data(), h_apart.data(), T, 4, D});
  ops.hc_pre(k.pre(h_apart.data(), T, x_apart.data(), post_apart.data(), comb_apart.data()));
  HcPostPreParams p{{y.data(), h_fused.data(), post_fused.data(), comb_fused.data(), h_fused.data(), T, 4, D},
                    k.pre(h_fused.data(), T, x_fused.data(), post_fused.data(), comb_fused.data())};
  ops.hc_post_pre(p);
  EXPECT_EQ(h_fused, h_apart);
  EXPECT_EQ(x_fused, x_apart);
  EXPECT_EQ(post_fused, post_apart);
  EXPECT_EQ(comb_fused, comb_apart);
  EXPECT_NE(h_fused, k.h);  // the post wrote the streams
  auto other = k.h;
  p.pre.h = other.data();
  EXPECT_THROW(ops.hc_post_pre(p), Error);
  p.pre.h = h_fused.data();
  p.pre.tokens = T - 1;
  EXPECT_THROW(ops.hc_post_pre(p), Error);
}

TEST(HcPre, BatchAndThreadInvariant) {
  std::mt19937 rng(85);
  CpuOps one(1), three(3);
  HcCase k(70, 256, 24, rng);
  auto run = [&](Ops& ops, const uint16_t* h, int64_t tokens) {
    std::vector<uint16_t> x(static_cast<size_t>(tokens * 256));
    std::vector<float> post(static_cast<size_t>(tokens * 4)), comb(static_cast<size_t>(tokens * 16));
    ops.hc_pre(k.pre(h, tokens, x.data(), post.data(), comb.data()));
    return std::make_tuple(x, post, comb);
  };
  const auto [x3, p3, c3] = run(three, k.h.data(), 70);
  const auto [x1, p1, c1] = run(one, k.h.data(), 70);
  EXPECT_EQ(x1, x3);
  EXPECT_EQ(p1, p3);
  EXPECT_EQ(c1, c3);
  const auto [xa, pa, ca] = run(one, k.h.data() + 66 * 1024, 1);
  EXPECT_TRUE(std::equal(xa.begin(), xa.end(), x3.begin() + 66 * 256));
  EXPECT_TRUE(std::equal(ca.begin(), ca.end(), c3.begin() + 66 * 16));
}

TEST(HyperConnection, RejectsBadParameters) {
  std::mt19937 rng(86);
  CpuOps ops(1);
  const HcCase k(1, 128, 24, rng);
  std::vector<uint16_t> x(128);
  std::vector<float> post(4), comb(16);
  HcPreParams p = k.pre(k.h.data(), 1, x.data(), post.data(), comb.data());
  ops.hc_pre(p);
  p.sinkhorn_iters = 0;
  EXPECT_THROW(ops.hc_pre(p), Error);
  p.sinkhorn_iters = 20;
  p.fn = nullptr;
  EXPECT_THROW(ops.hc_pre(p), Error);
  EXPECT_THROW(ops.hc_post({.x = x.data(),
                            .residual = k.h.data(),
                            .post = post.data(),
                            .comb = comb.data(),
                            .out = nullptr,
                            .tokens = 1,
                            .hc = 4,
                            .dim = 128}),
               Error);
  EXPECT_THROW(ops.hc_head({.h = k.h.data(),
                            .tokens = 1,
                            .hc = 0,
                            .dim = 128,
                            .fn = k.fn.data(),
                            .scale = k.scale.data(),
                            .base = k.base.data(),
                            .y = x.data()}),
               Error);
}

}  // namespace
}  // namespace dsv4
