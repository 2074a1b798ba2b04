// The fast tier's block-scaled GEMMs against the exact ones on identical inputs: spec/NUMERICS.md's
// op gate. Per output, |y − x| <= ulp_bf16(x) + 2^-10·A, where x is the exact sum (fp32 out of the
// exact kernel) and A the same sum over absolute values (the exact kernel on |codes|, |weights|); per
// 128x128 output tile, calc_diff(x, y) <= 3e-5. Inputs are fresh and heavy-tailed (row magnitudes
// over 2^±6, outlier channels, mirrored blocks that cancel). Every tile and split variant of the fast
// kernel runs, and five mutations of its inputs (each what a known kernel bug computes) must fail the
// gate, so the gate is shown to have the power to fail.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_error.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm/fast_gemv.h"
#include "backend/cuda/gemm/fast_mma.h"
#include "backend/cuda/gemm/fast_plain_gemv.h"
#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/cuda/gemm/wgmma_few.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/gemm_internal.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"
#include "gpu/late_copy.h"

namespace dsv4 {
namespace {

using cuda::ExactBlockArgs;
using cuda::GemmWeightKind;
using gputest::bits;
using gputest::calc_diff;
using gputest::Dev;

constexpr double kTileCalcDiff = 3e-5;
constexpr uint16_t kPoison = 0x7fc1;  // a NaN no kernel writes

struct Case {
  std::string name;
  GemmWeightKind kind = GemmWeightKind::kFp8;
  int64_t rows = 0, n = 0, k = 0;
  int groups = 1;
  std::vector<int32_t> offsets;  // grouped: experts + 1 entries
  bool pair = false;
  bool cancel = false;  // the second half of K mirrors the first, negated: exact sums of 0
  int scale_span = 15;  // weight scale exponents drawn from scale_span values around 2^0
  int experts() const { return offsets.empty() ? 0 : static_cast<int>(offsets.size()) - 1; }
  int weights() const { return std::max(1, experts()); }
  int64_t ng() const { return n / groups; }
  int64_t kg() const { return k / groups; }
  // One weight [n, kg] (per expert when grouped; groups share one).
  int64_t weight_bytes() const { return kind == GemmWeightKind::kFp8 ? n * kg() : n * kg() / 2; }
  int64_t scale_bytes() const { return kind == GemmWeightKind::kFp8 ? (n + 127) / 128 * (kg() / 128) : n * kg() / 32; }
};

Case dense(std::string name, GemmWeightKind kind, int64_t rows, int64_t n, int64_t k, int groups = 1,
           bool cancel = false) {
  Case c;
  c.name = std::move(name), c.kind = kind, c.rows = rows, c.n = n, c.k = k, c.groups = groups, c.cancel = cancel;
  return c;
}

// Experts with these row counts; `extra` rows past theirs, which must stay untouched.
Case experts(std::string name, GemmWeightKind kind, const std::vector<int32_t>& counts, int64_t n, int64_t k, bool pair,
             int64_t extra = 0) {
  Case c = dense(std::move(name), kind, 0, n, k);
  c.offsets = {0};
  for (int32_t r : counts) c.offsets.push_back(c.offsets.back() + r);
  c.rows = c.offsets.back() + extra;
  c.pair = pair;
  return c;
}

enum class Mutation { kNone, kDropBlock, kScaleIndex, kRowScale, kGroupStride, kKTail };

// Host copies of one case's inputs: activation codes and scales, and every weight (pair: twice).
struct HostInputs {
  std::vector<uint16_t> x;  // the bf16 rows the codes quantize
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  int64_t scale_ld = 0;
  std::vector<uint8_t> w, ws;  // weights() (x2 for a pair) copies back to back
};

uint8_t random_fp8(std::mt19937& rng) {
  uint8_t b = static_cast<uint8_t>(rng());
  return (b & 0x7f) == 0x7f ? b ^ 1 : b;
}

HostInputs make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  HostInputs h;
  // bf16 rows with per-row magnitudes over 2^±6 and outlier channels, quantized by quantize_act.
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-6.0f, 6.0f);
  std::vector<uint16_t> x(static_cast<size_t>(c.rows * c.k));
  for (int64_t r = 0; r < c.rows; ++r) {
    const float s = std::exp2(mag(rng));
    for (int64_t j = 0; j < c.k; ++j) {
      const float outlier = j % 97 == 5 ? 128.0f : 1.0f;
      x[static_cast<size_t>(r * c.k + j)] = float_to_bf16(nd(rng) * s * outlier);
    }
  }
  if (c.cancel) {  // block kb + half mirrors block kb, negated (weights below mirror unnegated)
    const int64_t half = c.k / 2;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < half; ++j)
        x[static_cast<size_t>(r * c.k + half + j)] = x[static_cast<size_t>(r * c.k + j)] ^ 0x8000;
    }
  }
  h.scale_ld = cuda::act_scale_ld(c.rows);
  const Dev<uint16_t> dx(x);
  Dev<uint8_t> codes(std::vector<uint8_t>(static_cast<size_t>(c.rows * c.k)));
  Dev<float> scales(std::vector<float>(static_cast<size_t>(c.k / 128 * h.scale_ld), 0.0f));
  cuda::quantize_act(dx.p, c.rows, c.k, c.k, codes.p, scales.p, h.scale_ld, nullptr);
  h.codes = codes.get();
  h.scales = scales.get();
  h.x = x;
  const int copies = c.weights() * (c.pair ? 2 : 1);
  h.w.resize(static_cast<size_t>(copies * c.weight_bytes()));
  h.ws.resize(static_cast<size_t>(copies * c.scale_bytes()));
  for (auto& b : h.w) b = c.kind == GemmWeightKind::kFp8 ? random_fp8(rng) : static_cast<uint8_t>(rng());
  for (auto& s : h.ws) s = static_cast<uint8_t>(127 - c.scale_span / 2 + static_cast<int>(rng() % c.scale_span));
  if (c.cancel) {  // each weight row's second half repeats its first
    const int64_t row_bytes = c.weight_bytes() / c.n, half = row_bytes / 2;
    for (int64_t r = 0; r < static_cast<int64_t>(h.w.size()) / row_bytes; ++r) {
      std::copy_n(h.w.begin() + r * row_bytes, half, h.w.begin() + r * row_bytes + half);
    }
    const int64_t srow = c.kind == GemmWeightKind::kFp8 ? c.kg() / 128 : c.kg() / 32, shalf = srow / 2;
    for (int64_t r = 0; r < static_cast<int64_t>(h.ws.size()) / srow; ++r) {
      std::copy_n(h.ws.begin() + r * srow, shalf, h.ws.begin() + r * srow + shalf);
    }
  }
  return h;
}

// |codes|: the sign bits cleared (e4m3 bytes; packed e2m1 nibbles).
std::vector<uint8_t> abs_codes(const std::vector<uint8_t>& v, bool fp4) {
  std::vector<uint8_t> out(v);
  for (auto& b : out) b &= fp4 ? 0x77 : 0x7f;
  return out;
}

// The inputs as a fast kernel with the mutation's bug would see them.
HostInputs mutate(const Case& c, HostInputs h, Mutation m) {
  const int64_t nkb = c.k / 128;
  switch (m) {
    case Mutation::kNone:
    case Mutation::kGroupStride:
      break;
    case Mutation::kDropBlock:  // K block 1 skipped
      for (int64_t r = 0; r < c.rows; ++r) std::fill_n(h.codes.begin() + r * c.k + 128, 128, uint8_t{0});
      break;
    case Mutation::kScaleIndex: {  // weight scales read one block off
      const int64_t srow = c.kind == GemmWeightKind::kFp8 ? c.kg() / 128 : c.kg() / 32;
      for (int64_t r = 0; r < static_cast<int64_t>(h.ws.size()) / srow; ++r) {
        std::rotate(h.ws.begin() + r * srow, h.ws.begin() + r * srow + 1, h.ws.begin() + (r + 1) * srow);
      }
      break;
    }
    case Mutation::kRowScale:  // each row takes its neighbour's activation scales
      for (int64_t kb = 0; kb < nkb; ++kb) {
        for (int64_t r = 0; r + 1 < c.rows; r += 2)
          std::swap(h.scales[kb * h.scale_ld + r], h.scales[kb * h.scale_ld + r + 1]);
      }
      break;
    case Mutation::kKTail:  // the last K block's contribution lost
      for (int64_t r = 0; r < c.rows; ++r) h.scales[(nkb - 1) * h.scale_ld + r] = 0.0f;
      break;
  }
  return h;
}

