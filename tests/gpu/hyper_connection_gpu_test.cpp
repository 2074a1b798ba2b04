// Hyper-connection kernels against the CPU ops, bit for bit (pre, post, head), at V4-Flash and golden
// dims and at odd shapes (every hc in range, widths that leave a partial chunk, token counts that
// leave a partial block). pre and head run every path: the wide kernel (no scratch, any token count),
// the few-token chain path (with scratch, up to its token limit) and its products-first variant (a
// token a CTA while those fit one wave).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hyper_connection.h"
#include "backend/cuda/row_kernels.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::bits;
using gputest::calc_diff;
using gputest::Dev;

// Normal values times 2^U(-spread, spread): mixed magnitudes, so that the summation order shows.
std::vector<float> mixed(size_t n, uint32_t seed, float std, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, std);
  std::uniform_real_distribution<float> e(-spread, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * std::exp2(e(rng));
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
  return b;
}

// Poisoned outputs: NaN for bf16, a value no op produces for fp32.
template <typename T>
std::vector<T> poisoned(size_t n) {
  return std::vector<T>(n, T(0x7fc0));
}

struct HcCase {
  int64_t tokens, dim;
  int hc;
  int iters = 20;
};

struct HcInputs {
  HcInputs(const HcCase& c, int mix, uint32_t seed)
      : h(to_bf16(mixed(static_cast<size_t>(c.tokens * c.hc * c.dim), seed, 2, 4))),
        fn(mixed(static_cast<size_t>(mix * c.hc * c.dim), seed + 1, 0.5f / 128, 2)),
        scale(mixed(3, seed + 2, 0.3f, 0)),
        base(mixed(static_cast<size_t>(mix), seed + 3, 0.3f, 0)) {
    for (auto& s : scale) s += 1;
  }
  std::vector<uint16_t> h;
  std::vector<float> fn, scale, base;
};

// Whether summing some token's mix (X · fn row) in another order (descending k) changes its bits: the
// inputs must make the order visible, or the exactness checks below could not fail.
bool order_shows(const HcInputs& in, const HcCase& c, int mix) {
  const int64_t width = c.hc * c.dim;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int o = 0; o < mix; ++o) {
      float up = 0, down = 0;
      for (int64_t k = 0; k < width; ++k) {
        up += bf16_to_float(in.h[static_cast<size_t>(t * width + k)]) * in.fn[static_cast<size_t>(o * width + k)];
        const int64_t r = width - 1 - k;
        down += bf16_to_float(in.h[static_cast<size_t>(t * width + r)]) * in.fn[static_cast<size_t>(o * width + r)];
      }
      if (up != down) return true;
    }
  }
  return false;
}

const HcCase kPreCases[] = {
    {9, 4096, 4},     // V4-Flash
    {1, 4096, 4},     // one decode token
    {17, 256, 4},     // golden dims, a partial block of tokens
    {20, 256, 4, 1},  // one Sinkhorn iteration
    {5, 35, 3},       // a width with a partial chunk and an odd tail
    {3, 64, 8},       // the widest mix (three chains a lane)
    {4, 40, 6},       // two chains a lane
    {6, 100, 1},      // one stream
    {2, 65, 2},       // a last chunk of two columns
    {3, 52, 5},       // two chains a lane, 64-column chunks
    {32, 4096, 4},    // a decode batch: chain CTAs of four tokens in two waves
    {7, 4096, 4},     // a partial chain group
    {64, 256, 4},     // the chain path's last token count
    {65, 256, 4},     // past the chain path: the wide kernel
    {5, 4096, 4},     // the most V4-Flash tokens whose products-first CTAs fit one wave
    {2, 40, 6},       // products first at a width that leaves a partial ring of loads
    {3, 256, 4},      // products first at golden dims
    {8, 4096, 4},     // ring: a decode batch of 8 in groups of two
    {40, 4096, 4},    // ring: groups of eight, a partial last group, two waves
    {13, 1000, 4},    // ring: a width of 4000 (a last chunk of 928 columns)
    {2, 24, 4},       // ring: one chunk of 96 columns
};

