#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::Fp4Weight;
using testing::Fp8Weight;
using testing::random_bf16;

struct Gate {
  int64_t dim;
  int experts, topk;
  std::vector<uint16_t> w;
  std::vector<float> bias;
  std::vector<int32_t> tid2eid;
  MoeGateParams params(const std::vector<uint16_t>& x, int64_t tokens, std::vector<int32_t>& idx,
                       std::vector<float>& wts) const {
    idx.assign(static_cast<size_t>(tokens * topk), -5);
    wts.assign(idx.size(), -5);
    return {.x = x.data(),
            .tokens = tokens,
            .dim = dim,
            .weight = Weight::bf16(w.data(), experts, dim),
            .bias = bias.empty() ? nullptr : bias.data(),
            .experts = experts,
            .topk = topk,
            .route_scale = 1.5f,
            .indices = idx.data(),
            .weights = wts.data()};
  }
};

std::vector<double> scores_d(const Gate& g, const std::vector<uint16_t>& x, int64_t t) {
  std::vector<double> s(static_cast<size_t>(g.experts));
  for (int e = 0; e < g.experts; ++e) {
    double z = 0;
    for (int64_t k = 0; k < g.dim; ++k)
      z += double{bf(x[static_cast<size_t>(t * g.dim + k)])} * bf(g.w[static_cast<size_t>(e * g.dim + k)]);
    s[static_cast<size_t>(e)] = std::sqrt(z > 20 ? z : std::log1p(std::exp(z)));
  }
  return s;
}

TEST(MoeGate, SqrtSoftplusTopKWithSelectionBias) {
  std::mt19937 rng(91);
  CpuOps ops(2);
  Gate g{.dim = 4096, .experts = 256, .topk = 6, .w = random_bf16(256 * 4096, rng, 0.02f), .bias = {}, .tid2eid = {}};
  g.bias = testing::random_f32(256, rng, 0.05f);
  const auto x = random_bf16(3 * 4096, rng);
  std::vector<int32_t> idx;
  std::vector<float> w;
  ops.moe_gate(g.params(x, 3, idx, w));
  for (int64_t t = 0; t < 3; ++t) {
    const auto s = scores_d(g, x, t);
    std::vector<int> order(256);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return s[static_cast<size_t>(a)] + g.bias[static_cast<size_t>(a)] >
             s[static_cast<size_t>(b)] + g.bias[static_cast<size_t>(b)];
    });
    double sum = 0;
    for (int r = 0; r < 6; ++r) sum += s[static_cast<size_t>(order[static_cast<size_t>(r)])];
    for (int r = 0; r < 6; ++r) {
      EXPECT_EQ(idx[static_cast<size_t>(t * 6 + r)], order[static_cast<size_t>(r)]);  // bias steers selection ...
      EXPECT_NEAR(w[static_cast<size_t>(t * 6 + r)], s[static_cast<size_t>(order[static_cast<size_t>(r)])] / sum * 1.5,
                  1e-5);  // ... not weights
    }
  }
}

TEST(MoeGate, TiesGoToTheLowerExpertAndSoftplusThreshold) {
  CpuOps ops(1);
  Gate g{.dim = 128, .experts = 8, .topk = 3, .w = std::vector<uint16_t>(8 * 128, 0), .bias = {}, .tid2eid = {}};
  // Experts 5, 2, 7 share one large weight row (z = 32 > 20: s = sqrt(z) exactly); the rest are zero.
  for (int e : {5, 2, 7})
    for (int k = 0; k < 128; ++k) g.w[static_cast<size_t>(e * 128 + k)] = float_to_bf16(0.25f);
  const std::vector<uint16_t> x(128, float_to_bf16(1.0f));
  std::vector<int32_t> idx;
  std::vector<float> w;
  ops.moe_gate(g.params(x, 1, idx, w));
  EXPECT_EQ(idx, (std::vector<int32_t>{2, 5, 7}));
  for (float v : w) EXPECT_NEAR(v, 0.5f, 1e-6);  // sqrt(32)/(3·sqrt(32))·1.5
  // All equal: the first experts.
  std::fill(g.w.begin(), g.w.end(), uint16_t{0});
  ops.moe_gate(g.params(x, 1, idx, w));
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1, 2}));
}