// Device copies of inputs and the block-GEMM arguments that read them.
struct DevInputs {
  Dev<uint8_t> codes, w, ws;
  Dev<float> scales;
  Dev<int32_t> offsets;
  std::vector<const void*> wp, wpb;
  std::vector<const uint8_t*> sp, spb;
  Dev<const void*> dwp, dwpb;
  Dev<const uint8_t*> dsp, dspb;

  static std::vector<const void*> ptrs(const Case& c, const uint8_t* base, int half) {
    std::vector<const void*> p;
    for (int e = 0; e < c.weights(); ++e) p.push_back(base + (half * c.weights() + e) * c.weight_bytes());
    return p;
  }
  static std::vector<const uint8_t*> sptrs(const Case& c, const uint8_t* base, int half) {
    std::vector<const uint8_t*> p;
    for (int e = 0; e < c.weights(); ++e) p.push_back(base + (half * c.weights() + e) * c.scale_bytes());
    return p;
  }
  DevInputs(const Case& c, const HostInputs& h, const std::vector<int32_t>& offs)
      : codes(h.codes),
        w(h.w),
        ws(h.ws),
        scales(h.scales),
        offsets(offs.empty() ? std::vector<int32_t>{0} : offs),
        wp(ptrs(c, w.p, 0)),
        wpb(ptrs(c, w.p, c.pair ? 1 : 0)),
        sp(sptrs(c, ws.p, 0)),
        spb(sptrs(c, ws.p, c.pair ? 1 : 0)),
        dwp(wp),
        dwpb(wpb),
        dsp(sp),
        dspb(spb) {}

  ExactBlockArgs args(const Case& c, int64_t scale_ld, void* y, void* y_b, bool f32) const {
    ExactBlockArgs p;
    p.kind = c.kind;
    p.codes = codes.p, p.codes_ld = c.k, p.scales = scales.p, p.scale_ld = scale_ld;
    p.rows = c.rows, p.n = c.n, p.ng = c.ng(), p.kg = c.kg(), p.groups = c.groups;
    if (c.experts() > 0) {
      p.offsets = offsets.p, p.experts = c.experts();
      p.w_list = dwp.p, p.w_scale_list = dsp.p;
      p.w_list_b = c.pair ? dwpb.p : nullptr, p.w_scale_list_b = c.pair ? dspb.p : nullptr;
    } else {
      p.w = wp[0], p.w_scale = sp[0];
      p.w_b = c.pair ? wpb[0] : nullptr, p.w_scale_b = c.pair ? spb[0] : nullptr;
    }
    p.y = y, p.y_b = c.pair ? y_b : nullptr, p.y_ld = c.n, p.y_f32 = f32;
    return p;
  }
};

// The exact kernel's fp32 outputs (both halves of a pair, back to back).
std::vector<float> exact_f32(const Case& c, const DevInputs& d, int64_t scale_ld) {
  const size_t per = static_cast<size_t>(c.rows * c.n);
  Dev<float> y(std::vector<float>(2 * per, 0.0f));
  ExactBlockArgs p = d.args(c, scale_ld, y.p, y.p + per, true);
  const cuda::GemmPolicy exact;
  const cuda::SplitNeed need = cuda::exact_block_split_need(p, exact);
  Dev<float> partial(std::vector<float>(static_cast<size_t>(std::max<int64_t>(need.floats, 1))));
  Dev<int32_t> counters(std::vector<int32_t>(static_cast<size_t>(std::max<int64_t>(need.counters, 1)), 0));
  p.partial = partial.p, p.partial_floats = need.floats, p.counters = counters.p, p.counter_count = need.counters;
  cuda::exact_block_gemm(p, exact, nullptr);
  return y.get();
}

// Output buffers for both halves of a case, poisoned (bf16 kPoison, or fp32 NaN where T is float).
template <typename T>
Dev<T> poisoned(const Case& c) {
  T poison;
  if constexpr (std::is_same_v<T, float>) {
    poison = std::numeric_limits<float>::quiet_NaN();
  } else {
    poison = kPoison;
  }
  return Dev<T>(std::vector<T>(static_cast<size_t>(2 * c.rows * c.n), poison));
}

// The wgmma kernel's outputs, poisoned before the run; its error bits in *err (else expected 0).
template <typename T>
std::vector<T> wgmma_run(const Case& c, const DevInputs& d, int64_t scale_ld, int32_t* err = nullptr) {
  Dev<T> y = poisoned<T>(c);
  const ExactBlockArgs p = d.args(c, scale_ld, y.p, y.p + c.rows * c.n, std::is_same_v<T, float>);
  Dev<int32_t> bits(std::vector<int32_t>{0});
  EXPECT_TRUE(cuda::wgmma_takes(p)) << c.name;
  cuda::wgmma_gemm(p, bits.p, nullptr);
  DSV4_CUDA_CHECK(cudaGetLastError());
  const int32_t got = bits.get()[0];
  if (err) {
    *err = got;
  } else {
    EXPECT_EQ(got, 0) << c.name << ": error bits";
  }
  return y.get();
}

// The swapped wgmma kernel's outputs in `splits` K splits, poisoned before the run.
template <typename T>
std::vector<T> wgmma_few_run(const Case& c, const DevInputs& d, int64_t scale_ld, int splits) {
  Dev<T> y = poisoned<T>(c);
  const ExactBlockArgs p = d.args(c, scale_ld, y.p, y.p + c.rows * c.n, std::is_same_v<T, float>);
  EXPECT_TRUE(cuda::wgmma_few_takes(p)) << c.name;
  cuda::wgmma_few_gemm(p, splits, nullptr);
  DSV4_CUDA_CHECK(cudaGetLastError());
  return y.get();
}

// The few-row kernel's outputs from the codes, or from the bf16 rows x where given (dense calls),
// poisoned before the run. The offsets were uploaded before: settled (a grouped call then starts before its
// wait), unless told otherwise.
template <typename T>
std::vector<T> gemv_run(const Case& c, const DevInputs& d, int64_t scale_ld, cuda::GemvShape shape,
                        const uint16_t* x = nullptr, bool settled = true) {
  Dev<T> y = poisoned<T>(c);
  ExactBlockArgs p = d.args(c, scale_ld, y.p, y.p + c.rows * c.n, std::is_same_v<T, float>);
  p.offsets_settled = settled;
  if (x) p.x = x, p.x_ld = c.k, p.codes = nullptr, p.scales = nullptr;
  EXPECT_TRUE(cuda::fast_gemv_takes(p)) << c.name;
  cuda::fast_gemv(p, shape, nullptr);
  DSV4_CUDA_CHECK(cudaGetLastError());
  return y.get();
}

// The fast kernel's outputs (bf16, or fp32 where T is float), poisoned before the run.
template <typename T>
std::vector<T> fast_run(const Case& c, const DevInputs& d, int64_t scale_ld, const cuda::FastMmaShape& s) {
  constexpr bool f32 = std::is_same_v<T, float>;
  Dev<T> y = poisoned<T>(c);
  const ExactBlockArgs p = d.args(c, scale_ld, y.p, y.p + c.rows * c.n, f32);
  Dev<float> partial(
      std::vector<float>(static_cast<size_t>(std::max<int64_t>(cuda::fast_mma_scratch_floats(p, s), 1))));
  Dev<int32_t> counters(
      std::vector<int32_t>(static_cast<size_t>(std::max<int64_t>(cuda::fast_mma_counters(p, s), 1)), 0));
  cuda::fast_mma_gemm(p, s, partial.p, counters.p, nullptr);
  DSV4_CUDA_CHECK(cudaGetLastError());
  const std::vector<int32_t> left = counters.get();
  EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](int32_t v) { return v == 0; }))
      << c.name << ": counters left set";
  return y.get();
}

double ulp_bf16(double x) {
  const double a = std::fabs(x);
  return a < 0x1p-126 ? 0x1p-133 : std::exp2(std::floor(std::log2(a)) - 7);
}

struct Verdict {
  int64_t outside = 0;     // outputs past the element bound
  int64_t untouched = 0;   // outputs the kernel should have written and did not
  int64_t stray = 0;       // rows past the experts' that it wrote
  double worst_ratio = 0;  // largest |y - x| / A
  double worst_tile = 0;   // largest tile calc_diff
  bool passes() const { return outside == 0 && untouched == 0 && stray == 0 && worst_tile <= kTileCalcDiff; }
};