// The paths of a case: the wide kernel, the chain, the products-first chain where it applies, and the
// ring (every chain case: the inputs are aligned and these widths are multiples of 8 or not).
enum class HcPath { kWide, kChain, kProducts, kRing };
const char* name(HcPath p) {
  switch (p) {
    case HcPath::kWide:
      return "wide kernel";
    case HcPath::kChain:
      return "chain";
    case HcPath::kProducts:
      return "products";
    default:
      return "ring";
  }
}

// The policy that takes one path (the products and ring values), with the norm fused or apart, on a tier.
cuda::GemmPolicy path_policy(HcPath p, bool fused_norm = true, bool fast = false) {
  cuda::GemmPolicy policy;
  policy.numerics = fast ? Numerics::kFast : Numerics::kExact;
  policy.hc_products = p == HcPath::kProducts;
  policy.hc_ring = p == HcPath::kRing;
  policy.hc_fused_norm = fused_norm;
  return policy;
}

std::vector<HcPath> paths(const HcCase& c, int mix) {
  std::vector<HcPath> p{HcPath::kWide, HcPath::kChain, HcPath::kRing};
  if (cuda::hc_uses_products(path_policy(HcPath::kProducts), c.tokens, mix, c.hc * c.dim)) {
    p.push_back(HcPath::kProducts);
  }
  return p;
}

// Scratch for the chain path or the fast mix (null where the wide kernel serves).
struct Scratch {
  Scratch(const HcCase& c, int64_t tokens, int mix, bool fast = false)
      : d(poisoned<float>(static_cast<size_t>(cuda::hc_scratch_floats(tokens, c.hc, c.dim, mix, fast)))) {}
  float* get() { return d.n ? d.p : nullptr; }
  Dev<float> d;
};

TEST(CudaHyperConnection, PreIsBitExact) {
  uint32_t seed = 1;
  int products = 0, rings = 0;
  for (const HcCase& c : kPreCases) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " dim " << c.dim << " hc " << c.hc);
    const int mix = (2 + c.hc) * c.hc;
    const HcInputs in(c, mix, seed += 10);
    if (c.dim >= 256) {
      ASSERT_TRUE(order_shows(in, c, mix));
    }
    std::vector<uint16_t> x(static_cast<size_t>(c.tokens * c.dim));
    std::vector<float> post(static_cast<size_t>(c.tokens * c.hc)), comb(static_cast<size_t>(c.tokens * c.hc * c.hc));
    CpuOps cpu(2);
    cpu.hc_pre({in.h.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f,
                c.iters, x.data(), post.data(), comb.data()});
    for (const HcPath path : paths(c, mix)) {
      SCOPED_TRACE(name(path));
      products += path == HcPath::kProducts;
      const bool chain = path != HcPath::kWide;
      const int64_t launched = cuda::hc_ring_launches();
      Dev<uint16_t> dh(in.h), dx(poisoned<uint16_t>(x.size()));
      Dev<float> dfn(in.fn), ds(in.scale), db(in.base), dpost(poisoned<float>(post.size())),
          dcomb(poisoned<float>(comb.size()));
      Scratch scratch(c, chain ? c.tokens : 0, mix);
      cuda::hc_pre({dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, c.iters, dx.p, dpost.p, dcomb.p},
                   chain ? scratch.get() : nullptr, path_policy(path), nullptr);
      EXPECT_EQ(bits(dpost.get()), bits(post));
      EXPECT_EQ(bits(dcomb.get()), bits(comb));
      EXPECT_EQ(dx.get(), x);
      const bool ring_applies = c.tokens <= 64 && (c.hc * c.dim) % 8 == 0;
      EXPECT_EQ(cuda::hc_ring_launches() - launched, path == HcPath::kRing && ring_applies ? 1 : 0);
      rings += path == HcPath::kRing && ring_applies;
    }
  }
  EXPECT_EQ(rings, 16);    // every case of up to 64 tokens whose width is a multiple of 8
  EXPECT_EQ(products, 5);  // {1, 4096, 4}, {5, 4096, 4}, {2, 40, 6}, {3, 256, 4}, {2, 24, 4} (on 132 SMs)
}