TEST(MoeGate, HashRoutingUsesTheTableAndTheScores) {
  std::mt19937 rng(92);
  CpuOps ops(2);
  Gate g{.dim = 256, .experts = 8, .topk = 2, .w = random_bf16(8 * 256, rng, 0.05f), .bias = {}, .tid2eid = {}};
  g.tid2eid = {3, 1, 0, 7, 6, 2, 5, 4};  // vocab 4
  const auto x = random_bf16(3 * 256, rng);
  const std::vector<int32_t> ids = {2, 0, 3};
  std::vector<int32_t> idx;
  std::vector<float> w;
  auto p = g.params(x, 3, idx, w);
  p.tid2eid = g.tid2eid.data();
  p.token_ids = ids.data();
  p.vocab = 4;
  ops.moe_gate(p);
  for (int64_t t = 0; t < 3; ++t) {
    const auto s = scores_d(g, x, t);
    const int32_t a = g.tid2eid[static_cast<size_t>(ids[static_cast<size_t>(t)] * 2)],
                  b = g.tid2eid[static_cast<size_t>(ids[static_cast<size_t>(t)] * 2 + 1)];
    EXPECT_EQ(idx[static_cast<size_t>(t * 2)], a);
    EXPECT_EQ(idx[static_cast<size_t>(t * 2 + 1)], b);
    const double sum = s[static_cast<size_t>(a)] + s[static_cast<size_t>(b)];
    EXPECT_NEAR(w[static_cast<size_t>(t * 2)], s[static_cast<size_t>(a)] / sum * 1.5, 1e-5);
  }
  const std::vector<int32_t> bad_ids = {4, 0, 0};
  p.token_ids = bad_ids.data();
  EXPECT_THROW(ops.moe_gate(p), Error);
  g.tid2eid[0] = 8;
  p.token_ids = ids.data();
  p.tid2eid = g.tid2eid.data();
  const std::vector<int32_t> zero_id = {0, 0, 0};
  p.token_ids = zero_id.data();
  EXPECT_THROW(ops.moe_gate(p), Error);
}

struct Experts {
  int64_t dim, inter;
  int n;
  std::vector<std::unique_ptr<Fp4Weight>> w1, w3, w2;
  std::unique_ptr<Fp8Weight> s1, s3, s2;
  std::vector<Weight> v1, v3, v2;
  Experts(int64_t d, int64_t i, int count, std::mt19937& rng) : dim(d), inter(i), n(count) {
    for (int e = 0; e < n; ++e) {
      w1.push_back(std::make_unique<Fp4Weight>(i, d, rng, 0.3f));
      w3.push_back(std::make_unique<Fp4Weight>(i, d, rng, 0.3f));
      w2.push_back(std::make_unique<Fp4Weight>(d, i, rng, 0.1f));
      v1.push_back(w1.back()->view());
      v3.push_back(w3.back()->view());
      v2.push_back(w2.back()->view());
    }
    s1 = std::make_unique<Fp8Weight>(i, d, rng, 0.3f);
    s3 = std::make_unique<Fp8Weight>(i, d, rng, 0.3f);
    s2 = std::make_unique<Fp8Weight>(d, i, rng, 0.1f);
  }
  MoeExpertsParams params(const std::vector<uint16_t>& x, int64_t tokens, const std::vector<int32_t>& idx,
                          const std::vector<float>& w, int topk, uint16_t* y) const {
    return {.x = x.data(),
            .tokens = tokens,
            .dim = dim,
            .inter_dim = inter,
            .indices = idx.data(),
            .weights = w.data(),
            .topk = topk,
            .experts = n,
            .w1 = v1.data(),
            .w3 = v3.data(),
            .w2 = v2.data(),
            .shared_w1 = s1->view(),
            .shared_w3 = s3->view(),
            .shared_w2 = s2->view(),
            .swiglu_limit = 10.0f,
            .y = y};
  }
};

// §6.2's SwiGLU of one element, written out (limit 0: no clamp; weight null: no product).
uint16_t swiglu_ref(uint16_t g16, uint16_t u16, float limit, const float* weight) {
  float g = bf(g16), u = bf(u16);
  if (limit > 0) {
    u = std::clamp(u, -limit, limit);
    g = std::min(g, limit);
  }
  const float a = g / (1.0f + std::exp(-g)) * u;
  return float_to_bf16(weight ? *weight * a : a);
}