// A tile's calc_diff is judged where its exact sums do not cancel away: rms(x) >= 2^-10 rms(A) (the
// element bound judges every output, cancelling ones included).
Verdict judge(const Case& c, const std::vector<float>& x, const std::vector<float>& a, const std::vector<uint16_t>& y,
              const std::vector<float>& y32 = {}) {
  Verdict v;
  const int64_t halves = c.pair ? 2 : 1, lo = c.offsets.empty() ? 0 : c.offsets.front();
  const int64_t hi = c.offsets.empty() ? c.rows : c.offsets.back();
  for (int64_t h = 0; h < halves; ++h) {
    for (int64_t rt = 0; rt < c.rows; rt += 128) {
      for (int64_t ct = 0; ct < c.n; ct += 128) {
        double sxy = 0, sxx = 0, s_x = 0, s_a = 0;
        for (int64_t r = rt; r < std::min(rt + 128, c.rows); ++r) {
          for (int64_t col = ct; col < std::min(ct + 128, c.n); ++col) {
            const size_t i = static_cast<size_t>((h * c.rows + r) * c.n + col);
            if (r < lo || r >= hi) {
              v.stray += y[i] != kPoison;
              continue;
            }
            if (y[i] == kPoison) {
              ++v.untouched;
              continue;
            }
            const double yv = bf16_to_float(y[i]), xv = x[i], av = a[i];
            const double err = std::fabs(yv - xv);
            if (!(err <= ulp_bf16(xv) + 0x1p-10 * av)) ++v.outside;
            if (av > 0 && !y32.empty()) v.worst_ratio = std::max(v.worst_ratio, std::fabs(y32[i] - xv) / av);
            sxy += xv * yv;
            sxx += xv * xv + yv * yv;
            s_x += xv * xv;
            s_a += av * av;
          }
        }
        if (sxx > 0 && s_x >= 0x1p-20 * s_a) v.worst_tile = std::max(v.worst_tile, 1.0 - 2.0 * sxy / sxx);
      }
    }
  }
  return v;
}

// A case's inputs and the exact kernel's x and A for them, made once for every fast run.
struct Oracle {
  HostInputs h;
  std::vector<float> x, a;
  Oracle(const Case& c, uint32_t seed) : h(make_inputs(c, seed)) {
    const DevInputs exact(c, h, c.offsets);
    HostInputs habs = h;
    habs.codes = abs_codes(h.codes, false);
    habs.w = abs_codes(h.w, c.kind == GemmWeightKind::kFp4);
    const DevInputs absd(c, habs, c.offsets);
    x = exact_f32(c, exact, h.scale_ld);
    a = exact_f32(c, absd, h.scale_ld);
  }
};

// The mma.sync kernel (with shape s) or the wgmma kernel (s ignored) on a case under one mutation,
// judged against the exact kernel.
enum class Kernel { kMma, kWgmma, kGemv, kWgmmaFew };
// gemv_k_parts: the few-row kernel's K runs, or the swapped wgmma kernel's K splits.
Verdict run_fast(const Case& c, const Oracle& o, Mutation m, const cuda::FastMmaShape& s, bool twice = false,
                 Kernel kernel = Kernel::kMma, int gemv_k_parts = 2) {
  std::vector<int32_t> offs = c.offsets;
  if (m == Mutation::kGroupStride) offs[offs.size() / 2] += 1;  // one expert boundary a row off
  const DevInputs fast(c, mutate(c, o.h, m), offs);
  auto run = [&]<typename T>(T) {
    switch (kernel) {
      case Kernel::kWgmma:
        return wgmma_run<T>(c, fast, o.h.scale_ld);
      case Kernel::kGemv:
        return gemv_run<T>(c, fast, o.h.scale_ld, {gemv_k_parts});
      case Kernel::kWgmmaFew:
        return wgmma_few_run<T>(c, fast, o.h.scale_ld, gemv_k_parts);
      default:
        return fast_run<T>(c, fast, o.h.scale_ld, s);
    }
  };
  const std::vector<uint16_t> y = run(uint16_t{});
  if (twice) {
    EXPECT_TRUE(run(uint16_t{}) == y) << c.name << ": not the same bits run to run";
  }
  return judge(c, o.x, o.a, y, run(0.0f));
}

std::vector<Case> cases() {
  const auto fp8 = GemmWeightKind::kFp8, fp4 = GemmWeightKind::kFp4;
  return {
      dense("fp8 wo_b b1", fp8, 1, 4096, 8192),
      dense("fp8 8x2048x1024", fp8, 8, 2048, 1024),
      dense("fp8 13x1100x1024 (N off the grid)", fp8, 13, 1100, 1024),
      dense("fp8 33x4096x4096", fp8, 33, 4096, 4096),
      dense("fp8 100x1536x2048", fp8, 100, 1536, 2048),
      dense("fp8 300x2048x1024", fp8, 300, 2048, 1024),
      dense("fp8 groups 2x256", fp8, 5, 512, 2048, 2),
      dense("fp8 cancelling 16x1024x2048", fp8, 16, 1024, 2048, 1, true),
      dense("fp4 1x4096x2048", fp4, 1, 4096, 2048),
      dense("fp4 21x2000x4096", fp4, 21, 2000, 4096),
      dense("fp4 cancelling 9x512x1024", fp4, 9, 512, 1024, 1, true),
      experts("fp4 experts decode pair", fp4, {1, 0, 0, 1, 1, 0, 2, 1, 0, 1, 0, 1}, 2048, 4096, true),
      experts("fp4 experts 0..40 rows", fp4, {0, 40, 3, 0, 17, 8, 1, 33}, 1024, 2048, false, 5),
      experts("fp4 experts prefill pair", fp4, {700, 0, 1100, 250}, 2048, 4096, true),
      experts("fp8 experts", fp8, {5, 20, 0, 9}, 1024, 2048, true),
  };
}

TEST(CudaGemmFast, EveryTileAndSplitPassesTheOpGate) {
  uint32_t seed = 100;
  for (const Case& c : cases()) {
    cuda::GemmProblem prob{c.kind, c.rows, c.experts(), c.n, c.kg(), c.groups, c.pair};
    const cuda::GemmPlan plan = cuda::plan_fast_mma(prob, cuda::GemmPolicy{Numerics::kFast}, cuda::DeviceCaps{});
    std::vector<cuda::FastMmaShape> shapes = {{plan.tile_rows, plan.splits, plan.resident}};
    for (int tile : {8, 16, 32}) {
      for (int splits : {1, static_cast<int>(std::min<int64_t>(3, c.kg() / 128))}) {
        shapes.push_back({tile, splits, false});
        const int64_t nk = (c.kg() / 128 + splits - 1) / splits;
        if (tile * cuda::fast_mma_resident_pitch(c.kind, nk) <= cuda::kFastMmaResidentBytes) {
          shapes.push_back({tile, splits, true});
        }
      }
    }
    const Oracle o(c, ++seed);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const cuda::FastMmaShape& s = shapes[i];
      const Verdict v = run_fast(c, o, Mutation::kNone, s, i == 0);
      std::printf("[ fast-mma ] %-36s tile %2d split %2d %s: max |y-x|/A %.3e, worst tile calc_diff %.3e\n",
                  c.name.c_str(), s.tile_rows, s.splits, s.resident ? "resident" : "staged  ", v.worst_ratio,
                  v.worst_tile);
      EXPECT_TRUE(v.passes()) << c.name << " tile " << s.tile_rows << " split " << s.splits << ": " << v.outside
                              << " outside the bound, " << v.untouched << " unwritten, " << v.stray
                              << " stray writes, tile calc_diff " << v.worst_tile;
    }
  }
}

TEST(CudaGemmFast, TheGateFailsEachMutation) {
  const auto fp8 = GemmWeightKind::kFp8, fp4 = GemmWeightKind::kFp4;
  const Case dense8 = dense("fp8 mutations", fp8, 16, 512, 1024);
  const Case dense4 = dense("fp4 mutations", fp4, 16, 512, 1024);
  const Case grouped = experts("fp4 experts mutations", fp4, {16, 16, 16}, 512, 1024, false);
  uint32_t seed = 900;
  for (const Case* c : {&dense8, &dense4, &grouped}) {
    const Oracle o(*c, ++seed);
    // Two shapes of the mma.sync kernel, then the wgmma and few-row kernels (which take no shape), and the
    // swapped wgmma kernel on the dense FP8 call (two K splits).
    const std::pair<cuda::FastMmaShape, Kernel> runs[] = {{{16, 1, false}, Kernel::kMma},
                                                          {{16, 2, true}, Kernel::kMma},
                                                          {{}, Kernel::kWgmma},
                                                          {{}, Kernel::kGemv},
                                                          {{}, Kernel::kWgmmaFew}};
    for (const auto& [s, kernel] : runs) {
      if (kernel == Kernel::kWgmmaFew && c != &dense8) continue;
      EXPECT_TRUE(run_fast(*c, o, Mutation::kNone, s, false, kernel).passes()) << c->name << ": the unmutated run";
      for (Mutation m : {Mutation::kDropBlock, Mutation::kScaleIndex, Mutation::kRowScale, Mutation::kKTail}) {
        const Verdict v = run_fast(*c, o, m, s, false, kernel);
        EXPECT_FALSE(v.passes()) << c->name << ": mutation " << static_cast<int>(m) << " passed the gate";
      }
      if (c == &grouped) {
        EXPECT_FALSE(run_fast(*c, o, Mutation::kGroupStride, s, false, kernel).passes())
            << "a wrong group stride passed";
      }
    }
  }
}