// Both kernels: 8 channels a thread (hc 4, whole 16-byte units: a partial last CTA at dim 4104) and one
// (other hc, dims off the unit, rows off 16-byte alignment), in place as the model runs it and apart.
TEST(CudaHyperConnection, PostIsBitExact) {
  uint32_t seed = 4;
  for (const HcCase& c : {HcCase{9, 4096, 4}, HcCase{17, 256, 4}, HcCase{3, 4104, 4}, HcCase{1, 4096, 4},
                          HcCase{4, 4100, 4}, HcCase{5, 40, 3}, HcCase{2, 64, 8}}) {
    for (const int offset : {0, 1}) {  // offset: every row starts one bf16 past a 16-byte boundary
      SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " dim " << c.dim << " hc " << c.hc << " offset "
                                      << offset);
      const auto h = to_bf16(mixed(static_cast<size_t>(c.tokens * c.hc * c.dim), seed++, 1, 4));
      const auto x = to_bf16(mixed(static_cast<size_t>(c.tokens * c.dim), seed++, 1, 4));
      const auto post = mixed(static_cast<size_t>(c.tokens * c.hc), seed++, 1, 1);
      const auto comb = mixed(static_cast<size_t>(c.tokens * c.hc * c.hc), seed++, 0.25f, 2);
      std::vector<uint16_t> want(h.size());
      CpuOps cpu(2);
      cpu.hc_post({x.data(), h.data(), post.data(), comb.data(), want.data(), c.tokens, c.hc, c.dim});
      std::vector<uint16_t> xo(static_cast<size_t>(offset)), ho(static_cast<size_t>(offset));
      xo.insert(xo.end(), x.begin(), x.end());
      ho.insert(ho.end(), h.begin(), h.end());
      Dev<uint16_t> dx(xo), dh(ho), dout(std::vector<uint16_t>(ho.size(), 0x7fc0));
      Dev<float> dp(post), dc(comb);
      cuda::hc_post({dx.p + offset, dh.p + offset, dp.p, dc.p, dout.p + offset, c.tokens, c.hc, c.dim}, nullptr);
      cuda::hc_post({dx.p + offset, dh.p + offset, dp.p, dc.p, dh.p + offset, c.tokens, c.hc, c.dim}, nullptr);
      const auto apart = dout.get(), in_place = dh.get();
      EXPECT_EQ(std::vector<uint16_t>(apart.begin() + offset, apart.end()), want);
      EXPECT_EQ(std::vector<uint16_t>(in_place.begin() + offset, in_place.end()), want);
    }
  }
}

TEST(CudaHyperConnection, HeadIsBitExact) {
  uint32_t seed = 100;
  for (const HcCase& c : {HcCase{9, 4096, 4}, HcCase{1, 4096, 4}, HcCase{17, 256, 4}, HcCase{5, 35, 3},
                          HcCase{3, 64, 8}, HcCase{80, 256, 4}}) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " dim " << c.dim << " hc " << c.hc);
    const HcInputs in(c, c.hc, seed += 10);
    if (c.dim >= 256) {
      ASSERT_TRUE(order_shows(in, c, c.hc));
    }
    std::vector<uint16_t> y(static_cast<size_t>(c.tokens * c.dim));
    CpuOps cpu(2);
    cpu.hc_head(
        {in.h.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f, y.data()});
    for (const HcPath path : paths(c, c.hc)) {
      SCOPED_TRACE(name(path));
      const bool chain = path != HcPath::kWide;
      Dev<uint16_t> dh(in.h), dy(poisoned<uint16_t>(y.size()));
      Dev<float> dfn(in.fn), ds(in.scale), db(in.base);
      Scratch scratch(c, chain ? c.tokens : 0, c.hc);
      cuda::hc_head({dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, dy.p}, scratch.get(),
                    path_policy(path), nullptr);
      EXPECT_EQ(dy.get(), y);
    }
  }
}