TEST(Swiglu, ClampsWeightsAndRoundsAsWrittenOut) {
  std::mt19937 rng(96);
  CpuOps ops(3);
  const int64_t rows = 7, dim = 100;  // no vector-friendly width
  const auto g = random_bf16(static_cast<size_t>(rows * dim), rng, 4.0f);
  const auto u = random_bf16(g.size(), rng, 4.0f);
  const auto w = testing::random_f32(static_cast<size_t>(rows), rng, 0.5f);
  for (const float limit : {0.0f, 3.0f}) {
    for (const float* weights : {static_cast<const float*>(nullptr), w.data()}) {
      std::vector<uint16_t> out(g.size(), 0xffff);
      ops.swiglu({.g = g.data(),
                  .u = u.data(),
                  .rows = rows,
                  .dim = dim,
                  .limit = limit,
                  .weights = weights,
                  .out = out.data()});
      int clamped = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const float* wr = weights ? weights + i / dim : nullptr;
        ASSERT_EQ(out[i], swiglu_ref(g[i], u[i], limit, wr)) << i << " limit " << limit;
        clamped += limit > 0 && std::fabs(bf(u[i])) > limit;
      }
      EXPECT_EQ(clamped > 0, limit > 0) << "the inputs never reached the limit";
    }
  }
  auto in_place = g;  // out may equal g
  ops.swiglu({.g = in_place.data(), .u = u.data(), .rows = rows, .dim = dim, .limit = 3.0f, .out = in_place.data()});
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(in_place[i], swiglu_ref(g[i], u[i], 3.0f, nullptr)) << i;
}

TEST(Swiglu, RejectsBadParameters) {
  CpuOps ops(1);
  std::vector<uint16_t> g(8, 0x3f80), u(8, 0x3f80), out(8);
  const SwigluParams ok{.g = g.data(), .u = u.data(), .rows = 2, .dim = 4, .out = out.data()};
  EXPECT_NO_THROW(ops.swiglu(ok));
  for (auto broken : {+[](SwigluParams& p) { p.dim = 0; }, +[](SwigluParams& p) { p.limit = -1; },
                      +[](SwigluParams& p) { p.limit = NAN; }, +[](SwigluParams& p) { p.u = nullptr; }}) {
    SwigluParams p = ok;
    broken(p);
    EXPECT_THROW(ops.swiglu(p), Error);
  }
}

// §6.2-§6.3 written out on top of the (separately tested) linear and swiglu ops.
std::vector<uint16_t> expert_out(Ops& ops, const uint16_t* x, const Weight& w1, const Weight& w3, const Weight& w2,
                                 int64_t dim, int64_t inter, float weight, bool routed) {
  std::vector<uint16_t> g(static_cast<size_t>(inter)), u(g.size()), a(g.size()), y(static_cast<size_t>(dim));
  ops.linear({.x = x, .rows = 1, .w = w1, .y = g.data()});
  ops.linear({.x = x, .rows = 1, .w = w3, .y = u.data()});
  ops.swiglu({.g = g.data(),
              .u = u.data(),
              .rows = 1,
              .dim = inter,
              .limit = routed ? 10.0f : 0.0f,
              .weights = routed ? &weight : nullptr,
              .out = a.data()});
  ops.linear({.x = a.data(), .rows = 1, .w = w2, .y = y.data()});
  return y;
}

TEST(MoeExperts, CombinesInAscendingExpertOrderWithSharedLastAndClampsRoutedOnly) {
  std::mt19937 rng(93);
  CpuOps ops(2);
  const Experts ex(256, 128, 6, rng);
  const int64_t T = 5;
  const auto x = random_bf16(static_cast<size_t>(T * 256), rng, 2.0f);  // large enough to hit the clamp
  const std::vector<int32_t> idx = {4, 1, 0, 5, 3, 1, 2, 4, 5, 0};
  const auto w = testing::random_f32(10, rng, 0.5f);
  std::vector<uint16_t> y(static_cast<size_t>(T * 256));
  ops.moe_experts(ex.params(x, T, idx, w, 2, y.data()));
  bool clamped = false;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> acc(256, 0.0f);
    for (int e = 0; e < 6; ++e) {
      for (int r = 0; r < 2; ++r) {
        if (idx[static_cast<size_t>(t * 2 + r)] != e) continue;
        const auto ye =
            expert_out(ops, x.data() + t * 256, ex.v1[static_cast<size_t>(e)], ex.v3[static_cast<size_t>(e)],
                       ex.v2[static_cast<size_t>(e)], 256, 128, w[static_cast<size_t>(t * 2 + r)], true);
        for (int c = 0; c < 256; ++c) acc[static_cast<size_t>(c)] += bf(ye[static_cast<size_t>(c)]);
        std::vector<uint16_t> g(128);
        ops.linear({.x = x.data() + t * 256, .rows = 1, .w = ex.v1[static_cast<size_t>(e)], .y = g.data()});
        for (uint16_t v : g) clamped |= bf(v) > 10.0f;
      }
    }
    const auto ys =
        expert_out(ops, x.data() + t * 256, ex.s1->view(), ex.s3->view(), ex.s2->view(), 256, 128, 0, false);
    for (int c = 0; c < 256; ++c) {
      ASSERT_EQ(y[static_cast<size_t>(t * 256 + c)],
                float_to_bf16(acc[static_cast<size_t>(c)] + bf(ys[static_cast<size_t>(c)])))
          << t << " " << c;
    }
  }
  EXPECT_TRUE(clamped) << "the inputs never reached the SwiGLU limit";
}