// The wgmma kernel (many rows a weight) on dense and grouped calls, FP8 and FP4, with weight scales
// spread up to the 26 octaves its FP4 re-encoding keeps exact; run twice for the same bits.
TEST(CudaGemmFast, WgmmaPassesTheOpGate) {
  const auto fp8 = GemmWeightKind::kFp8, fp4 = GemmWeightKind::kFp4;
  Case wide = experts("fp4 experts, scales over 26 octaves", fp4, {130, 0, 300, 77}, 1024, 2048, false, 3);
  wide.scale_span = 27;
  const std::vector<Case> list = {
      experts("fp4 experts prefill pair", fp4, {700, 0, 1100, 250}, 2048, 4096, true),
      experts("fp4 experts 0..300 rows", fp4, {0, 40, 3, 0, 300, 8, 129, 128}, 1024, 2048, false, 5),
      experts("fp8 experts pair", fp8, {300, 5, 0, 129}, 1024, 2048, true),
      wide,
      dense("fp8 300x2048x1024", fp8, 300, 2048, 1024),
      dense("fp8 13x1100x1024 (N off the grid)", fp8, 13, 1100, 1024),
      dense("fp8 cancelling 200x1024x2048", fp8, 200, 1024, 2048, 1, true),
      dense("fp4 1001x1536x2048", fp4, 1001, 1536, 2048),
      dense("fp4 cancelling 129x512x1024", fp4, 129, 512, 1024, 1, true),
  };
  uint32_t seed = 3000;
  for (const Case& c : list) {
    const Oracle o(c, ++seed);
    const Verdict v = run_fast(c, o, Mutation::kNone, {}, true, Kernel::kWgmma);
    std::printf("[ wgmma ] %-40s max |y-x|/A %.3e, worst tile calc_diff %.3e\n", c.name.c_str(), v.worst_ratio,
                v.worst_tile);
    EXPECT_TRUE(v.passes()) << c.name << ": " << v.outside << " outside the bound, " << v.untouched << " unwritten, "
                            << v.stray << " stray writes, tile calc_diff " << v.worst_tile;
  }
}

// The swapped wgmma kernel (a decode batch of a dense FP8 weight) at V4-Flash's shapes and off them: rows
// of each N (16, 32, 64) and between, every K split from one to eight (one cluster a tile), cancelling
// sums; twice for the same bits; bf16 and fp32 outputs.
TEST(CudaGemmFast, WgmmaFewPassesTheOpGate) {
  const auto fp8 = GemmWeightKind::kFp8;
  const std::vector<Case> list = {
      dense("fp8 wq_b b32", fp8, 32, 32768, 1024), dense("fp8 wo_b b16", fp8, 16, 4096, 8192),
      dense("fp8 wq_a b64", fp8, 64, 1024, 4096),  dense("fp8 shared_w2 b9", fp8, 9, 4096, 2048),
      dense("fp8 wkv b33", fp8, 33, 512, 4096),    dense("fp8 17x256x1024", fp8, 17, 256, 1024),
      dense("fp8 1x384x384", fp8, 1, 384, 384),    dense("fp8 cancelling 24x1024x2048", fp8, 24, 1024, 2048, 1, true),
  };
  uint32_t seed = 6000;
  for (const Case& c : list) {
    const Oracle o(c, ++seed);
    const int most = static_cast<int>(std::min<int64_t>(cuda::kWgmmaFewMaxSplits, c.kg() / 128));
    for (int splits = 1; splits <= most; splits = splits == most ? most + 1 : std::min(2 * splits + 1, most)) {
      const Verdict v = run_fast(c, o, Mutation::kNone, {}, true, Kernel::kWgmmaFew, splits);
      std::printf("[ wgmma-few ] %-36s splits %d: max |y-x|/A %.3e, worst tile calc_diff %.3e\n", c.name.c_str(),
                  splits, v.worst_ratio, v.worst_tile);
      EXPECT_TRUE(v.passes()) << c.name << " splits " << splits << ": " << v.outside << " outside the bound, "
                              << v.untouched << " unwritten, " << v.stray << " stray writes, tile calc_diff "
                              << v.worst_tile;
    }
  }
}

// The few-row kernel (decode) on dense and grouped calls, FP8 and FP4, every K split of a CTA (K of
// 1 to 64 blocks), rows in one tile and in many, N off the grid; twice for the same bits; several column
// tiles a CTA (up to all of them) with the bits of one; grouped calls
// started before the wait (settled offsets) and after it, the same bits. Dense calls
// also from their bf16 rows, quantized in the kernel: the same bits as from quantize_act's codes.
TEST(CudaGemmFast, GemvPassesTheOpGate) {
  const auto fp8 = GemmWeightKind::kFp8, fp4 = GemmWeightKind::kFp4;
  std::vector<int32_t> spread(256, 0);  // a decode step's six pairs over 256 experts
  for (int e : {3, 70, 71, 128, 200, 255}) spread[e] = 1;
  std::vector<Case> list = cases();  // the mma.sync kernel's cases (many rows: many tiles), and decode's
  list.push_back(dense("fp8 wq_b b2", fp8, 2, 32768, 1024));
  list.push_back(dense("fp8 3x1024x4096", fp8, 3, 1024, 4096));
  list.push_back(dense("fp8 2x256x256 (two blocks)", fp8, 2, 256, 256));
  list.push_back(dense("fp8 5x384x128 (one block)", fp8, 5, 384, 128));
  list.push_back(dense("fp4 7x2000x4096", fp4, 7, 2000, 4096));
  list.push_back(experts("fp4 256 experts, six rows", fp4, spread, 4096, 2048, false));
  std::vector<int32_t> b32(32);  // b32's 192 routed rows over 32 experts: 0 to 12 rows an expert
  for (size_t e = 0; e < b32.size(); ++e) b32[e] = static_cast<int32_t>((e * 7 + 3) % 13);
  list.push_back(experts("fp4 32 experts, b32 pair", fp4, b32, 2048, 4096, true));
  std::vector<int32_t> b64(32);  // b64's 384 routed rows: 0 to 24 rows an expert (up to three tiles)
  for (size_t e = 0; e < b64.size(); ++e) b64[e] = static_cast<int32_t>((e * 7 + 3) % 25);
  list.push_back(experts("fp4 32 experts, b64 w2", fp4, b64, 4096, 2048, false));
  uint32_t seed = 5000;
  for (const Case& c : list) {
    const Oracle o(c, ++seed);
    for (int parts : {1, 2, 4, 8}) {
      const Verdict v = run_fast(c, o, Mutation::kNone, {}, parts == 1, Kernel::kGemv, parts);
      std::printf("[ gemv ] %-46s K runs %d: max |y-x|/A %.3e, worst tile calc_diff %.3e\n", c.name.c_str(), parts,
                  v.worst_ratio, v.worst_tile);
      EXPECT_TRUE(v.passes()) << c.name << " K runs " << parts << ": " << v.outside << " outside the bound, "
                              << v.untouched << " unwritten, " << v.stray << " stray writes, tile calc_diff "
                              << v.worst_tile;
    }
    const DevInputs d(c, o.h, c.offsets);
    for (int parts : {1, 4}) {
      EXPECT_TRUE(gemv_run<uint16_t>(c, d, o.h.scale_ld, {parts}) ==
                  gemv_run<uint16_t>(c, d, o.h.scale_ld, {parts}, nullptr, false))
          << c.name << " K runs " << parts << ": the early start changed the bits";
    }
    for (int parts : {2, 4}) {  // column tiles a CTA in turn: the same sums, every tile written
      if (c.groups != 1 || c.kg() / 128 % (parts * cuda::kFastGemvDepth) != 0) continue;
      const std::vector<uint16_t> one = gemv_run<uint16_t>(c, d, o.h.scale_ld, {parts});
      for (int items : {2, 3, 1000}) {
        EXPECT_TRUE(gemv_run<uint16_t>(c, d, o.h.scale_ld, {parts, items}) == one)
            << c.name << " K runs " << parts << ", " << items << " column tiles a CTA: not one's bits";
      }
    }
    if (c.experts() > 0) continue;
    const Dev<uint16_t> x(o.h.x);
    const cuda::GemvShape shape{4};
    EXPECT_TRUE(gemv_run<uint16_t>(c, d, o.h.scale_ld, shape, x.p) == gemv_run<uint16_t>(c, d, o.h.scale_ld, shape))
        << c.name << ": bf16 rows and codes differ (bf16 out)";
    const std::vector<float> from_x = gemv_run<float>(c, d, o.h.scale_ld, shape, x.p);
    const std::vector<float> from_codes = gemv_run<float>(c, d, o.h.scale_ld, shape);  // NaN poison: compare bits
    EXPECT_EQ(std::memcmp(from_x.data(), from_codes.data(), from_x.size() * sizeof(float)), 0)
        << c.name << ": bf16 rows and codes differ (fp32 out)";
  }
}