// Outputs x = bf16(Σ_j pre_j·X_j) past ulp_bf16(x) + 2^-18·Σ_j |X_j| from the exact ones: pre_j differ by
// fp32 reassociation (~2^-22 relative) and a cancelling sum magnifies that; a bf16 rounding can flip.
int64_t beyond_bound(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                     const std::vector<uint16_t>& h, const HcCase& c) {
  int64_t bad = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t d = 0; d < c.dim; ++d) {
      const size_t i = static_cast<size_t>(t * c.dim + d);
      double mag = 0;
      for (int j = 0; j < c.hc; ++j)
        mag += std::fabs(bf16_to_float(h[static_cast<size_t>((t * c.hc + j) * c.dim + d)]));
      const double w = bf16_to_float(want[i]), g = bf16_to_float(got[i]);
      const double ulp = std::exp2(std::floor(std::log2(std::max(std::fabs(w), 0x1p-126))) - 7);
      bad += !(std::fabs(g - w) <= ulp + 0x1p-18 * mag);
    }
  }
  return bad;
}

// The fast tier's hc_pre (the mix's fp32 sums over column chunks in a fixed order) against the exact
// op: post and comb (fp32) at calc_diff <= 1e-10, x within a bf16 ulp plus what reassociation can move, the same bits
// run to run; a dropped column chunk (what a chunk-indexing bug computes) fails that bound.
TEST(CudaHyperConnection, FastPrePassesTheGate) {
  uint32_t seed = 500;
  // 1-64 tokens: the column-chunk mix (one, two or four tokens a CTA); more: the tensor-core mix (partial
  // token tiles, a part past the width, a step past it at dim 1002).
  for (const HcCase& c : {HcCase{1, 4096, 4, 20}, HcCase{7, 4096, 4, 20}, HcCase{64, 4096, 4, 20},
                          HcCase{3, 1000, 4, 20}, HcCase{2, 24, 4, 20}, HcCase{65, 4096, 4, 20},
                          HcCase{301, 1000, 4, 20}, HcCase{130, 1002, 4, 20}, HcCase{2048, 4096, 4, 20}}) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " dim " << c.dim);
    const int mix = (2 + c.hc) * c.hc;
    const HcInputs in(c, mix, seed += 10);
    std::vector<uint16_t> x(static_cast<size_t>(c.tokens * c.dim));
    std::vector<float> post(static_cast<size_t>(c.tokens * c.hc)), comb(static_cast<size_t>(c.tokens * c.hc * c.hc));
    CpuOps cpu(2);
    cpu.hc_pre({in.h.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f,
                c.iters, x.data(), post.data(), comb.data()});
    // The fast op on the first `tokens` rows (all by default).
    auto run = [&](const std::vector<float>& fn, int64_t tokens = -1) {
      tokens = tokens < 0 ? c.tokens : tokens;
      const auto n = static_cast<size_t>(tokens);
      Dev<uint16_t> dh(std::vector<uint16_t>(in.h.begin(), in.h.begin() + static_cast<int64_t>(n * c.hc * c.dim))),
          dx(poisoned<uint16_t>(n * c.dim));
      Dev<float> dfn(fn), ds(in.scale), db(in.base), dpost(poisoned<float>(n * c.hc)),
          dcomb(poisoned<float>(n * c.hc * c.hc));
      Scratch scratch(c, tokens, mix, true);
      cuda::hc_pre({dh.p, tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, c.iters, dx.p, dpost.p, dcomb.p},
                   scratch.get(), path_policy(HcPath::kChain, true, true), nullptr);
      return std::tuple{dx.get(), dpost.get(), dcomb.get()};
    };
    const auto [fx, fpost, fcomb] = run(in.fn);
    const double d_post = calc_diff(post, fpost), d_comb = calc_diff(comb, fcomb);
    int64_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += fx[i] != x[i];
    std::printf("[ fast hc_pre ] tokens %3lld dim %4lld: calc_diff post %.2e comb %.2e, x differing %lld of %zu\n",
                static_cast<long long>(c.tokens), static_cast<long long>(c.dim), d_post, d_comb,
                static_cast<long long>(differ), x.size());
    EXPECT_LE(d_post, 1e-10);
    EXPECT_LE(d_comb, 1e-10);
    EXPECT_EQ(beyond_bound(fx, x, in.h, c), 0);
    const auto [fx2, fpost2, fcomb2] = run(in.fn);
    EXPECT_EQ(fx2, fx);
    EXPECT_EQ(bits(fpost2), bits(fpost));
    EXPECT_EQ(bits(fcomb2), bits(fcomb));
    // One and two tokens (the mix's own launch shapes) give their rows' bits of the whole call.
    for (const int64_t n : {int64_t{1}, int64_t{2}}) {
      if (n >= c.tokens || c.tokens > 64) continue;
      const auto [nx, npost, ncomb] = run(in.fn, n);
      const auto head = [n](const auto& v, int64_t per) {
        return std::vector(v.begin(), v.begin() + static_cast<int64_t>(n * per));
      };
      EXPECT_EQ(nx, head(fx, c.dim)) << n << " tokens";
      EXPECT_EQ(bits(npost), bits(head(fpost, c.hc))) << n << " tokens";
      EXPECT_EQ(bits(ncomb), bits(head(fcomb, c.hc * c.hc))) << n << " tokens";
    }
    if (c.hc * c.dim >= 512) {  // the mutation: columns 256..511 of every fn row lost
      std::vector<float> dropped = in.fn;
      const int64_t width = c.hc * c.dim;
      for (int o = 0; o < mix; ++o) std::fill_n(dropped.begin() + o * width + 256, 256, 0.0f);
      const auto [mx, mpost, mcomb] = run(dropped);
      EXPECT_GT(calc_diff(post, mpost) + calc_diff(comb, mcomb), 1e-10) << "a dropped chunk passed the gate";
    }
  }
}