TEST(MoeExperts, BatchAndThreadInvariant) {
  std::mt19937 rng(94);
  CpuOps one(1), three(3);
  const Experts ex(256, 128, 4, rng);
  const int64_t T = 9;
  const auto x = random_bf16(static_cast<size_t>(T * 256), rng);
  std::vector<int32_t> idx(static_cast<size_t>(T * 2));
  for (int64_t t = 0; t < T; ++t) {
    idx[static_cast<size_t>(2 * t)] = static_cast<int32_t>(t % 4);
    idx[static_cast<size_t>(2 * t + 1)] = static_cast<int32_t>((t + 1) % 4);
  }
  const auto w = testing::random_f32(static_cast<size_t>(T * 2), rng);
  std::vector<uint16_t> y1(static_cast<size_t>(T * 256)), y3(y1.size()), ya(256);
  one.moe_experts(ex.params(x, T, idx, w, 2, y1.data()));
  three.moe_experts(ex.params(x, T, idx, w, 2, y3.data()));
  EXPECT_EQ(y1, y3);
  const std::vector<uint16_t> xa(x.begin() + 7 * 256, x.begin() + 8 * 256);
  const std::vector<int32_t> ia(idx.begin() + 14, idx.begin() + 16);
  const std::vector<float> wa(w.begin() + 14, w.begin() + 16);
  three.moe_experts(ex.params(xa, 1, ia, wa, 2, ya.data()));
  EXPECT_TRUE(std::equal(ya.begin(), ya.end(), y1.begin() + 7 * 256));
}

TEST(MoeExperts, RejectsBadParameters) {
  std::mt19937 rng(95);
  CpuOps ops(1);
  const Experts ex(128, 128, 2, rng);
  const auto x = random_bf16(128, rng);
  std::vector<uint16_t> y(128);
  const std::vector<float> w = {0.5f, 0.5f};
  const std::vector<int32_t> bad = {0, 2};
  EXPECT_THROW(ops.moe_experts(ex.params(x, 1, bad, w, 2, y.data())), Error);
  const std::vector<int32_t> good = {0, 1};
  auto p = ex.params(x, 1, good, w, 2, y.data());
  p.inter_dim = 256;  // weights are [128, 128]
  EXPECT_THROW(ops.moe_experts(p), Error);
  p = ex.params(x, 1, good, w, 3, y.data());  // topk above experts
  EXPECT_THROW(ops.moe_experts(p), Error);
}

// ---- experts split across ranks: moe_pairs and moe_combine ----------------------------------------

// Rows [r0, r0 + n) of an FP4 view (per-row scales), as a rank holds them.
Weight fp4_rows(const Weight& w, int64_t r0, int64_t n) {
  Weight s = w;
  s.data = static_cast<const uint8_t*>(w.data) + r0 * w.cols / 2;
  s.scale = w.scale + r0 * w.cols / 32;
  s.rows = n;
  return s;
}

struct SplitMoe {
  static constexpr int64_t T = 7, D = 256, I = 128;
  static constexpr int K = 3, E = 6;  // three terms: the combine's order shows
  std::mt19937 rng{96};
  CpuOps ops{2};
  Experts ex{D, I, E, rng};
  std::vector<uint16_t> x = random_bf16(static_cast<size_t>(T * D), rng, 2.0f);
  std::vector<int32_t> idx = {4, 1, 0, 5, 3, 1, 2, 4, 5, 0, 1, 3, 2, 0, 4, 3, 5, 2, 1, 4, 0};
  std::vector<float> w = testing::random_f32(T * K, rng, 0.5f);