// A grouped call whose offsets the kernel just before it writes (not settled) reads them only after its
// wait: offsets landing late over a stale layout (every row on expert 0) still give the tiles of the
// settled run.
TEST(CudaGemmFast, GemvReadsUnsettledOffsetsAfterTheWait) {
  const Case c =
      experts("fp4 experts decode pair", GemmWeightKind::kFp4, {1, 0, 0, 1, 1, 0, 2, 1, 0, 1, 0, 1}, 2048, 4096, true);
  const HostInputs h = make_inputs(c, 6100);
  const DevInputs d(c, h, c.offsets);
  const std::vector<uint16_t> want = gemv_run<uint16_t>(c, d, h.scale_ld, {4});
  std::vector<int32_t> stale_offsets(c.offsets.size(), static_cast<int32_t>(c.rows));
  stale_offsets[0] = 0;
  cudaStream_t stream = nullptr;
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Dev<int32_t> offsets(stale_offsets);
  Dev<uint16_t> y = poisoned<uint16_t>(c);
  ExactBlockArgs p = d.args(c, h.scale_ld, y.p, y.p + c.rows * c.n, false);
  p.offsets = offsets.p;
  gputest::late_copy(offsets.p, d.offsets.p, c.offsets.size() * sizeof(int32_t), 50, stream);
  cuda::fast_gemv(p, {4}, stream);
  DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(y.get() == want) << "the tiles of offsets read before they landed";
  DSV4_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The wgmma kernel with FP4 weights widened beforehand (GemmPolicy::fp4_prewiden) against the kernel
// widening them in shared memory: the same codes, scales and sums, so the same bits (bf16 and fp32
// outputs) in passes of one, three or every expert, and the same error report past the span.
TEST(CudaGemmFast, WgmmaWidenedBeforehandGivesTheSameBits) {
  const auto fp4 = GemmWeightKind::kFp4;
  Case wide = experts("fp4 experts, scales over 26 octaves", fp4, {130, 0, 300, 77}, 1024, 2048, false, 3);
  wide.scale_span = 27;
  const std::vector<Case> list = {
      experts("fp4 experts prefill pair", fp4, {700, 0, 1100, 250, 0, 64, 1}, 2048, 4096, true),
      wide,
      dense("fp4 1001x1536x2048", fp4, 1001, 1536, 2048),
      dense("fp4 300x1100x1024 (N off the grid)", fp4, 300, 1100, 1024),
  };
  uint32_t seed = 7000;
  for (const Case& c : list) {
    const HostInputs h = make_inputs(c, ++seed);
    const DevInputs d(c, h, c.offsets);
    const auto want = wgmma_run<uint16_t>(c, d, h.scale_ld);
    const auto want_f32 = wgmma_run<float>(c, d, h.scale_ld);
    for (const int per : {1, 3, 64}) {
      SCOPED_TRACE(testing::Message() << c.name << ", " << per << " experts a pass");
      for (const bool f32 : {false, true}) {
        Dev<uint16_t> y16 = poisoned<uint16_t>(c);
        Dev<float> y32 = poisoned<float>(c);
        void* y = f32 ? static_cast<void*>(y32.p) : static_cast<void*>(y16.p);
        const size_t half = static_cast<size_t>(c.rows * c.n) * (f32 ? 4 : 2);
        const ExactBlockArgs p = d.args(c, h.scale_ld, y, static_cast<char*>(y) + half, f32);
        Dev<uint8_t> scratch(std::vector<uint8_t>(static_cast<size_t>(cuda::wgmma_widened_bytes(p, per)), 0xff));
        Dev<int32_t> err_bits(std::vector<int32_t>{0});
        cuda::wgmma_gemm_widened(p, per, scratch.p, err_bits.p, nullptr);
        DSV4_CUDA_CHECK(cudaGetLastError());
        EXPECT_EQ(err_bits.get()[0], 0);
        if (f32) {
          EXPECT_EQ(bits(y32.get()), bits(want_f32));
        } else {
          EXPECT_EQ(y16.get(), want);
        }
      }
    }
  }
  // Past the span: reported as the shared-memory widening reports it.
  Case c = dense("fp4 span", fp4, 130, 256, 1024);
  HostInputs h = make_inputs(c, 77);
  h.ws[5 * (c.k / 32) + 4] = 100, h.ws[5 * (c.k / 32) + 5] = 127;  // row 5, block 1: 27 octaves
  const DevInputs d(c, h, c.offsets);
  Dev<uint16_t> y = poisoned<uint16_t>(c);
  const ExactBlockArgs p = d.args(c, h.scale_ld, y.p, y.p + c.rows * c.n, false);
  Dev<uint8_t> scratch(std::vector<uint8_t>(static_cast<size_t>(cuda::wgmma_widened_bytes(p, 1))));
  Dev<int32_t> err_bits(std::vector<int32_t>{0});
  cuda::wgmma_gemm_widened(p, 1, scratch.p, err_bits.p, nullptr);
  EXPECT_EQ(err_bits.get()[0], static_cast<int32_t>(cuda::DeviceError::kGemmFp4Span));
  int32_t err = 0;
  EXPECT_EQ(y.get(), wgmma_run<uint16_t>(c, d, h.scale_ld, &err));
}

// A grouped FP4 case through the runner (bf16 out, poisoned first); the route's slack rows past the
// experts' (GroupedGemmArgs::row_slack) poisoned again, so that the judge sees only rows it must not touch.
// side_by_side (a pair): y and y_b interleaved a row (y_b = y + n, y_ld = 2n), returned apart.
// checked, same_offsets: what the caller tells the route (GroupedGemmArgs::reencode_checked, same_offsets).
std::vector<uint16_t> runner_run(cuda::GemmRunner& runner, const Case& c, const DevInputs& d, int64_t scale_ld,
                                 bool side_by_side = false, bool checked = false, bool same_offsets = false) {
  constexpr int kSlack = 3;
  Dev<uint16_t> y = poisoned<uint16_t>(c);
  cuda::GroupedGemmArgs a;
  a.a_codes = d.codes.p, a.a_scales = d.scales.p, a.scale_ld = scale_ld;
  a.rows = c.rows, a.n = c.n, a.k = c.k, a.experts = c.experts(), a.offsets = d.offsets.p, a.kind = c.kind;
  a.w_data = d.dwp.p, a.w_scale = d.dsp.p, a.y = y.p;
  if (c.pair) a.w_data_b = d.dwpb.p, a.w_scale_b = d.dspb.p, a.y_b = y.p + (side_by_side ? c.n : c.rows * c.n);
  if (c.pair && side_by_side) a.y_ld = 2 * c.n;
  a.row_slack = kSlack;
  a.reencode_checked = checked, a.same_offsets = same_offsets;
  runner.grouped(a);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out = y.get();
  if (c.pair && side_by_side) {
    const std::vector<uint16_t> rows = out;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int h = 0; h < 2; ++h)
        std::copy_n(rows.begin() + (2 * r + h) * c.n, c.n, out.begin() + (h * c.rows + r) * c.n);
  }
  const int64_t end = c.offsets.back();
  for (int h = 0; h < (c.pair ? 2 : 1); ++h) {
    for (int64_t r = end; r < std::min<int64_t>(end + kSlack, c.rows); ++r) {
      std::fill_n(out.begin() + (h * c.rows + r) * c.n, c.n, kPoison);
    }
  }
  return out;
}