// The fast tier's hc_head (mix = hc rows: one n8 tile of the tensor-core mix) against the exact op: x within
// a bf16 ulp plus what reassociation can move, the same bits run to run.
TEST(CudaHyperConnection, FastHeadPassesTheGate) {
  uint32_t seed = 700;
  for (const HcCase& c : {HcCase{65, 4096, 4}, HcCase{300, 1002, 4}}) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " dim " << c.dim);
    const HcInputs in(c, c.hc, seed += 10);
    std::vector<uint16_t> x(static_cast<size_t>(c.tokens * c.dim));
    CpuOps cpu(2);
    cpu.hc_head(
        {in.h.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f, x.data()});
    auto run = [&] {
      Dev<uint16_t> dh(in.h), dx(poisoned<uint16_t>(x.size()));
      Dev<float> dfn(in.fn), ds(in.scale), db(in.base);
      Scratch scratch(c, c.tokens, c.hc, true);
      cuda::hc_head({dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, dx.p}, scratch.get(),
                    path_policy(HcPath::kChain, true, true), nullptr);
      return dx.get();
    };
    const auto gx = run();
    EXPECT_EQ(beyond_bound(gx, x, in.h, c), 0);
    EXPECT_EQ(run(), gx);
  }
}

// hc_pre and hc_head with out_norm (the sublayer's norm, the final norm) give the bits of the op
// followed by rms_norm on its output, on every path of both tiers and at dims past the fused pass's
// reach (8192: the op, then rms_norm); on the exact tier also the CPU's fused bits. The post and comb
// outputs stay the unfused op's.
TEST(CudaHyperConnection, OutNormGivesTheRmsNormOpsBits) {
  uint32_t seed = 900;
  for (const HcCase& c : {HcCase{1, 4096, 4}, HcCase{9, 4096, 4}, HcCase{32, 4096, 4}, HcCase{70, 4096, 4},
                          HcCase{17, 256, 4}, HcCase{5, 35, 3}, HcCase{3, 7168, 4}, HcCase{2, 8192, 4},
                          HcCase{2, 4100, 4}}) {  // 4100: the fused pass one column a unit
    for (const bool head : {false, true}) {
      SCOPED_TRACE(testing::Message() << (head ? "head" : "pre") << " tokens " << c.tokens << " dim " << c.dim);
      const int mix = head ? c.hc : (2 + c.hc) * c.hc;
      const HcInputs in(c, mix, seed += 10);
      const auto w = to_bf16(mixed(static_cast<size_t>(c.dim), seed + 5, 1, 1));
      const float eps = 1e-6f;
      const Dev<uint16_t> dh(in.h), dw(w);
      const Dev<float> dfn(in.fn), ds(in.scale), db(in.base);
      const size_t nx = static_cast<size_t>(c.tokens * c.dim);
      // The op on the device with or without out_norm, by tier and path: x (or y), post and comb.
      auto run = [&](bool fused, bool chain, const cuda::GemmPolicy& policy) {
        const bool fast = policy.numerics == Numerics::kFast;
        Dev<uint16_t> dx(poisoned<uint16_t>(nx));
        Dev<float> dpost(poisoned<float>(static_cast<size_t>(c.tokens * c.hc))),
            dcomb(poisoned<float>(static_cast<size_t>(c.tokens * c.hc * c.hc)));
        Scratch scratch(c, chain || fast ? c.tokens : 0, mix, fast);
        const uint16_t* norm = fused ? dw.p : nullptr;
        if (head) {
          cuda::hc_head({dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, dx.p, norm, eps}, scratch.get(),
                        policy, nullptr);
        } else {
          cuda::hc_pre({dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, c.iters, dx.p, dpost.p, dcomb.p,
                        norm, eps},
                       scratch.get(), policy, nullptr);
        }
        if (!fused) cuda::rms_norm({dx.p, dx.p, dw.p, c.tokens, c.dim, eps}, nullptr);
        return std::tuple{dx.get(), bits(dpost.get()), bits(dcomb.get())};
      };
      for (const bool fused : {true, false}) {  // the norm in the finishing kernel, or rms_norm after it
        for (const bool fast : {false, true}) {
          for (const HcPath path : fast ? std::vector<HcPath>{HcPath::kChain} : paths(c, mix)) {
            SCOPED_TRACE(testing::Message() << (fast ? "fast" : name(path)) << (fused ? " fused" : " after"));
            const cuda::GemmPolicy policy = path_policy(path, fused, fast);
            const bool chain = path != HcPath::kWide;
            const auto [fx, fpost, fcomb] = run(true, chain, policy);
            const auto [ux, upost, ucomb] = run(false, chain, policy);
            EXPECT_EQ(fx, ux) << "out_norm and a separate rms_norm differ";
            if (!head) {
              EXPECT_EQ(fpost, upost);
              EXPECT_EQ(fcomb, ucomb);
            }
          }
        }
      }
      std::vector<uint16_t> x(nx);
      std::vector<float> post(static_cast<size_t>(c.tokens * c.hc)), comb(static_cast<size_t>(c.tokens * c.hc * c.hc));
      CpuOps cpu(2);
      if (head) {
        cpu.hc_head({in.h.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f,
                     x.data(), w.data(), eps});
      } else {
        cpu.hc_pre({in.h.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f,
                    c.iters, x.data(), post.data(), comb.data(), w.data(), eps});
      }
      EXPECT_EQ(std::get<0>(run(true, true, path_policy(HcPath::kChain))), x)
          << "the exact tier's fused pass is not the CPU's";
    }
  }
}