  std::vector<uint16_t> whole() {
    std::vector<uint16_t> y(static_cast<size_t>(T * D));
    ops.moe_experts(ex.params(x, T, idx, w, K, y.data()));
    return y;
  }
  std::vector<uint16_t> shared() {
    std::vector<uint16_t> y(static_cast<size_t>(T * D));
    ops.shared_expert({x.data(), T, D, I, ex.s1->view(), ex.s3->view(), ex.s2->view(), y.data()});
    return y;
  }
  MoePairsParams up(const std::vector<Weight>& w1, const std::vector<Weight>& w3, int64_t out_dim, uint16_t* out) {
    return {.stage = MoeStage::kUp,
            .in = x.data(),
            .in_dim = D,
            .tokens = T,
            .indices = idx.data(),
            .weights = w.data(),
            .topk = K,
            .experts = E,
            .w1 = w1.data(),
            .w3 = w3.data(),
            .swiglu_limit = 10.0f,
            .out = out,
            .out_dim = out_dim};
  }
  MoePairsParams down(const uint16_t* a, const std::vector<Weight>& w2, int64_t out_dim, uint16_t* out) {
    return {.stage = MoeStage::kDown,
            .in = a,
            .in_dim = I,
            .tokens = T,
            .indices = idx.data(),
            .topk = K,
            .experts = E,
            .w2 = w2.data(),
            .out = out,
            .out_dim = out_dim};
  }
  std::vector<uint16_t> combine(const std::vector<uint16_t>& pairs, const std::vector<uint16_t>& shared_y) {
    std::vector<uint16_t> y(static_cast<size_t>(T * D), 0xFFFF);
    ops.moe_combine({pairs.data(), idx.data(), shared_y.data(), T, K, D, y.data()});
    return y;
  }
};

// Columns [c0, c0 + part.width) of `full` rows (width fw) from part rows.
void put_columns(const std::vector<uint16_t>& part, int64_t pw, std::vector<uint16_t>& full, int64_t fw, int64_t c0) {
  for (size_t r = 0; r < part.size() / static_cast<size_t>(pw); ++r)
    std::copy_n(part.begin() + static_cast<std::ptrdiff_t>(r) * pw, pw,
                full.begin() + static_cast<std::ptrdiff_t>(r) * fw + c0);
}

TEST(MoePairs, UpDownAndCombineGiveMoeExpertsBits) {
  SplitMoe m;
  const int64_t P = SplitMoe::T * SplitMoe::K;
  std::vector<uint16_t> a(static_cast<size_t>(P * SplitMoe::I), 0xFFFF),
      y(static_cast<size_t>(P * SplitMoe::D), 0xFFFF);
  m.ops.moe_pairs(m.up(m.ex.v1, m.ex.v3, SplitMoe::I, a.data()));
  m.ops.moe_pairs(m.down(a.data(), m.ex.v2, SplitMoe::D, y.data()));
  EXPECT_EQ(m.combine(y, m.shared()), m.whole());
}

// Tensor parallel: each half of the experts' w1/w3 rows makes half of every pair's hidden row, the
// gathered rows go through each half of w2's rows, the combine runs per half of the columns.
TEST(MoePairs, RowHalvesOfEveryExpertComposeToTheWhole) {
  SplitMoe m;
  const int64_t P = SplitMoe::T * SplitMoe::K, I = SplitMoe::I, D = SplitMoe::D;
  std::vector<uint16_t> a(static_cast<size_t>(P * I)), y(static_cast<size_t>(P * D));
  for (int h = 0; h < 2; ++h) {
    std::vector<Weight> w1, w3, w2;
    for (int e = 0; e < SplitMoe::E; ++e) {
      w1.push_back(fp4_rows(m.ex.v1[static_cast<size_t>(e)], h * I / 2, I / 2));
      w3.push_back(fp4_rows(m.ex.v3[static_cast<size_t>(e)], h * I / 2, I / 2));
    }
    std::vector<uint16_t> part(static_cast<size_t>(P * I / 2), 0xFFFF);
    m.ops.moe_pairs(m.up(w1, w3, I / 2, part.data()));
    put_columns(part, I / 2, a, I, h * I / 2);
  }
  std::vector<uint16_t> shared = m.shared(), y_half, combined(static_cast<size_t>(SplitMoe::T * D));
  for (int h = 0; h < 2; ++h) {
    std::vector<Weight> w2;
    for (int e = 0; e < SplitMoe::E; ++e) w2.push_back(fp4_rows(m.ex.v2[static_cast<size_t>(e)], h * D / 2, D / 2));
    std::vector<uint16_t> part(static_cast<size_t>(P * D / 2), 0xFFFF),
        s_half(static_cast<size_t>(SplitMoe::T * D / 2));
    m.ops.moe_pairs(m.down(a.data(), w2, D / 2, part.data()));
    for (int64_t t = 0; t < SplitMoe::T; ++t)
      std::copy_n(shared.begin() + t * D + h * D / 2, D / 2, s_half.begin() + t * D / 2);
    std::vector<uint16_t> out(static_cast<size_t>(SplitMoe::T * D / 2));
    m.ops.moe_combine({part.data(), m.idx.data(), s_half.data(), SplitMoe::T, SplitMoe::K, D / 2, out.data()});
    put_columns(out, D / 2, combined, D, h * D / 2);
  }
  EXPECT_EQ(combined, m.whole());
}