// The routed FP4 experts as one cuBLASLt matmul an expert (GemmRoute::kCublasLtExperts), weights
// re-encoded to e4m3 per 128x128 block: the op gate against the exact kernel, the same bits twice (the
// matmuls on one stream, and on three), the route taken (the runner's stats), rows past the slack
// untouched. Scales spanning 14 octaves in a block
// (the most the re-encoding keeps exact) take the route; 15 take the wgmma kernel and pass as well.
// Mutated inputs (scales a row or a block off) fail the gate on this route.
TEST(CudaGemmFast, CublasLtExpertsPassTheOpGate) {
  const auto fp4 = GemmWeightKind::kFp4;
  cuda::GemmPolicy policy{Numerics::kFast};
  policy.wgmma_min_rows = 1, policy.lt_experts_min_rows = 1, policy.lt_expert_streams = 1;
  policy.lt_experts_resident = false;  // re-encoded each call (kept: CudaMoeExperts.Fp4ExpertsOnCublasLtMatchCpu)
  Case wide = experts("fp4 experts, scales over 15 octaves", fp4, {130, 0, 300, 77}, 1024, 2048, false, 3);
  wide.scale_span = 16;
  struct Run {
    Case c;
    bool on_lt;
  };
  const std::vector<Run> list = {
      {experts("fp4 experts prefill pair", fp4, {700, 0, 1100, 250, 0, 64, 1}, 2048, 4096, true, 3), true},
      {experts("fp4 experts 0..300 rows, 14 octaves", fp4, {0, 40, 3, 0, 300, 8, 129, 128}, 1024, 2048, false, 8),
       true},
      {wide, false},
  };
  uint32_t seed = 9000;
  for (const Run& run : list) {
    const Case& c = run.c;
    cuda::GemmRunner runner(nullptr, policy);
    const Oracle o(c, ++seed);
    const DevInputs d(c, o.h, c.offsets);
    const std::vector<uint16_t> y = runner_run(runner, c, d, o.h.scale_ld);
    EXPECT_TRUE(runner_run(runner, c, d, o.h.scale_ld) == y) << c.name << ": not the same bits run to run";
    const Verdict v = judge(c, o.x, o.a, y);
    std::printf("[ lt-experts ] %-40s on cuBLASLt %d, worst tile calc_diff %.3e\n", c.name.c_str(),
                static_cast<int>(runner.stats().lt_expert_calls), v.worst_tile);
    EXPECT_TRUE(v.passes()) << c.name << ": " << v.outside << " outside the bound, " << v.untouched << " unwritten, "
                            << v.stray << " stray writes, tile calc_diff " << v.worst_tile;
    EXPECT_EQ(runner.stats().lt_expert_calls, run.on_lt ? 2 : 0) << c.name;
    EXPECT_EQ(runner.stats().lt_expert_fallbacks, run.on_lt ? 0 : 2) << c.name;
    EXPECT_EQ(runner.stats().lt_count_reads, 2) << c.name;  // a read a call (the fallback's too)
    {  // Every expert's blocks checked once (all of them, rows or not): exact but for the wide case.
      cuda::GroupedGemmArgs w;
      w.rows = c.rows, w.n = c.n, w.k = c.k, w.experts = c.experts(), w.offsets = d.offsets.p, w.kind = c.kind;
      w.w_data = d.dwp.p, w.w_scale = d.dsp.p;
      EXPECT_EQ(runner.fp4_experts_reencode_exactly(w), std::optional<bool>(run.on_lt)) << c.name;
    }
    if (!run.on_lt) continue;
    {  // Told the blocks re-encode exactly and the offsets are the previous call's: the same bits, the counts
       // read by the first call only; a call between (here a dense one of no rows) makes the next read again.
      cuda::GemmRunner told(nullptr, policy);
      EXPECT_TRUE(runner_run(told, c, d, o.h.scale_ld, false, true, true) == y) << c.name << ": told";
      EXPECT_TRUE(runner_run(told, c, d, o.h.scale_ld, false, true, true) == y) << c.name << ": told, again";
      EXPECT_EQ(told.stats().lt_count_reads, 1) << c.name;
      Dev<uint16_t> xy(std::vector<uint16_t>(128 * 128, 0));
      told.run({.x = xy.p, .rows = 0, .w = {GemmWeightKind::kBf16, xy.p, nullptr, 128, 128}, .y = xy.p});
      EXPECT_TRUE(runner_run(told, c, d, o.h.scale_ld, false, true, true) == y) << c.name << ": after another call";
      EXPECT_EQ(told.stats().lt_count_reads, 2) << c.name;
      EXPECT_EQ(told.stats().lt_expert_calls, 3) << c.name;
    }
    if (c.pair) {  // side by side: an expert's pair in one matmul of 2n columns (cuBLASLt may pick another
                   // algorithm for it: the gate, not the bits)
      const std::vector<uint16_t> j = runner_run(runner, c, d, o.h.scale_ld, true);
      const Verdict vj = judge(c, o.x, o.a, j);
      std::printf("[ lt-experts ] %-40s side by side: worst tile calc_diff %.3e, %s bits\n", c.name.c_str(),
                  vj.worst_tile, j == y ? "the same" : "other");
      EXPECT_TRUE(vj.passes()) << c.name << " side by side: " << vj.outside << " outside the bound, " << vj.untouched
                               << " unwritten, " << vj.stray << " stray writes";
      EXPECT_EQ(runner.stats().lt_expert_calls, 3) << c.name;
    }
    {  // Passes of one or two experts (a 5 MB budget), each re-encoded on its own stream into one of two
       // buffers while the previous pass's matmuls run: the same bits as one pass.
      cuda::GemmPolicy small = policy;
      small.widen_budget_bytes = 5 << 20;
      cuda::GemmRunner passes(nullptr, small);
      EXPECT_TRUE(runner_run(passes, c, d, o.h.scale_ld) == y) << c.name << ": passes of one or two";
      EXPECT_TRUE(runner_run(passes, c, d, o.h.scale_ld) == y) << c.name << ": again";
      EXPECT_EQ(passes.stats().lt_expert_calls, 2) << c.name;
    }
    {  // The matmuls on three streams, each expert of 4 rows or more in its own rows (its last rows by a
       // second matmul where its count is not a multiple of 4): the gate, the same bits twice.
      cuda::GemmPolicy lanes = policy;
      lanes.lt_expert_streams = 3;
      cuda::GemmRunner spread(nullptr, lanes);
      const std::vector<uint16_t> z = runner_run(spread, c, d, o.h.scale_ld);
      EXPECT_TRUE(runner_run(spread, c, d, o.h.scale_ld) == z) << c.name << ": three streams, not the same bits";
      const Verdict vz = judge(c, o.x, o.a, z);
      EXPECT_TRUE(vz.passes()) << c.name << " on three streams: " << vz.outside << " outside the bound, "
                               << vz.untouched << " unwritten, " << vz.stray << " stray writes";
      EXPECT_EQ(spread.stats().lt_expert_calls, 2) << c.name;
    }
    for (const Mutation m : {Mutation::kRowScale, Mutation::kScaleIndex, Mutation::kDropBlock}) {
      const DevInputs bad(c, mutate(c, o.h, m), c.offsets);
      EXPECT_FALSE(judge(c, o.x, o.a, runner_run(runner, c, bad, o.h.scale_ld)).passes())
          << c.name << ": mutation " << static_cast<int>(m) << " passes";
    }
  }
}

// The route's matmuls spread over streams start after their pass's widening and end before the next
// pass widens into the same scratch: at V4-Flash's expert shapes, 16 experts in two passes (a pass of
// 14 widens ~240 MB, long enough that a matmul on another stream that did not wait for it would read
// the scratch unwidened; session 35's mutant), four streams give one stream's bits (row counts that are
// multiples of 4: the same matmuls), twice.
TEST(CudaGemmFast, CublasLtExpertsOnSeveralStreamsWaitForTheirPass) {
  const Case c =
      experts("fp4 experts, two passes", GemmWeightKind::kFp4, std::vector<int32_t>(16, 96), 2048, 4096, true, 3);
  const HostInputs h = make_inputs(c, 9100);
  const DevInputs d(c, h, c.offsets);
  cuda::GemmPolicy policy{Numerics::kFast};
  policy.wgmma_min_rows = 1, policy.lt_experts_min_rows = 1, policy.lt_expert_streams = 1;
  cuda::GemmRunner one(nullptr, policy);
  const std::vector<uint16_t> want = runner_run(one, c, d, h.scale_ld);
  policy.lt_expert_streams = 4;
  cuda::GemmRunner several(nullptr, policy);
  for (int run = 0; run < 2; ++run) {
    EXPECT_TRUE(runner_run(several, c, d, h.scale_ld) == want) << "run " << run << ": four streams differ";
  }
  EXPECT_EQ(one.stats().lt_expert_calls, 1);
  EXPECT_EQ(several.stats().lt_expert_calls, 2);
}