// Normed outputs x = bf16(w·(xp·r)) against the exact ones: the plain xp within beyond_bound's reach,
// carried through the norm (r from the exact xp; r's own change with xp moves an output by ~2^-20).
int64_t beyond_norm_bound(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                          const std::vector<uint16_t>& xp, const std::vector<uint16_t>& h,
                          const std::vector<uint16_t>& w, const HcCase& c, float eps) {
  const auto ulp = [](double v) { return std::exp2(std::floor(std::log2(std::max(std::fabs(v), 0x1p-126))) - 7); };
  int64_t bad = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < c.dim; ++d) ss += std::pow(bf16_to_float(xp[static_cast<size_t>(t * c.dim + d)]), 2);
    const double r = 1 / std::sqrt(ss / static_cast<double>(c.dim) + eps);
    for (int64_t d = 0; d < c.dim; ++d) {
      const size_t i = static_cast<size_t>(t * c.dim + d);
      double mag = 0;
      for (int j = 0; j < c.hc; ++j)
        mag += std::fabs(bf16_to_float(h[static_cast<size_t>((t * c.hc + j) * c.dim + d)]));
      const double g = bf16_to_float(got[i]), v = bf16_to_float(want[i]), p = bf16_to_float(xp[i]);
      const double reach = ulp(p) + 0x1p-18 * mag;
      bad += !(std::fabs(g - v) <=
               ulp(v) + r * std::fabs(bf16_to_float(w[static_cast<size_t>(d)])) * reach + 0x1p-20 * std::fabs(v));
    }
  }
  return bad;
}