// Expert parallel: a rank computes the pairs of its experts only and leaves the others' rows alone;
// the owners' rows together are every pair.
TEST(MoePairs, OwnedExpertsWriteOnlyTheirPairs) {
  SplitMoe m;
  const int64_t P = SplitMoe::T * SplitMoe::K, I = SplitMoe::I, D = SplitMoe::D;
  std::vector<uint16_t> a(static_cast<size_t>(P * I), 0xFFFF), y(static_cast<size_t>(P * D), 0xFFFF);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<Weight> w1 = m.ex.v1, w3 = m.ex.v3, w2 = m.ex.v2;
    for (int e = 0; e < SplitMoe::E; ++e) {
      if (e / 3 == rank) continue;
      w1[static_cast<size_t>(e)].data = w3[static_cast<size_t>(e)].data = w2[static_cast<size_t>(e)].data = nullptr;
    }
    m.ops.moe_pairs(m.up(w1, w3, I, a.data()));
    m.ops.moe_pairs(m.down(a.data(), w2, D, y.data()));
    if (rank == 0) {
      for (int64_t q = 0; q < P; ++q)
        EXPECT_EQ(y[static_cast<size_t>(q * D)] == 0xFFFF, m.idx[static_cast<size_t>(q)] >= 3) << "pair " << q;
    }
  }
  EXPECT_EQ(m.combine(y, m.shared()), m.whole());
}

TEST(MoePairs, RejectsBadParameters) {
  SplitMoe m;
  std::vector<uint16_t> a(static_cast<size_t>(SplitMoe::T * SplitMoe::K * SplitMoe::I));
  MoePairsParams p = m.up(m.ex.v1, m.ex.v3, SplitMoe::I + 1, a.data());
  EXPECT_THROW(m.ops.moe_pairs(p), Error);  // w1's rows are not out_dim
  p = m.up(m.ex.v1, m.ex.v3, SplitMoe::I, a.data());
  p.weights = nullptr;
  EXPECT_THROW(m.ops.moe_pairs(p), Error);
  std::vector<int32_t> bad = m.idx;
  bad[3] = SplitMoe::E;
  p = m.up(m.ex.v1, m.ex.v3, SplitMoe::I, a.data());
  p.indices = bad.data();
  EXPECT_THROW(m.ops.moe_pairs(p), Error);
}

// fp32 sums of a few bf16 rows are mostly exact, so the order shows only where magnitudes part: experts
// 0, 1, 2 hold 1, 2^30, -2^30. Ascending: (1 + 2^30) rounds to 2^30, then 0; k order (1, 2, 0) gives 1.
TEST(MoeCombine, SumsInAscendingExpertOrderFromZeroThenTheSharedExpert) {
  CpuOps ops(1);
  const int64_t D = 8;
  const std::vector<int32_t> idx = {1, 2, 0};
  std::vector<uint16_t> pairs, shared(D, float_to_bf16(0.5f)), y(D);
  for (float v : {1073741824.0f, -1073741824.0f, 1.0f}) pairs.insert(pairs.end(), D, float_to_bf16(v));
  ops.moe_combine({pairs.data(), idx.data(), shared.data(), 1, 3, D, y.data()});
  for (uint16_t v : y) EXPECT_EQ(bf(v), 0.5f);
}

}  // namespace
}  // namespace dsv4