// FP4 row blocks whose four scales span more than 26 octaves cannot be re-encoded exactly: the kernel
// says so in its error bits (and only then).
TEST(CudaGemmFast, WgmmaReportsFp4ScalesBeyondItsSpan) {
  Case c = dense("fp4 span", GemmWeightKind::kFp4, 130, 256, 1024);
  HostInputs h = make_inputs(c, 77);
  int32_t err = -1;
  (void)wgmma_run<uint16_t>(c, DevInputs(c, h, c.offsets), h.scale_ld, &err);
  EXPECT_EQ(err, 0);
  h.ws[5 * (c.k / 32) + 4] = 100, h.ws[5 * (c.k / 32) + 5] = 127;  // row 5, block 1: 27 octaves
  (void)wgmma_run<uint16_t>(c, DevInputs(c, h, c.offsets), h.scale_ld, &err);
  EXPECT_EQ(err, static_cast<int32_t>(cuda::DeviceError::kGemmFp4Span));
}

// Plain weights on the fast tier against the exact plain kernel, fp32 outputs, a pair (the
// compressor's wkv and wgate): fp32 weights on the fused multiply-add kernel, bf16 ones on cuBLASLt
// (two calls) and, with it off, on the same CUDA-core kernel; up to 8 rows on the few-row kernel, whose
// narrow calls (32-515 columns) split each column's K over 2-8 warps (GemmPlan::plain_k_parts).
// Each tile of 128x128 outputs within calc_diff 1e-10 (spec/NUMERICS.md's fp32 bound), the same bits
// twice; zeroing one 16-wide K tile of the weight (what a tile-indexing bug computes) must fail it.
struct PlainRun {
  GemmWeightKind kind;
  bool cublaslt;
};

TEST(CudaGemmFast, PlainWeightsPassTheFp32Gate) {
  cuda::GemmRunner exact(nullptr, cuda::GemmPolicy{Numerics::kExact});
  cuda::GemmPolicy no_lt{Numerics::kFast};
  no_lt.cublaslt = false;
  cuda::GemmRunner fast(nullptr, cuda::GemmPolicy{Numerics::kFast}), fast_no_lt(nullptr, no_lt);
  struct Shape {
    int64_t rows, n, k;
  };
  uint32_t seed = 9000;
  for (const PlainRun run_kind : {PlainRun{GemmWeightKind::kF32, true}, PlainRun{GemmWeightKind::kBf16, true},
                                  PlainRun{GemmWeightKind::kBf16, false}}) {
    const bool f32 = run_kind.kind == GemmWeightKind::kF32;
    cuda::GemmRunner& runner = run_kind.cublaslt ? fast : fast_no_lt;
    // Many rows (the CUDA-core kernel or cuBLASLt), and decode's few (the few-row kernel).
    for (const auto& [rows, n, k] :
         {Shape{64, 1024, 4096}, Shape{200, 100, 48}, Shape{2048, 1024, 4096}, Shape{129, 515, 2048},
          Shape{63, 256, 256}, Shape{1, 256, 4096}, Shape{3, 1024, 4096}, Shape{8, 515, 2048}, Shape{5, 100, 48},
          Shape{1, 32, 4096}, Shape{4, 64, 1024}}) {
      std::mt19937 rng(++seed);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<uint16_t> x(static_cast<size_t>(rows * k));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(nd(rng) * (i % 97 == 5 ? 64.0f : 1.0f));
      // Weights as fp32 values (bf16-exact for bf16 weights); their device form below.
      std::vector<float> wa(static_cast<size_t>(n * k)), wb(wa.size());
      for (auto* w : {&wa, &wb})
        for (auto& v : *w) v = f32 ? nd(rng) * 0.02f : bf16_to_float(float_to_bf16(nd(rng) * 0.02f));
      auto upload = [&](const std::vector<float>& w) {
        std::vector<uint8_t> bytes(w.size() * (f32 ? 4 : 2));
        for (size_t i = 0; i < w.size(); ++i) {
          if (f32) {
            std::memcpy(bytes.data() + 4 * i, &w[i], 4);
          } else {
            const uint16_t b = float_to_bf16(w[i]);
            std::memcpy(bytes.data() + 2 * i, &b, 2);
          }
        }
        return std::make_unique<Dev<uint8_t>>(bytes);
      };
      const Dev<uint16_t> dx(x);
      const auto dwa = upload(wa), dwb = upload(wb);
      const cuda::GemmWeight ga{run_kind.kind, dwa->p, nullptr, n, k}, gb{run_kind.kind, dwb->p, nullptr, n, k};
      const size_t per = static_cast<size_t>(rows * n);
      auto run = [&](cuda::GemmRunner& r, const cuda::GemmWeight& w0) {
        Dev<float> y(std::vector<float>(2 * per, std::numeric_limits<float>::quiet_NaN()));
        r.run_pair({.x = dx.p, .rows = rows, .w = w0, .y = y.p, .out = cuda::GemmOut::kF32}, gb, y.p + per);
        return y.get();
      };
      const std::vector<float> want = run(exact, ga), got = run(runner, ga), again = run(runner, ga);
      EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0)
          << "rows " << rows << ": not the same bits run to run";
      if (rows <= 8) {  // the few-row kernel without a pair: the first weight's outputs alone, untouched past them
        Dev<float> y(std::vector<float>(2 * per, std::numeric_limits<float>::quiet_NaN()));
        runner.run({.x = dx.p, .rows = rows, .w = ga, .y = y.p, .out = cuda::GemmOut::kF32});
        const std::vector<float> alone = y.get();
        EXPECT_EQ(std::memcmp(alone.data(), got.data(), per * sizeof(float)), 0) << "rows " << rows << ": alone";
        EXPECT_TRUE(
            std::all_of(alone.begin() + static_cast<int64_t>(per), alone.end(), [](float v) { return std::isnan(v); }));
      }
      double worst = 0;
      for (size_t h = 0; h < 2; ++h) {
        for (int64_t rt = 0; rt < rows; rt += 128) {
          for (int64_t ct = 0; ct < n; ct += 128) {
            std::vector<float> tx, ty;
            for (int64_t r = rt; r < std::min(rt + 128, rows); ++r) {
              for (int64_t c = ct; c < std::min(ct + 128, n); ++c) {
                tx.push_back(want[h * per + static_cast<size_t>(r * n + c)]);
                ty.push_back(got[h * per + static_cast<size_t>(r * n + c)]);
              }
            }
            const double d = calc_diff(tx, ty);
            worst = std::max(worst, std::isnan(d) ? 1.0 : d);
          }
        }
      }
      std::printf("[ fast plain ] %s%s rows %5lld n %5lld k %5lld: worst tile calc_diff %.3e\n", f32 ? "fp32" : "bf16",
                  run_kind.cublaslt ? "" : " (cuBLASLt off)", static_cast<long long>(rows), static_cast<long long>(n),
                  static_cast<long long>(k), worst);
      EXPECT_LE(worst, 1e-10) << "rows " << rows << " n " << n << " k " << k;
      if (k >= 32) {  // the mutation: K tile [16, 32) of the first weight lost
        std::vector<float> cut = wa;
        for (int64_t r = 0; r < n; ++r) std::fill_n(cut.begin() + r * k + 16, 16, 0.0f);
        const auto dcut = upload(cut);
        const std::vector<float> bad = run(runner, {run_kind.kind, dcut->p, nullptr, n, k});
        EXPECT_GT(calc_diff(std::vector<float>(want.begin(), want.begin() + static_cast<int64_t>(per)),
                            std::vector<float>(bad.begin(), bad.begin() + static_cast<int64_t>(per))),
                  1e-10)
            << "a lost K tile passed the gate";
      }
    }
  }
}

// The runner on the fast tier (cuBLASLt for many FP8 rows, the tensor-core kernel below and where
// cuBLASLt refuses the shape) against the runner on the exact tier, from the same bf16 inputs.
TEST(CudaGemmFast, RunnerRoutesPassTheOpGate) {
  cuda::GemmRunner exact(nullptr, cuda::GemmPolicy{Numerics::kExact});
  cuda::GemmRunner fast(nullptr, cuda::GemmPolicy{Numerics::kFast});
  uint32_t seed = 7000;
  struct Shape {
    int64_t rows, n, k;
  };
  const Shape shapes[] = {{1, 1536, 2048},    {5, 1536, 2048},    {64, 1536, 2048}, {65, 1536, 2048},
                          {1001, 1536, 2048}, {4096, 1536, 2048}, {1, 1024, 8192},  {16, 1024, 8192}};
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    for (const auto& [rows, n, k] : shapes) {
      const Case c = dense("runner", kind, rows, n, k);
      const HostInputs h = make_inputs(c, ++seed);
      std::vector<uint16_t> x(static_cast<size_t>(rows * k)), xa(x.size());
      std::mt19937 rng(seed);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = float_to_bf16(nd(rng) * (i % 97 == 5 ? 64.0f : 1.0f));
        xa[i] = x[i] & 0x7fff;
      }
      const Dev<uint16_t> dx(x), dxa(xa);
      const Dev<uint8_t> w(h.w), wa(abs_codes(h.w, kind == GemmWeightKind::kFp4)), ws(h.ws);
      const cuda::GemmWeight gw{kind, w.p, ws.p, n, k}, gwa{kind, wa.p, ws.p, n, k};
      Dev<float> yx(std::vector<float>(static_cast<size_t>(rows * n))), ya(yx.get());
      Dev<uint16_t> y(std::vector<uint16_t>(static_cast<size_t>(rows * n), kPoison));
      exact.run({.x = dx.p, .rows = rows, .w = gw, .y = yx.p, .out = cuda::GemmOut::kF32});
      exact.run({.x = dxa.p, .rows = rows, .w = gwa, .y = ya.p, .out = cuda::GemmOut::kF32});
      fast.run({.x = dx.p, .rows = rows, .w = gw, .y = y.p, .out = cuda::GemmOut::kBf16});
      const Verdict v = judge(c, yx.get(), ya.get(), y.get());
      std::printf("[ fast runner ] %s rows %5lld: max |y-x|/A %.3e, worst tile calc_diff %.3e\n",
                  kind == GemmWeightKind::kFp8 ? "fp8" : "fp4", static_cast<long long>(rows), v.worst_ratio,
                  v.worst_tile);
      EXPECT_TRUE(v.passes()) << "rows " << rows << ": " << v.outside << " outside, " << v.untouched << " unwritten";
    }
  }
}