// hc_post_pre on the fast tier: one kernel up to policy.hc_post_pre_max_tokens tokens (the streams are
// hc_post's bits; post and comb within the fp32 gate; x, normed, within the mix's reassociation bound
// carried through the norm, whose sum of squares is reassociated too), the same bits run after run, its
// counters left at zero; past the limit the two ops' bits. The post and comb buffers are also the pre's
// outputs, as in the model; a dropped column chunk fails the gate (and a warp's squares left out of the
// norm's sum, session 35's mutant).
TEST(CudaHyperConnection, FusedPostPrePassesTheGate) {
  uint32_t seed = 1300;
  constexpr int64_t kMax = 64;  // the default: decode batches up to 64
  for (const HcCase& c : {HcCase{1, 4096, 4}, HcCase{2, 4096, 4}, HcCase{7, 4096, 4}, HcCase{8, 4096, 4},
                          HcCase{3, 7168, 4}, HcCase{2, 1000, 4}, HcCase{9, 4096, 4}, HcCase{32, 4096, 4},
                          HcCase{64, 4096, 4}, HcCase{65, 4096, 4}, HcCase{1, 256, 4, 1}}) {
    SCOPED_TRACE(testing::Message() << "tokens " << c.tokens << " dim " << c.dim);
    const int mix = (2 + c.hc) * c.hc;
    const HcInputs in(c, mix, seed += 10);
    const size_t T = static_cast<size_t>(c.tokens), D = static_cast<size_t>(c.dim), H = static_cast<size_t>(c.hc);
    const auto y = to_bf16(mixed(T * D, seed + 6, 2, 4)), w = to_bf16(mixed(D, seed + 5, 1, 1));
    std::vector<float> post0 = mixed(T * H, seed + 7, 1, 0), comb0 = mixed(T * H * H, seed + 8, 0.5f, 0);
    for (auto& v : post0) v = std::fabs(v);
    for (auto& v : comb0) v = std::fabs(v);
    const float eps = 1e-6f;
    // The exact ops: the post's streams, the pre's normed x, post and comb, and its plain x.
    CpuOps cpu(2);
    std::vector<uint16_t> hout(in.h.size()), x(T * D), xp(T * D);
    std::vector<float> post(T * H), comb(T * H * H), post_p(T * H), comb_p(T * H * H);
    cpu.hc_post({y.data(), in.h.data(), post0.data(), comb0.data(), hout.data(), c.tokens, c.hc, c.dim});
    cpu.hc_pre({hout.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f,
                c.iters, x.data(), post.data(), comb.data(), w.data(), eps});
    cpu.hc_pre({hout.data(), c.tokens, c.hc, c.dim, in.fn.data(), in.scale.data(), in.base.data(), 1e-6f, 1e-6f,
                c.iters, xp.data(), post_p.data(), comb_p.data()});
    // The op on the device (limit max_tokens): streams, x, post, comb and the counters after.
    const Dev<uint16_t> dy(y), dw(w);
    const Dev<float> ds(in.scale), db(in.base);
    auto run = [&](const std::vector<float>& fn, int64_t max_tokens, bool apart = false) {
      Dev<uint16_t> dh(in.h), dx(poisoned<uint16_t>(T * D));
      Dev<float> dfn(fn), dpost(post0), dcomb(comb0);
      Dev<int32_t> counters(std::vector<int32_t>(kMax, 0));
      cuda::GemmPolicy policy = path_policy(HcPath::kChain, true, true);
      policy.hc_post_pre_max_tokens = max_tokens;
      const HcPostPreParams p{
          {dy.p, dh.p, dpost.p, dcomb.p, dh.p, c.tokens, c.hc, c.dim},
          {dh.p, c.tokens, c.hc, c.dim, dfn.p, ds.p, db.p, 1e-6f, 1e-6f, c.iters, dx.p, dpost.p, dcomb.p, dw.p, eps}};
      Dev<float> scratch(
          poisoned<float>(static_cast<size_t>(cuda::hc_scratch_floats(c.tokens, c.hc, c.dim, mix, true))));
      if (apart) {
        cuda::hc_post(p.post, nullptr);
        cuda::hc_pre(p.pre, scratch.p, policy, nullptr);
      } else {
        EXPECT_EQ(cuda::hc_post_pre_fuses(p, policy), c.tokens <= max_tokens);
        cuda::hc_post_pre(p, scratch.p, counters.p, policy, nullptr);
      }
      return std::tuple{dh.get(), dx.get(), dpost.get(), dcomb.get(), counters.get()};
    };
    const auto [fh, fx, fpost, fcomb, fcounts] = run(in.fn, kMax);
    const double d_post = calc_diff(post, fpost), d_comb = calc_diff(comb, fcomb);
    const int64_t beyond = beyond_norm_bound(fx, x, xp, hout, w, c, eps);
    std::printf("[ hc_post_pre ] tokens %3lld dim %4lld: calc_diff post %.2e comb %.2e, x beyond the bound %lld\n",
                static_cast<long long>(c.tokens), static_cast<long long>(c.dim), d_post, d_comb,
                static_cast<long long>(beyond));
    EXPECT_EQ(fh, hout) << "the streams are not hc_post's bits";
    EXPECT_LE(d_post, 1e-10);
    EXPECT_LE(d_comb, 1e-10);
    EXPECT_EQ(beyond, 0);
    EXPECT_EQ(fcounts, std::vector<int32_t>(kMax, 0)) << "a counter was left set";
    const auto [gh, gx, gpost, gcomb, gcounts] = run(in.fn, kMax);
    EXPECT_EQ(gx, fx);
    EXPECT_EQ(bits(gpost), bits(fpost));
    EXPECT_EQ(bits(gcomb), bits(fcomb));
    // Not fused (limit 0, or past it): hc_post, then hc_pre, bit for bit.
    const auto [ah, ax, apost, acomb, acounts] = run(in.fn, kMax, true);
    const auto [nh, nx, npost, ncomb, ncounts] = run(in.fn, 0);
    EXPECT_EQ(nh, ah);
    EXPECT_EQ(nx, ax);
    EXPECT_EQ(bits(npost), bits(apost));
    EXPECT_EQ(bits(ncomb), bits(acomb));
    if (c.tokens > kMax) {
      EXPECT_EQ(fx, ax);
      EXPECT_EQ(bits(fpost), bits(apost));
    }
    std::vector<float> dropped = in.fn;  // the mutation: columns 256..511 of every fn row lost
    const int64_t width = c.hc * c.dim;
    for (int o = 0; o < mix; ++o) std::fill_n(dropped.begin() + o * width + 256, 256, 0.0f);
    const auto [mh, mx, mpost, mcomb, mcounts] = run(dropped, kMax);
    EXPECT_GT(calc_diff(post, mpost) + calc_diff(comb, mcomb), 1e-10) << "a dropped chunk passed the gate";
  }
}

}  // namespace
}  // namespace dsv4