// A bf16 weight's FP8 twin (wo_a): the few-row plain kernel reading the FP8 blocks (products summed a
// scale block at a time) against the exact plain kernel on the bf16 values they dequantize to
// (bf16(e4m3 · 2^s), as the model makes them), for 1-8 rows (x staged in shared memory at 1 and 2: decode's
// wo_a), one group and eight (wo_a's): fp32 outputs
// within calc_diff 1e-10 on every 128-column tile (spec/NUMERICS.md's fp32 bound), bf16 outputs within
// the element bound; the same bits twice; a wrong scale block (one row block's scales rotated) fails.
TEST(CudaGemmFast, Fp8TwinPassesTheGateOfItsBf16Weights) {
  struct Shape {
    int64_t rows, n, kg;
    int groups;
  };
  uint32_t seed = 7000;
  for (const Shape sh : {Shape{1, 512, 1024, 1}, Shape{2, 8192, 4096, 8}, Shape{5, 1024, 512, 8},
                         Shape{8, 8192, 4096, 8}, Shape{3, 256, 128, 2}}) {
    SCOPED_TRACE(testing::Message() << "rows " << sh.rows << " n " << sh.n << " groups " << sh.groups);
    std::mt19937 rng(++seed);
    std::vector<uint8_t> codes(static_cast<size_t>(sh.n * sh.kg)),
        scales(static_cast<size_t>(sh.n / 128 * (sh.kg / 128)));
    for (auto& c : codes) c = random_fp8(rng);
    for (auto& sc : scales) sc = static_cast<uint8_t>(118 + rng() % 12);
    std::vector<uint16_t> bf(codes.size());
    for (int64_t r = 0; r < sh.n; ++r) {
      for (int64_t k = 0; k < sh.kg; ++k) {
        const size_t i = static_cast<size_t>(r * sh.kg + k);
        bf[i] = float_to_bf16(e4m3_to_float(codes[i]) *
                              ue8m0_to_float(scales[static_cast<size_t>(r / 128 * (sh.kg / 128) + k / 128)]));
      }
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint16_t> x(static_cast<size_t>(sh.rows * sh.kg * sh.groups));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(nd(rng) * (i % 97 == 5 ? 64.0f : 1.0f));
    const Dev<uint8_t> dcodes(codes), dscales(scales);
    const Dev<uint16_t> dbf(bf), dx(x);
    // The kernel's outputs as floats (bf16 outputs widened), poisoned before the run.
    auto run = [&](bool f32, const uint8_t* twin, const uint8_t* twin_scale) {
      Dev<float> y(std::vector<float>(static_cast<size_t>(sh.rows * sh.n), std::numeric_limits<float>::quiet_NaN()));
      cuda::ExactPlainArgs p;
      p.x = dx.p, p.x_ld = sh.kg * sh.groups, p.rows = sh.rows;
      p.n = sh.n, p.ng = sh.n / sh.groups, p.kg = sh.kg, p.groups = sh.groups;
      p.w = dbf.p, p.w_fp8 = twin, p.w_fp8_scale = twin_scale;
      p.y = y.p, p.y_ld = sh.n, p.y_f32 = f32;
      if (twin) {
        EXPECT_TRUE(cuda::fast_plain_gemv_takes(p));
        cuda::fast_plain_gemv(p, 1, nullptr);
      } else {
        cuda::exact_plain_gemm(p, nullptr);
      }
      DSV4_CUDA_CHECK(cudaGetLastError());
      std::vector<float> got = y.get();
      if (!f32) {  // bf16 outputs sit in the first half of each float's bytes' worth of room
        std::vector<uint16_t> half(got.size());
        std::memcpy(half.data(), got.data(), half.size() * sizeof(uint16_t));
        for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(half[i]);
      }
      return got;
    };
    // The worst calc_diff over tiles of 128 output columns (all rows).
    auto worst_tile = [&](const std::vector<float>& want, const std::vector<float>& got) {
      double worst = 0;
      for (int64_t c0 = 0; c0 < sh.n; c0 += 128) {
        std::vector<float> tx, ty;
        for (int64_t r = 0; r < sh.rows; ++r) {
          for (int64_t c = c0; c < std::min(c0 + 128, sh.n); ++c) {
            tx.push_back(want[static_cast<size_t>(r * sh.n + c)]);
            ty.push_back(got[static_cast<size_t>(r * sh.n + c)]);
          }
        }
        const double d = calc_diff(tx, ty);
        worst = std::max(worst, std::isnan(d) ? 1.0 : d);
      }
      return worst;
    };
    const std::vector<float> want = run(true, nullptr, nullptr), got = run(true, dcodes.p, dscales.p);
    EXPECT_EQ(std::memcmp(run(true, dcodes.p, dscales.p).data(), got.data(), got.size() * sizeof(float)), 0)
        << "not the same bits run to run";
    const double worst = worst_tile(want, got);
    std::printf("[ fp8 twin ] rows %lld n %lld groups %d: worst tile calc_diff %.3e\n", static_cast<long long>(sh.rows),
                static_cast<long long>(sh.n), sh.groups, worst);
    EXPECT_LE(worst, 1e-10);
    // bf16 outputs: NUMERICS.md's element bound, ulp_bf16(x) + 2^-10 · A, with A the sums of |x|·|w| (the
    // exact kernel on the absolute values): reordered fp32 sums may move a cancelling output by far more
    // than its own ulp.
    std::vector<uint16_t> abs_x = x, abs_bf = bf;
    for (auto* v : {&abs_x, &abs_bf})
      for (auto& b : *v) b &= 0x7fff;
    const Dev<uint16_t> dabs_x(abs_x), dabs_bf(abs_bf);
    Dev<float> dA(std::vector<float>(static_cast<size_t>(sh.rows * sh.n)));
    cuda::ExactPlainArgs pa;
    pa.x = dabs_x.p, pa.x_ld = sh.kg * sh.groups, pa.rows = sh.rows;
    pa.n = sh.n, pa.ng = sh.n / sh.groups, pa.kg = sh.kg, pa.groups = sh.groups;
    pa.w = dabs_bf.p, pa.y = dA.p, pa.y_ld = sh.n, pa.y_f32 = true;
    cuda::exact_plain_gemm(pa, nullptr);
    const std::vector<float> A = dA.get();
    const std::vector<float> want_bf = run(false, nullptr, nullptr), got_bf = run(false, dcodes.p, dscales.p);
    int outside = 0;
    for (size_t i = 0; i < want_bf.size(); ++i) {
      const float ulp = want_bf[i] == 0.0f ? 0.0f : std::ldexp(1.0f, std::ilogb(want_bf[i]) - 7);
      outside += !(std::fabs(got_bf[i] - want_bf[i]) <= ulp + std::ldexp(A[i], -10));
    }
    EXPECT_EQ(outside, 0) << "bf16 outputs outside the element bound";
    std::vector<uint8_t> rotated = scales;  // row block 0's scales one K block off
    std::rotate(rotated.begin(), rotated.begin() + 1, rotated.begin() + sh.kg / 128);
    const Dev<uint8_t> dbad(rotated);
    if (sh.kg > 128) {
      EXPECT_GT(worst_tile(want, run(true, dcodes.p, dbad.p)), 1e-10) << "a wrong scale block passed the gate";
    }
  }
}

}  // namespace
}  // namespace dsv4
