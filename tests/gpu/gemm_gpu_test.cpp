// The CUDA GEMMs against the CPU backend's linear (the reference) on fresh random inputs: the exact
// kernels and the grouped expert GEMM bit for bit, the cuBLASLt paths to a normalised error (printed,
// so that a wrong scale layout is obvious); every path twice, bit-identical run to run. Outputs are
// poisoned with NaN before each run and activation row padding holds NaN, so a missed write or a
// read past K shows.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_imma_skinny.h"
#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using cuda::GemmWeightKind;
using gputest::Dev;

constexpr uint16_t kNanBf16 = 0x7fc0;

CpuOps& cpu() {
  static CpuOps ops(0);  // every hardware thread: the references are large
  return ops;
}

// The exact-tier policy the helpers below make their runners and grouped calls with. A test sets the
// fields it needs for its scope (PolicyScope): the SIMT tests turn the int8 tensor cores off so that
// their row counts keep reaching the SIMT kernels.
cuda::GemmPolicy& test_policy() {
  static cuda::GemmPolicy p;
  return p;
}

class PolicyScope {
 public:
  template <typename F>
  explicit PolicyScope(F&& set) : was_(test_policy()) {
    set(test_policy());
  }
  ~PolicyScope() { test_policy() = was_; }
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;

 private:
  cuda::GemmPolicy was_;
};

// ---- inputs ------------------------------------------------------------------------------------

struct HostWeight {
  GemmWeightKind kind = GemmWeightKind::kBf16;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data, scale;

  Weight view() const {
    switch (kind) {
      case GemmWeightKind::kFp8:
        return {WeightType::kFp8Block, data.data(), scale.data(), rows, cols};
      case GemmWeightKind::kFp4:
        return {WeightType::kFp4Block, data.data(), scale.data(), rows, cols};
      case GemmWeightKind::kBf16:
        return {WeightType::kBf16, data.data(), nullptr, rows, cols};
      case GemmWeightKind::kF32:
        return {WeightType::kF32, data.data(), nullptr, rows, cols};
    }
    return {};
  }
};

// Random codes (FP8 avoiding the NaN codes 0x7f/0xff), ue8m0 scales 127±4, plain values ~N(0, 0.05²)
// (f32 weights with full fp32 mantissas).
HostWeight random_weight(GemmWeightKind kind, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  HostWeight w{kind, n, k, {}, {}};
  auto scales = [&](size_t count) {
    w.scale.resize(count);
    for (auto& s : w.scale) s = static_cast<uint8_t>(123 + rng() % 9);
  };
  std::normal_distribution<float> nd(0.0f, 0.05f);
  switch (kind) {
    case GemmWeightKind::kFp8:
      w.data.resize(static_cast<size_t>(n * k));
      for (auto& b : w.data) {
        b = static_cast<uint8_t>(rng());
        if ((b & 0x7f) == 0x7f) b ^= 1;
      }
      scales(static_cast<size_t>((n + 127) / 128 * ((k + 127) / 128)));
      break;
    case GemmWeightKind::kFp4:
      w.data.resize(static_cast<size_t>(n * k / 2));
      for (auto& b : w.data) b = static_cast<uint8_t>(rng());
      scales(static_cast<size_t>(n * k / 32));
      break;
    case GemmWeightKind::kBf16: {
      w.data.resize(static_cast<size_t>(n * k * 2));
      auto* p = reinterpret_cast<uint16_t*>(w.data.data());
      for (int64_t i = 0; i < n * k; ++i) p[i] = float_to_bf16(nd(rng));
      break;
    }
    case GemmWeightKind::kF32: {
      w.data.resize(static_cast<size_t>(n * k * 4));
      auto* p = reinterpret_cast<float*>(w.data.data());
      for (int64_t i = 0; i < n * k; ++i) p[i] = nd(rng);
      break;
    }
  }
  return w;
}

// bf16 activations [rows, ld]: per-row magnitudes 2^[-6, 6], NaN in the padding past `cols`.
std::vector<uint16_t> random_acts(int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-6.0f, 6.0f);
  std::vector<uint16_t> x(static_cast<size_t>(rows * ld), kNanBf16);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp2(mag(rng));
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(r * ld + c)] = float_to_bf16(nd(rng) * s);
  }
  return x;
}

// Inputs whose block sums an fp32 chain in ascending k (the order before exact block sums) gets
// wrong, as in the CPU's linear test (Linear.Fp8BlockSumsAreExactRoundedOnce): in every K-block (128
// for FP8, 32 for FP4) a leading run of large products, then small ones of random sign, then the
// large ones again negated (mirrored activations against equal weights). They cancel exactly, and at
// the peak of its partial sums a chain rounds the small products away, so these inputs tell the two
// orders apart in most outputs.
struct Cancelling {
  int block, large;  // K-block, and large products at [0, large) of it, mirrored at [block - large, block)
  explicit Cancelling(GemmWeightKind kind)
      : block(kind == GemmWeightKind::kFp4 ? 32 : 128), large(kind == GemmWeightKind::kFp4 ? 12 : 32) {}
  // The source of position i of a block: i itself, or the large position it mirrors.
  int source(int i) const { return i >= block - large ? i - (block - large) : i; }
};

int pick(std::mt19937& rng, int lo, int hi) {
  return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1));
}

HostWeight cancelling_weight(GemmWeightKind kind, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  const Cancelling cz(kind);
  HostWeight w{kind, n, k, {}, {}};
  if (kind == GemmWeightKind::kFp4) {
    w.data.assign(static_cast<size_t>(n * k / 2), 0);
    for (int64_t j = 0; j < n; ++j) {
      uint8_t* row = w.data.data() + j * (k / 2);
      for (int64_t kk = 0; kk < k; ++kk) {
        const int i = static_cast<int>(kk % cz.block), src = cz.source(i);
        // Large: 4 or 6, positive; small: any code.
        const uint8_t code = src != i ? fp4_at(row, kk - i + src)
                                      : static_cast<uint8_t>(i < cz.large ? pick(rng, 6, 7) : pick(rng, 0, 15));
        row[kk / 2] |= static_cast<uint8_t>(code << (kk % 2 * 4));
      }
    }
    w.scale.resize(static_cast<size_t>(n * k / 32));
  } else {
    w.data.resize(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j) {
      uint8_t* row = w.data.data() + j * k;
      for (int64_t kk = 0; kk < k; ++kk) {
        const int i = static_cast<int>(kk % cz.block), src = cz.source(i);
        if (src != i) {
          row[kk] = row[kk - i + src];
          continue;
        }
        uint8_t c = 0x7f;  // large: magnitude >= 8; small: any; never NaN
        while ((c & 0x7f) == 0x7f) {
          c = static_cast<uint8_t>(i < cz.large ? pick(rng, 10, 15) << 3 | pick(rng, 0, 7) : rng());
        }
        row[kk] = static_cast<uint8_t>(c | (rng() % 2 ? 0x80 : 0));
      }
    }
    w.scale.resize(static_cast<size_t>((n + 127) / 128 * ((k + 127) / 128)));
  }
  for (auto& e : w.scale) e = static_cast<uint8_t>(pick(rng, 124, 130));
  return w;
}

// Activations for cancelling_weight's kind [rows, ld] (cols a multiple of 128): per (row, 128-block)
// a scale 2^[-6, 6], the block's amax 400 (so the codes come out unscaled), large values in [256,
// 384] (positive), small ones e4m3 subnormal to 2^-2, mirrored negatives; NaN past `cols`.
std::vector<uint16_t> cancelling_acts(GemmWeightKind kind, int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  const Cancelling cz(kind);
  std::vector<uint16_t> x(static_cast<size_t>(rows * ld), kNanBf16);
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = x.data() + r * ld;
    float s = 1.0f;
    for (int64_t kk = 0; kk < cols; ++kk) {
      if (kk % 128 == 0) s = std::ldexp(1.0f, pick(rng, -6, 6));
      const int i = static_cast<int>(kk % cz.block), src = cz.source(i);
      if (src != i) {
        row[kk] = static_cast<uint16_t>(row[kk - i + src] ^ 0x8000);
        continue;
      }
      const bool big = i < cz.large;
      const auto code = static_cast<uint8_t>(big ? 15 << 3 | pick(rng, 0, 4) : pick(rng, 0, 4) << 3 | pick(rng, 0, 7));
      const float v = kk % 128 == 0 ? 400.0f : e4m3_to_float(code) * (big || rng() % 2 ? 1.0f : -1.0f);
      row[kk] = float_to_bf16(v * s);
    }
  }
  return x;
}

struct DevWeight {
  explicit DevWeight(const HostWeight& h) : w(h), data(h.data), scale(h.scale) {}
  cuda::GemmWeight view() const { return {w.kind, data.p, w.scale.empty() ? nullptr : scale.p, w.rows, w.cols}; }
  const HostWeight& w;
  Dev<uint8_t> data, scale;
};

// ---- running and comparing ---------------------------------------------------------------------

// One GEMM problem: weight [n, k] (k per group), x [rows, groups·k + x_pad], y [rows, n + y_pad].
struct Case {
  std::string name;
  GemmWeightKind kind;
  int64_t n, k;
  int groups = 1;
  bool f32_out = false;
  int64_t x_pad = 0, y_pad = 0;
  bool cancelling = false;  // cancelling_weight / cancelling_acts instead of random ones
  int64_t x_ld() const { return k * groups + x_pad; }
  int64_t y_ld() const { return n + y_pad; }
};

// Output words: bf16 bits or fp32 bits.
template <typename T>
constexpr T kPoison = static_cast<T>(~T{0});

template <typename T>
float value(T v) {
  if constexpr (sizeof(T) == 2) {
    return bf16_to_float(v);
  } else {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  }
}

template <typename T>
std::vector<T> cpu_linear(const Case& c, const HostWeight& w, const std::vector<uint16_t>& x, int64_t rows) {
  std::vector<T> y(static_cast<size_t>(rows * c.y_ld()), kPoison<T>);
  LinearParams p{x.data(), rows, w.view(), y.data(), c.f32_out ? ActType::kF32 : ActType::kBF16};
  p.groups = c.groups;
  p.x_stride = c.x_ld();
  p.y_stride = c.y_ld();
  cpu().linear(p);
  return y;
}

template <typename T>
std::vector<T> gpu_linear(cuda::GemmRunner& runner, const Case& c, const DevWeight& w, const Dev<uint16_t>& x,
                          int64_t rows, bool exact) {
  Dev<T> y(std::vector<T>(static_cast<size_t>(rows * c.y_ld()), kPoison<T>));
  cuda::GemmArgs a;
  a.x = x.p;
  a.rows = rows;
  a.w = w.view();
  a.y = y.p;
  a.out = c.f32_out ? cuda::GemmOut::kF32 : cuda::GemmOut::kBf16;
  a.groups = c.groups;
  a.x_stride = c.x_ld();
  a.y_stride = c.y_ld();
  a.exact = exact;
  runner.run(a);
  return y.get();
}

// Mismatches of the valid [rows, n] region (NaN always counts) and of untouched padding.
template <typename T>
void expect_identical(const std::vector<T>& got, const std::vector<T>& want, int64_t rows, int64_t n, int64_t ld,
                      const std::string& what) {
  int64_t bad = 0, first = -1, pad_bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < ld; ++j) {
      const auto i = static_cast<size_t>(r * ld + j);
      if (j >= n) {
        pad_bad += got[i] != kPoison<T>;
      } else if (got[i] != want[i] || std::isnan(value(got[i]))) {
        if (bad++ == 0) first = r * ld + j;
      }
    }
  }
  EXPECT_EQ(pad_bad, 0) << what << ": wrote into the row padding";
  if (bad == 0) return;
  const auto i = static_cast<size_t>(first);
  ADD_FAILURE() << what << ": " << bad << " of " << rows * n << " outputs differ; first at row " << first / ld
                << " col " << first % ld << ": got " << value(got[i]) << " want " << value(want[i]);
}

// rms(got - want) / rms(want) over the valid region; infinity on NaN.
template <typename T>
double normalised_error(const std::vector<T>& got, const std::vector<T>& want, int64_t rows, int64_t n, int64_t ld) {
  double d2 = 0, r2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const auto i = static_cast<size_t>(r * ld + j);
      const double g = value(got[i]), w = value(want[i]);
      if (std::isnan(g) || std::isnan(w)) return INFINITY;
      d2 += (g - w) * (g - w);
      r2 += w * w;
    }
  }
  return r2 > 0 ? std::sqrt(d2 / r2) : (d2 > 0 ? INFINITY : 0.0);
}

std::string label(const Case& c, int64_t rows) { return c.name + " rows " + std::to_string(rows); }

// The exact path: bit-identical to the CPU, and to itself on a second run.
template <typename T>
void check_exact_rows(cuda::GemmRunner& runner, const Case& c, const HostWeight& hw, const DevWeight& dw, int64_t rows,
                      uint32_t seed) {
  const auto x = c.cancelling ? cancelling_acts(c.kind, rows, c.k * c.groups, c.x_ld(), seed)
                              : random_acts(rows, c.k * c.groups, c.x_ld(), seed);
  const Dev<uint16_t> dx(x);
  const auto want = cpu_linear<T>(c, hw, x, rows);
  const auto got = gpu_linear<T>(runner, c, dw, dx, rows, true);
  expect_identical(got, want, rows, c.n, c.y_ld(), label(c, rows) + " exact");
  const auto again = gpu_linear<T>(runner, c, dw, dx, rows, true);
  EXPECT_TRUE(again == got) << label(c, rows) << " exact: not reproducible run to run";
}

void check_exact(const Case& c, std::initializer_list<int64_t> rows, uint32_t seed) {
  const HostWeight hw =
      c.cancelling ? cancelling_weight(c.kind, c.n, c.k, seed) : random_weight(c.kind, c.n, c.k, seed);
  const DevWeight dw(hw);
  cuda::GemmRunner runner(nullptr, test_policy());
  for (int64_t r : rows) {
    if (c.f32_out) {
      check_exact_rows<uint32_t>(runner, c, hw, dw, r, seed + static_cast<uint32_t>(r));
    } else {
      check_exact_rows<uint16_t>(runner, c, hw, dw, r, seed + static_cast<uint32_t>(r));
    }
  }
}

// The cuBLASLt path (exact = false): normalised error against the CPU below tol, reproducible.
template <typename T>
void check_fast_rows(cuda::GemmRunner& runner, const Case& c, const HostWeight& hw, const DevWeight& dw, int64_t rows,
                     double tol, uint32_t seed) {
  const auto x = random_acts(rows, c.k * c.groups, c.x_ld(), seed);
  const Dev<uint16_t> dx(x);
  const auto want = cpu_linear<T>(c, hw, x, rows);
  const auto got = gpu_linear<T>(runner, c, dw, dx, rows, false);
  const double err = normalised_error(got, want, rows, c.n, c.y_ld());
  std::printf("[ cuBLASLt ] %-34s normalised error %.3e%s\n", label(c, rows).c_str(), err,
              err == 0 ? "  (bit-identical: the exact kernel ran, cuBLASLt refused the shape?)" : "");
  EXPECT_LT(err, tol) << label(c, rows) << ": a large error here means a wrong scale layout or operand mapping";
  int64_t pad_bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = c.n; j < c.y_ld(); ++j) pad_bad += got[static_cast<size_t>(r * c.y_ld() + j)] != kPoison<T>;
  }
  EXPECT_EQ(pad_bad, 0) << label(c, rows) << ": wrote into the row padding";
  const auto again = gpu_linear<T>(runner, c, dw, dx, rows, false);
  EXPECT_TRUE(again == got) << label(c, rows) << ": cuBLASLt path not reproducible run to run";
}

void check_fast(const Case& c, std::initializer_list<int64_t> rows, double tol, uint32_t seed) {
  const HostWeight hw = random_weight(c.kind, c.n, c.k, seed);
  const DevWeight dw(hw);
  cuda::GemmRunner runner(nullptr, cuda::GemmPolicy{Numerics::kFast});
  for (int64_t r : rows) {
    if (c.f32_out) {
      check_fast_rows<uint32_t>(runner, c, hw, dw, r, tol, seed + static_cast<uint32_t>(r));
    } else {
      check_fast_rows<uint16_t>(runner, c, hw, dw, r, tol, seed + static_cast<uint32_t>(r));
    }
  }
}

// ---- quantize_act ------------------------------------------------------------------------------

TEST(CudaGemm, QuantizeActMatchesCpuBitForBit) {
  const int64_t rows = 37, k = 1024, sld = 40;
  for (int64_t ld : {k, k + 6}) {  // aligned rows (vector loads) and odd strides
    const auto x = random_acts(rows, k, ld, 7);
    const Dev<uint16_t> dx(x);
    Dev<uint8_t> codes(std::vector<uint8_t>(static_cast<size_t>(rows * k), 0xAB));
    Dev<float> scales(std::vector<float>(static_cast<size_t>(k / 128 * sld), NAN));
    cuda::quantize_act(dx.p, rows, k, ld, codes.p, scales.p, sld, nullptr);
    const auto gc = codes.get();
    const auto gs = scales.get();
    float block[128];
    uint8_t want[128];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < k / 128; ++b) {
        for (int i = 0; i < 128; ++i) block[i] = bf16_to_float(x[static_cast<size_t>(r * ld + b * 128 + i)]);
        const float s = ue8m0_to_float(quantize_block_e4m3(block, want));
        ASSERT_EQ(std::memcmp(&gs[static_cast<size_t>(b * sld + r)], &s, 4), 0) << "row " << r << " block " << b;
        for (int i = 0; i < 128; ++i) {
          ASSERT_EQ(gc[static_cast<size_t>(r * k + b * 128 + i)], want[i]) << "row " << r << " col " << b * 128 + i;
        }
      }
    }
  }
}

// The integer tensor-core path (gemm_imma.h) on or off for one test's scope.
class ImmaSwitch : public PolicyScope {
 public:
  explicit ImmaSwitch(bool on) : PolicyScope([on](cuda::GemmPolicy& p) { p.exact_imma = on; }) {}
};

// ---- exact kernels -----------------------------------------------------------------------------

TEST(CudaGemm, ExactFp8SmallShapes) {
  const ImmaSwitch simt(false);
  for (int64_t n : {128, 256, 200}) {
    for (int64_t k : {128, 256}) {
      check_exact({"fp8 n" + std::to_string(n) + " k" + std::to_string(k), GemmWeightKind::kFp8, n, k}, {1, 3, 17}, 10);
    }
  }
  check_exact({"fp8 strided f32-out", GemmWeightKind::kFp8, 200, 256, 1, true, 128, 5}, {3, 17}, 11);
  // Rows off the 16-byte grid: quantize_act first, then the kernel on codes (the others quantize as they read).
  check_exact({"fp8 odd stride", GemmWeightKind::kFp8, 200, 256, 1, false, 6, 0}, {1, 3, 17, 100}, 12);
}

TEST(CudaGemm, ExactFp4SmallShapes) {
  const ImmaSwitch simt(false);
  for (int64_t n : {128, 256, 200}) {
    for (int64_t k : {128, 256}) {
      check_exact({"fp4 n" + std::to_string(n) + " k" + std::to_string(k), GemmWeightKind::kFp4, n, k}, {1, 3, 17}, 20);
    }
  }
  check_exact({"fp4 strided f32-out", GemmWeightKind::kFp4, 200, 256, 1, true, 128, 5}, {3, 17}, 21);
  check_exact({"fp4 odd stride", GemmWeightKind::kFp4, 200, 256, 1, false, 6, 0}, {1, 3, 17, 100}, 22);
}

TEST(CudaGemm, ExactPlainSmallShapes) {
  for (auto kind : {GemmWeightKind::kBf16, GemmWeightKind::kF32}) {
    const std::string name = kind == GemmWeightKind::kBf16 ? "bf16" : "f32";
    for (int64_t n : {128, 256, 200}) {
      for (int64_t k : {128, 256}) {
        check_exact({name + " n" + std::to_string(n) + " k" + std::to_string(k), kind, n, k}, {1, 3, 17}, 30);
      }
    }
    // K off the 8-element grid (scalar loads) and strided rows; groups.
    check_exact({name + " k100 strided", kind, 200, 100, 1, true, 3, 7}, {1, 3, 17}, 31);
    check_exact({name + " groups 4", kind, 256, 128, 4, false, 8, 0}, {1, 3, 17}, 32);
  }
}

TEST(CudaGemm, ExactFp8FlashShapes) {
  const ImmaSwitch simt(false);
  check_exact({"wq_a fp8", GemmWeightKind::kFp8, 1024, 4096}, {1, 32, 300}, 40);
  check_exact({"wq_b fp8", GemmWeightKind::kFp8, 32768, 1024}, {1, 32, 300}, 41);
  check_exact({"wkv fp8", GemmWeightKind::kFp8, 512, 4096}, {1, 32, 300}, 42);
  check_exact({"wo_b fp8", GemmWeightKind::kFp8, 4096, 8192}, {1, 32, 300}, 43);
  check_exact({"wo_a fp8 groups 8", GemmWeightKind::kFp8, 8192, 4096, 8}, {1, 32, 300}, 44);
}

TEST(CudaGemm, ExactFp4FlashShapes) {
  const ImmaSwitch simt(false);
  check_exact({"w1 fp4", GemmWeightKind::kFp4, 2048, 4096}, {1, 32, 300}, 50);
  check_exact({"w2 fp4", GemmWeightKind::kFp4, 4096, 2048}, {1, 32, 300}, 51);
}

// Inputs on which exact block sums and an fp32 chain disagree in most outputs: every SIMT path of
// the block-scaled GEMM (skinny from bf16 rows and from codes, split-K, tiled, grouped) still matches
// the CPU bit for bit.
TEST(CudaGemm, ExactBlockSumsOnCancellingInputs) {
  const ImmaSwitch simt(false);
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    const std::string name = kind == GemmWeightKind::kFp8 ? "cancelling fp8" : "cancelling fp4";
    check_exact({name + " f32-out", kind, 200, 384, 1, true, 0, 0, true}, {1, 3, 17}, 140);
    check_exact({name + " odd stride", kind, 200, 256, 1, false, 6, 0, true}, {3, 100}, 141);
    check_exact({name + " split-K f32-out", kind, 256, 4096, 1, true, 0, 0, true}, {1, 2}, 142);
    check_exact({name + " tiled f32-out", kind, 2048, 1024, 1, true, 0, 0, true}, {300}, 143);
    check_exact({name + " tiled groups 4", kind, 2048, 512, 4, false, 0, 0, true}, {300}, 144);
  }
}

// run_pair (the compressor's wkv and wgate in one launch): each output the CPU's bit for bit, for
// the skinny and the tiled plain kernels, and the fallback to two runs for block-scaled weights.
TEST(CudaGemm, PlainPairMatchesCpuBitForBit) {
  const ImmaSwitch simt(false);
  for (auto kind : {GemmWeightKind::kBf16, GemmWeightKind::kF32, GemmWeightKind::kFp8}) {
    const Case c{kind == GemmWeightKind::kFp8    ? "pair fp8"
                 : kind == GemmWeightKind::kBf16 ? "pair bf16"
                                                 : "pair f32",
                 kind,
                 1024,
                 4096,
                 1,
                 true};
    const HostWeight ha = random_weight(kind, c.n, c.k, 170), hb = random_weight(kind, c.n, c.k, 171);
    const DevWeight da(ha), db(hb);
    for (const int64_t rows : {1, 3, 17, 32, 300, 1100}) {
      // Wide tiles at 17 rows (one of 32 rows: the minimum lowered) and 32 (four of eight rows, which
      // cover 132 SMs with the pair's 64 column tiles); tiles of four at 3.
      cuda::GemmPolicy policy = test_policy();
      policy.plain_wide_min_tiles = rows == 17 ? 1 : 0;
      cuda::GemmRunner runner(nullptr, policy);
      const auto x = random_acts(rows, c.k, c.x_ld(), 172 + static_cast<uint32_t>(rows));
      const Dev<uint16_t> dx(x);
      Dev<uint32_t> ya(std::vector<uint32_t>(static_cast<size_t>(rows * c.y_ld()), kPoison<uint32_t>));
      Dev<uint32_t> yb(std::vector<uint32_t>(static_cast<size_t>(rows * c.y_ld()), kPoison<uint32_t>));
      cuda::GemmArgs a;
      a.x = dx.p, a.rows = rows, a.w = da.view(), a.y = ya.p, a.out = cuda::GemmOut::kF32, a.exact = true;
      runner.run_pair(a, db.view(), yb.p);
      expect_identical(ya.get(), cpu_linear<uint32_t>(c, ha, x, rows), rows, c.n, c.y_ld(), label(c, rows) + " first");
      expect_identical(yb.get(), cpu_linear<uint32_t>(c, hb, x, rows), rows, c.n, c.y_ld(), label(c, rows) + " second");
    }
  }
}

TEST(CudaGemm, ExactPlainFlashShapes) {
  check_exact({"gate bf16 f32-out", GemmWeightKind::kBf16, 256, 4096, 1, true}, {1, 32, 300}, 60);
  check_exact({"compressor bf16 f32-out", GemmWeightKind::kBf16, 1024, 4096, 1, true}, {1, 300, 1100}, 61);
  check_exact({"wo_a bf16 groups 8", GemmWeightKind::kBf16, 8192, 4096, 8}, {1, 32, 300}, 62);
  check_exact({"hc f32 f32-out", GemmWeightKind::kF32, 24, 16384, 1, true}, {1, 32, 300}, 63);
}

// Plain GEMMs of 5-32 rows in one tile of 8, 16 or 32 rows and in tiles of four (where the wide tiles
// would not keep plain_wide_min_tiles CTAs): partial tiles, K off the 8-element grid with strided
// rows, groups, f32 weights, the wo_a and gate shapes, the pair; the CPU's bits either way.
TEST(CudaGemm, PlainWideTilesMatchCpuBitForBit) {
  for (const bool wide : {true, false}) {
    // The wide tiles even where they would leave SMs idle, or never.
    const PolicyScope tiles([wide](cuda::GemmPolicy& p) { p.plain_wide_min_tiles = wide ? 1 : int64_t{1} << 40; });
    const std::string on = wide ? " wide" : " fours";
    for (auto kind : {GemmWeightKind::kBf16, GemmWeightKind::kF32}) {
      const std::string name = (kind == GemmWeightKind::kBf16 ? "bf16" : "f32") + on;
      check_exact({name + " n200 k256", kind, 200, 256}, {5, 8, 9, 16, 17, 31, 32}, 190);
      check_exact({name + " k100 strided", kind, 200, 100, 1, true, 3, 7}, {5, 8, 9, 16, 17, 31, 32}, 191);
      check_exact({name + " groups 4", kind, 256, 128, 4, false, 8, 0}, {5, 8, 9, 16, 17, 31, 32}, 192);
    }
    check_exact({"wo_a bf16 groups 8" + on, GemmWeightKind::kBf16, 8192, 4096, 8}, {8, 24, 32}, 193);
    check_exact({"gate bf16 f32-out" + on, GemmWeightKind::kBf16, 256, 4096, 1, true}, {13, 32}, 194);
    check_exact({"hc f32 f32-out" + on, GemmWeightKind::kF32, 24, 16384, 1, true}, {32}, 195);
  }
}

// ---- cuBLASLt paths ----------------------------------------------------------------------------

TEST(CudaGemm, CublasLtFp8MatchesCpu) {
  constexpr double kTol = 2e-3;  // bf16 output; a wrong scale layout gives errors of order 1
  // Rows not a multiple of 4 probe the activation-scale leading dimension (gemm_internal.h), where
  // cuBLASLt takes them at all.
  check_fast({"wq_a fp8", GemmWeightKind::kFp8, 1024, 4096}, {1, 3, 18, 30, 32, 300}, kTol, 70);
  check_fast({"wq_b fp8", GemmWeightKind::kFp8, 32768, 1024}, {1, 32, 300}, kTol, 71);
  check_fast({"wkv fp8", GemmWeightKind::kFp8, 512, 4096}, {1, 17, 300}, kTol, 72);
  check_fast({"wo_b fp8", GemmWeightKind::kFp8, 4096, 8192}, {1, 32, 300}, kTol, 73);
  check_fast({"wo_a fp8 groups 8", GemmWeightKind::kFp8, 8192, 4096, 8}, {1, 32, 300}, kTol, 74);
  check_fast({"wkv fp8 f32-out strided", GemmWeightKind::kFp8, 512, 4096, 1, true, 128, 8}, {5, 64, 300}, kTol, 75);
}

TEST(CudaGemm, CublasLtBf16MatchesCpu) {
  check_fast({"gate bf16 f32-out", GemmWeightKind::kBf16, 256, 4096, 1, true}, {1, 32, 300}, 1e-4, 80);
  check_fast({"wo_a bf16 groups 8", GemmWeightKind::kBf16, 8192, 4096, 8}, {1, 32, 300}, 2e-3, 81);
  check_fast({"head-like bf16", GemmWeightKind::kBf16, 2048, 4096}, {1, 300}, 2e-3, 82);
}

TEST(CudaGemm, RejectsBadShapes) {
  const HostWeight hw = random_weight(GemmWeightKind::kFp8, 128, 100, 1);
  const DevWeight dw(hw);
  const Dev<uint16_t> dx(random_acts(1, 100, 100, 2));
  Dev<uint16_t> dy(std::vector<uint16_t>(128));
  cuda::GemmRunner runner(nullptr, test_policy());
  cuda::GemmArgs a;
  a.x = dx.p;
  a.rows = 1;
  a.w = dw.view();
  a.y = dy.p;
  EXPECT_THROW(runner.run(a), Error);  // FP8 K must be a multiple of 128
  a.w.kind = GemmWeightKind::kBf16;
  a.groups = 3;
  EXPECT_THROW(runner.run(a), Error);  // 128 rows do not split into 3 groups
}

// ---- grouped expert GEMM -----------------------------------------------------------------------

// Experts with the given row counts (some zero); each row checked bit for bit against CpuOps linear
// on its expert's weight; rows past offsets[experts] (bound - used) stay untouched.
// planes: the activations' digit planes made beforehand (digit_planes), as the MoE passes them.
void check_grouped(GemmWeightKind kind, int64_t n, int64_t k, const std::vector<int>& counts, int64_t spare,
                   uint32_t seed, bool cancelling = false, bool planes = false, bool pair = false) {
  const int experts = static_cast<int>(counts.size());
  std::vector<int32_t> offsets(1, 0);
  for (int c : counts) offsets.push_back(offsets.back() + c);
  const int64_t used = offsets.back(), bound = used + spare;
  const int64_t sld = (bound + 3) / 4 * 4;
  const auto x = cancelling ? cancelling_acts(kind, bound, k, k, seed) : random_acts(bound, k, k, seed);
  std::vector<HostWeight> hw;
  std::vector<std::unique_ptr<DevWeight>> dw;
  std::vector<const void*> data;
  std::vector<const uint8_t*> scale;
  // Experts [0, experts) are the weights, [experts, 2·experts) the pair's second weights.
  const int lists = pair ? 2 : 1;
  for (int e = 0; e < lists * experts; ++e) {
    const uint32_t we = seed * 1000 + static_cast<uint32_t>(e);
    hw.push_back(cancelling ? cancelling_weight(kind, n, k, we) : random_weight(kind, n, k, we));
  }
  for (int e = 0; e < lists * experts; ++e) {
    dw.push_back(std::make_unique<DevWeight>(hw[static_cast<size_t>(e)]));
    data.push_back(dw.back()->data.p);
    scale.push_back(dw.back()->scale.p);
  }
  const Dev<uint16_t> dx(x);
  const Dev<int32_t> doff(offsets);
  const Dev<const void*> ddata(data);
  const Dev<const uint8_t*> dscale(scale);
  Dev<uint8_t> codes(std::vector<uint8_t>(static_cast<size_t>(bound * k)));
  Dev<float> scales(std::vector<float>(static_cast<size_t>(k / 128 * sld)));
  cuda::quantize_act(dx.p, bound, k, k, codes.p, scales.p, sld, nullptr);
  Dev<int8_t> digits(std::vector<int8_t>(planes ? static_cast<size_t>(cuda::digit_plane_bytes(bound, k)) : 0));
  if (planes) cuda::digit_planes(codes.p, bound, k, k, digits.p, bound * k, nullptr);
  auto run = [&] {
    Dev<uint16_t> y(std::vector<uint16_t>(static_cast<size_t>(lists * bound * n), 0xffff));
    cuda::GroupedGemmArgs a;
    a.a_codes = codes.p;
    a.a_scales = scales.p;
    a.scale_ld = sld;
    a.rows = bound;
    a.n = n;
    a.k = k;
    a.experts = experts;
    a.offsets = doff.p;
    a.kind = kind;
    a.w_data = ddata.p;
    a.w_scale = dscale.p;
    a.y = y.p;
    if (planes) {
      a.a_digits = digits.p;
      a.a_digit_stride = bound * k;
    }
    if (pair) {
      a.w_data_b = ddata.p + experts;
      a.w_scale_b = dscale.p + experts;
      a.y_b = y.p + bound * n;
    }
    cuda::grouped_gemm(a, test_policy(), nullptr);
    return y.get();
  };
  const auto got = run();
  const std::string what = std::string(kind == GemmWeightKind::kFp8 ? "fp8" : "fp4") + " grouped n" +
                           std::to_string(n) + " k" + std::to_string(k) + " experts " + std::to_string(experts) +
                           (pair ? " pair" : "");
  const Case c{what, kind, n, k};
  for (int l = 0; l < lists; ++l) {
    const int64_t y0 = l * bound * n;
    for (int e = 0; e < experts; ++e) {
      const int64_t r0 = offsets[static_cast<size_t>(e)], cnt = counts[static_cast<size_t>(e)];
      if (cnt == 0) continue;
      const std::vector<uint16_t> xe(x.begin() + r0 * k, x.begin() + (r0 + cnt) * k);
      const auto want = cpu_linear<uint16_t>(c, hw[static_cast<size_t>(l * experts + e)], xe, cnt);
      const std::vector<uint16_t> ge(got.begin() + y0 + r0 * n, got.begin() + y0 + (r0 + cnt) * n);
      expect_identical(ge, want, cnt, n, n, what + " weight " + std::to_string(l) + " expert " + std::to_string(e));
    }
    int64_t touched = 0;
    for (int64_t i = used * n; i < bound * n; ++i) touched += got[static_cast<size_t>(y0 + i)] != 0xffff;
    EXPECT_EQ(touched, 0) << what << ": wrote rows past offsets[experts]";
  }
  EXPECT_TRUE(run() == got) << what << ": not reproducible run to run";
}

std::vector<int> random_counts(int experts, int max_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> c(static_cast<size_t>(experts));
  for (auto& v : c) v = rng() % 4 == 0 ? 0 : static_cast<int>(rng() % static_cast<uint32_t>(max_rows + 1));
  c[0] = 0;  // an empty first and last expert
  c.back() = 0;
  return c;
}

TEST(CudaGemm, GroupedSmallShapes) {
  const ImmaSwitch simt(false);
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    check_grouped(kind, 200, 256, {0, 1, 3, 0, 17, 2}, 5, 90);
    check_grouped(kind, 128, 128, random_counts(40, 3, 91), 0, 92);            // more experts than a warp
    check_grouped(kind, 200, 256, {0, 1, 3, 0, 17, 2}, 5, 93, true);           // cancelling inputs (skinny)
    check_grouped(kind, 2048, 1024, random_counts(12, 120, 94), 3, 95, true);  // cancelling inputs (tiled)
  }
}

TEST(CudaGemm, GroupedFlashShapes) {
  const ImmaSwitch simt(false);
  // Decode-like (a row or two per expert) and prefill-like (tens of rows per expert: tiled kernel).
  check_grouped(GemmWeightKind::kFp4, 2048, 4096, random_counts(48, 3, 100), 7, 101);
  check_grouped(GemmWeightKind::kFp4, 4096, 2048, random_counts(48, 3, 102), 0, 103);
  check_grouped(GemmWeightKind::kFp4, 2048, 4096, random_counts(12, 120, 104), 3, 105);
  check_grouped(GemmWeightKind::kFp8, 2048, 4096, random_counts(12, 120, 106), 0, 107);
}

// The SIMT kernel's FP4 block sums by tile rows: fp64 in one-row tiles (the GEMV and the ringed
// skinny tile), int32 dp4a over activation digits from two rows: every one-to-eight-row tile, bf16
// rows and codes, split-K, cancelling inputs (which need every digit), grouped decode-like rows, with
// one- and two-row tiles on the stage ring; the CPU's bits.
TEST(CudaGemm, Fp4SumsAndStageRingMatchCpuBitForBit) {
  const ImmaSwitch simt(false);
  uint32_t seed = 180;
  for (const auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    const std::string tag = kind == GemmWeightKind::kFp8 ? "fp8 " : "fp4 ";
    for (int64_t n : {128, 200}) check_exact({tag + "n" + std::to_string(n), kind, n, 256}, {1, 2, 3, 5, 17}, seed++);
    check_exact({tag + "strided f32-out", kind, 200, 256, 1, true, 128, 5}, {1, 2, 3, 17}, seed++);
    check_exact({tag + "k384 strided f32-out", kind, 200, 384, 1, true, 128, 5}, {1, 2}, seed++);
    check_exact({tag + "odd stride", kind, 200, 256, 1, false, 6, 0}, {1, 2, 3, 17}, seed++);
    check_exact({tag + "cancelling f32-out", kind, 200, 384, 1, true, 0, 0, true}, {1, 3, 17}, seed++);
    check_exact({tag + "cancelling split-K", kind, 256, 4096, 1, true, 0, 0, true}, {1, 2}, seed++);
    check_exact({tag + "cancelling odd stride", kind, 200, 384, 1, false, 6, 0, true}, {1, 2}, seed++);
    check_exact({tag + "w1", kind, 2048, 4096}, {1, 8, 32}, seed++);
    check_exact({tag + "w2", kind, 4096, 2048}, {1, 32}, seed++);
    check_exact({tag + "wo_b", kind, 4096, 8192}, {1, 2}, seed++);
    check_exact({tag + "groups 4", kind, 512, 1024, 4}, {1, 2}, seed++);
    check_grouped(kind, 2048, 4096, random_counts(48, 3, seed), 7, seed + 1);
    check_grouped(kind, 200, 256, {0, 1, 3, 0, 17, 2}, 5, seed + 2, true);
    seed += 3;
  }
}

// One-row FP4 tiles on their own kernel (fp4_gemv.h): decode-like grouped rows (empty experts, more
// experts than a warp, an expert with two one-row tiles, partial column tiles, the V4-Flash w1 and w2
// shapes), cancelling inputs, dense rows from codes (odd stride), groups; the CPU's bits, and the
// grouped cases really launch it; pairs (the MoE's w1 and w3) in one launch each.
TEST(CudaGemm, Fp4GemvMatchesCpuBitForBit) {
  const ImmaSwitch simt(false);
  const auto kind = GemmWeightKind::kFp4;
  const uint32_t seed = 900;
  const int64_t launches = cuda::fp4_gemv_launches();
  check_grouped(kind, 2048, 4096, random_counts(48, 1, seed), 3, seed + 1);
  check_grouped(kind, 4096, 2048, random_counts(40, 1, seed + 2), 0, seed + 3);
  check_grouped(kind, 200, 256, {0, 2, 0, 1, 0, 0, 1, 0}, 3, seed + 4);
  check_grouped(kind, 200, 384, {1, 0, 1, 1, 0, 0, 0, 0}, 2, seed + 5, true);
  check_exact({"gemv odd stride", kind, 200, 256, 1, false, 6, 0}, {1}, seed + 6);
  check_exact({"gemv cancelling odd stride", kind, 200, 384, 1, false, 6, 0, true}, {1}, seed + 7);
  check_exact({"gemv groups 4 odd stride", kind, 512, 1024, 4, false, 6, 0}, {1}, seed + 8);
  // With digit planes made beforehand (the MoE's decode calls): copied instead of converted per CTA.
  check_grouped(kind, 2048, 4096, random_counts(48, 1, seed + 9), 3, seed + 10, false, true);
  check_grouped(kind, 4096, 2048, random_counts(40, 1, seed + 11), 0, seed + 12, false, true);
  check_grouped(kind, 200, 384, {1, 0, 1, 1, 0, 0, 0, 0}, 2, seed + 13, true, true);
  EXPECT_GE(cuda::fp4_gemv_launches() - launches, 7) << "the grouped one-row cases did not take the one-row kernel";
  // Pairs: one launch each (a run and its repeat); the last case has an expert of two one-row tiles.
  const int64_t before = cuda::fp4_gemv_launches();
  check_grouped(kind, 2048, 4096, random_counts(48, 1, seed + 14), 3, seed + 15, false, true, true);
  check_grouped(kind, 200, 384, {1, 0, 1, 1, 0, 0, 0, 0}, 2, seed + 16, true, false, true);
  EXPECT_EQ(cuda::fp4_gemv_launches() - before, 4) << "pairs: launches of the one-row kernel";
  check_grouped(kind, 200, 256, {0, 2, 0, 1}, 1, seed + 17, false, false, true);
}

// One-row dense FP8 GEMMs on their own kernel (fp8_gemv.h): rows from bf16
// (quantized as staged) and from codes (odd stride), K below one stage and off its grid, partial
// column tiles, f32 out, groups (CTAs whose tiles cross a group), every tile shape the planner picks
// (the V4-Flash wq_b, wo_b, wq_a, wkv, shared-expert shapes: several tiles a CTA, K split across
// warps), cancelling inputs; the CPU's bits, and they really launch it, once per call. Grouped one-row tiles, pairs and
// K past kFp8GemvMaxK stay on the skinny kernel.
TEST(CudaGemm, Fp8GemvMatchesCpuBitForBit) {
  const ImmaSwitch simt(false);
  const auto kind = GemmWeightKind::kFp8;
  const uint32_t seed = 1300;
  {
    const int64_t launches = cuda::fp8_gemv_launches();
    check_exact({"fp8 gemv n200 k256", kind, 200, 256}, {1}, seed);
    check_exact({"fp8 gemv n130 k640 f32-out strided", kind, 130, 640, 1, true, 128, 5}, {1}, seed + 1);
    check_exact({"fp8 gemv odd stride", kind, 200, 384, 1, false, 6, 0}, {1}, seed + 2);
    check_exact({"fp8 gemv cancelling", kind, 200, 384, 1, true, 0, 0, true}, {1}, seed + 3);
    check_exact({"fp8 gemv cancelling odd stride", kind, 256, 1152, 1, false, 6, 0, true}, {1}, seed + 4);
    check_exact({"fp8 gemv groups 4", kind, 512, 1024, 4}, {1}, seed + 5);
    check_exact({"fp8 gemv wq_b", kind, 32768, 1024}, {1}, seed + 6);
    check_exact({"fp8 gemv wo_b", kind, 4096, 8192}, {1}, seed + 7);
    check_exact({"fp8 gemv wq_a", kind, 1024, 4096}, {1}, seed + 8);
    check_exact({"fp8 gemv wkv", kind, 512, 4096}, {1}, seed + 9);
    check_exact({"fp8 gemv shared_w2", kind, 4096, 2048}, {1}, seed + 10);
    check_exact({"fp8 gemv groups 8 f32-out", kind, 8192, 4096, 8, true}, {1}, seed + 11);
    const int64_t dense = cuda::fp8_gemv_launches() - launches;
    check_exact({"fp8 gemv k16384 (skinny)", kind, 256, 16384}, {1}, seed + 12);
    check_grouped(kind, 2048, 4096, random_counts(48, 1, seed + 13), 3, seed + 14);
    check_grouped(kind, 200, 256, {0, 1, 0, 1, 0, 0, 1, 0}, 1, seed + 15, false, false, true);
    EXPECT_EQ(dense, 12 * 2) << "a dense one-row case did not take the FP8 GEMV (each runs twice)";
    EXPECT_EQ(cuda::fp8_gemv_launches() - launches, dense) << "the FP8 GEMV took a case it should leave";
  }
}

// Grouped FP4 calls of 2-63 rows per expert on the few-row tensor-core kernel (gemm_imma_skinny.h),
// the CPU's bits; the runs really launch it (each case runs twice).
// Small shapes (also the sanitizers' cases): experts of one to 17 rows (tiles of eight and a partial
// one), empty experts, partial and idle column warps (n 200, 72), K of one 128-block and at the
// kernel's maximum, cancelling inputs (every digit plane counts), a pair in one launch. It must leave
// one-row calls to the GEMV, 64 rows an expert to the 128-row kernel, FP8 and calls without planes.
TEST(CudaGemm, ImmaSkinnySmallShapesMatchCpuBitForBit) {
  const ImmaSwitch imma(true);
  const auto kind = GemmWeightKind::kFp4;
  const uint32_t seed = 1500;
  const cuda::GemmPolicy& pol = test_policy();
  {
    EXPECT_TRUE(cuda::imma_skinny_takes(kind, 2, 4096, pol));
    EXPECT_FALSE(cuda::imma_skinny_takes(kind, 1, 4096, pol));
    EXPECT_FALSE(cuda::imma_skinny_takes(kind, 64, 4096, pol));
    EXPECT_FALSE(cuda::imma_skinny_takes(GemmWeightKind::kFp8, 8, 4096, pol));
    const int64_t launches = cuda::imma_skinny_launches();
    check_grouped(kind, 200, 384, {0, 2, 9, 3, 0, 17, 8, 1}, 3, seed + 1, true, true);
    check_grouped(kind, 72, 128, {3, 5, 0, 2}, 1, seed + 2, false, true);
    check_grouped(kind, 256, 16384, {2, 0, 7, 1}, 0, seed + 3, true, true);
    check_grouped(kind, 200, 256, {0, 3, 8, 0, 2, 9}, 0, seed + 4, false, true, true);  // pair
    const int64_t ran = cuda::imma_skinny_launches() - launches;
    check_grouped(kind, 200, 256, {0, 1, 0, 1, 1, 0}, 3, seed + 5, false, true);
    check_grouped(kind, 256, 1024, {64, 70, 66, 80}, 0, seed + 6, false, true);
    check_grouped(GemmWeightKind::kFp8, 200, 256, {0, 3, 8, 0, 2, 9}, 0, seed + 7, false, true);
    check_grouped(kind, 200, 256, {0, 3, 8, 0, 2, 9}, 0, seed + 8);
    EXPECT_EQ(ran, 4 * 2) << "launches of the few-row tensor-core kernel";
    EXPECT_EQ(cuda::imma_skinny_launches() - launches, ran) << "it took a case it should leave";
  }
}

// The same at the V4-Flash expert shapes (w1 / w2, 16-32 experts of up to 20 rows), plain and
// cancelling inputs, and the w1 / w3 pair.
TEST(CudaGemm, ImmaSkinnyFlashShapesMatchCpuBitForBit) {
  const ImmaSwitch imma(true);
  const auto kind = GemmWeightKind::kFp4;
  const uint32_t seed = 1600;
  {
    const int64_t launches = cuda::imma_skinny_launches();
    check_grouped(kind, 2048, 4096, random_counts(32, 12, seed), 5, seed + 1, false, true);
    check_grouped(kind, 4096, 2048, random_counts(32, 20, seed + 2), 0, seed + 3, false, true);
    check_grouped(kind, 2048, 4096, random_counts(16, 9, seed + 4), 2, seed + 5, true, true);
    check_grouped(kind, 2048, 4096, random_counts(32, 12, seed + 6), 3, seed + 7, false, true, true);  // pair
    EXPECT_EQ(cuda::imma_skinny_launches() - launches, 4 * 2);
  }
}

// ---- the tensor-core (int8 digit) kernel ---------------------------------------------------------

// Every case here has enough rows per weight for the tensor-core kernel (asserted, so that a planner
// change cannot silently send them back to the SIMT kernels); the CPU's exact block sums bit for bit.
TEST(CudaGemm, ImmaDenseMatchesCpuBitForBit) {
  const ImmaSwitch imma(true);
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    ASSERT_TRUE(cuda::imma_wanted(kind, 64, 256, 0, test_policy()));
    ASSERT_FALSE(cuda::imma_wanted(kind, 63, 256, 0, test_policy()));
    const std::string name = kind == GemmWeightKind::kFp8 ? "imma fp8" : "imma fp4";
    // Partial row and column tiles (n 200, 72), one K-block, strided f32 output, odd input stride.
    check_exact({name + " n200 k256", kind, 200, 256}, {64, 100, 300}, 110);
    check_exact({name + " n72 k128", kind, 72, 128}, {64, 129}, 111);
    check_exact({name + " strided f32-out", kind, 200, 384, 1, true, 128, 5}, {64, 257}, 112);
    check_exact({name + " odd stride", kind, 200, 256, 1, false, 6, 0}, {65, 300}, 113);
  }
  check_exact({"imma fp8 groups 4", GemmWeightKind::kFp8, 512, 256, 4}, {64, 200}, 114);
  // Inputs on which the block sums need every digit (large and small products that cancel).
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    const std::string name = kind == GemmWeightKind::kFp8 ? "imma cancelling fp8" : "imma cancelling fp4";
    check_exact({name + " f32-out", kind, 200, 384, 1, true, 0, 0, true}, {64, 300}, 115);
    check_exact({name + " weight planes", kind, 256, 1024, 1, true, 0, 0, true}, {600}, 116);
    check_exact({name + " groups 4", kind, 2048, 512, 4, false, 0, 0, true}, {300}, 117);
  }
}

TEST(CudaGemm, ImmaFlashShapesMatchCpuBitForBit) {
  const ImmaSwitch imma(true);
  check_exact({"imma wq_a fp8", GemmWeightKind::kFp8, 1024, 4096}, {64, 300, 1000}, 120);
  check_exact({"imma wq_b fp8", GemmWeightKind::kFp8, 32768, 1024}, {300}, 121);
  check_exact({"imma wo_b fp8", GemmWeightKind::kFp8, 4096, 8192}, {300}, 122);
  check_exact({"imma w1 fp4", GemmWeightKind::kFp4, 2048, 4096}, {64, 300}, 123);
  check_exact({"imma w2 fp4", GemmWeightKind::kFp4, 4096, 2048}, {300}, 124);
  // Decode batches on the wide dense weights: from kImmaDecodeRows rows, one part-empty row tile.
  ASSERT_TRUE(cuda::imma_wanted(GemmWeightKind::kFp8, 24, 1024, 32768, test_policy()));
  ASSERT_TRUE(cuda::imma_wanted(GemmWeightKind::kFp8, 32, 8192, 4096, test_policy()));
  ASSERT_FALSE(cuda::imma_wanted(GemmWeightKind::kFp8, 23, 1024, 32768, test_policy()));
  ASSERT_FALSE(cuda::imma_wanted(GemmWeightKind::kFp8, 32, 4096, 2048, test_policy()));  // too few column tiles
  ASSERT_FALSE(cuda::imma_wanted(GemmWeightKind::kFp4, 32, 4096, 0, test_policy()));     // grouped experts
  check_exact({"imma wq_b decode", GemmWeightKind::kFp8, 32768, 1024}, {24, 32, 63}, 125);
  check_exact({"imma wo_b decode", GemmWeightKind::kFp8, 4096, 8192}, {32}, 126);
}

TEST(CudaGemm, ImmaGroupedMatchesCpuBitForBit) {
  const ImmaSwitch imma(true);
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    check_grouped(kind, 200, 256, {0, 64, 65, 0, 200, 130, 1}, 5, 130);  // rows per expert >= 64 on average
    check_grouped(kind, 2048, 4096, {0, 300, 17, 128, 0, 400, 250, 0}, 3, 132);
    check_grouped(kind, 512, 1024, {70, 0, 200, 9, 130}, 2, 133, true);
  }
}

// The tensor-core kernel at its edges (kept from the four-stage ring's test when that form went): K of
// one or two 128-blocks (k128: 2 stages, k256: 4), an odd row stride, cancelling digit planes of both
// operands, the table path, FP4, grouped, and two V4 shapes.
TEST(CudaGemm, ImmaEdgeShapesMatchCpuBitForBit) {
  const PolicyScope imma([](cuda::GemmPolicy& p) { p.exact_imma = true; });
  for (auto kind : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    const std::string name = kind == GemmWeightKind::kFp8 ? "imma fp8" : "imma fp4";
    check_exact({name + " n72 k128", kind, 72, 128}, {64, 129}, 150);
    check_exact({name + " n200 k256", kind, 200, 256}, {100}, 151);
    check_exact({name + " odd stride", kind, 200, 384, 1, false, 6, 0}, {300}, 152);
    check_exact({name + " cancelling planes", kind, 256, 1024, 1, true, 0, 0, true}, {600}, 153);
    check_grouped(kind, 512, 1024, {70, 0, 200, 9, 130}, 2, 154, true);
  }
  check_exact({"imma wq_a fp8", GemmWeightKind::kFp8, 1024, 4096}, {1000}, 155);
  check_exact({"imma w1 fp4", GemmWeightKind::kFp4, 2048, 4096}, {300}, 156);
}

// ---- timings (run with --gtest_also_run_disabled_tests) -----------------------------------------

// GPU time of one call of f (enqueueing on `stream`), from a CUDA graph of `reps` calls: no host gaps.
template <typename F>
float graph_us(cudaStream_t stream, F&& f, int reps = 20) {
  f();  // warm-up: plans, caches, scratch
  DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) f();
  DSV4_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t a, b;
  DSV4_CUDA_CHECK(cudaEventCreate(&a));
  DSV4_CUDA_CHECK(cudaEventCreate(&b));
  DSV4_CUDA_CHECK(cudaEventRecord(a, stream));
  DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  DSV4_CUDA_CHECK(cudaEventRecord(b, stream));
  DSV4_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms * 1000.0f / static_cast<float>(reps);
}

void print_timing(const std::string& name, int64_t rows, const char* path, float us, double wbytes, double flops) {
  std::printf("[ timing ] %-18s rows %5ld %-6s %9.1f us  %7.0f GB/s weights  %7.1f TFLOP/s\n", name.c_str(),
              static_cast<long>(rows), path, us, wbytes / us * 1e-3, flops / us * 1e-6);
}

TEST(CudaGemm, DISABLED_Timings) {
  const Case cases[] = {
      {"wq_a fp8", GemmWeightKind::kFp8, 1024, 4096},
      {"wq_b fp8", GemmWeightKind::kFp8, 32768, 1024},
      {"wo_b fp8", GemmWeightKind::kFp8, 4096, 8192},
      {"w1 fp4", GemmWeightKind::kFp4, 2048, 4096},
      {"w2 fp4", GemmWeightKind::kFp4, 4096, 2048},
      {"gate bf16", GemmWeightKind::kBf16, 256, 4096, 1, true},
      {"compressor bf16", GemmWeightKind::kBf16, 1024, 4096, 1, true},
      {"wo_a bf16 g8", GemmWeightKind::kBf16, 8192, 4096, 8},
  };
  cudaStream_t stream;
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    cuda::GemmRunner runner(stream, cuda::GemmPolicy{Numerics::kFast});
    for (const Case& c : cases) {
      const HostWeight hw = random_weight(c.kind, c.n, c.k, 1);
      const DevWeight dw(hw);
      for (int64_t rows : {1, 4, 8, 32, 300, 2048}) {
        const Dev<uint16_t> dx(random_acts(rows, c.k * c.groups, c.x_ld(), 2));
        Dev<uint32_t> y(std::vector<uint32_t>(static_cast<size_t>(rows * c.y_ld())));
        for (bool exact : {true, false}) {
          if (!exact && c.kind == GemmWeightKind::kFp4) continue;
          cuda::GemmArgs a;
          a.x = dx.p;
          a.rows = rows;
          a.w = dw.view();
          a.y = y.p;
          a.out = c.f32_out ? cuda::GemmOut::kF32 : cuda::GemmOut::kBf16;
          a.groups = c.groups;
          a.exact = exact;
          const float us = graph_us(stream, [&] { runner.run(a); });
          print_timing(c.name, rows, exact ? "exact" : "fast", us, static_cast<double>(hw.data.size()),
                       2.0 * static_cast<double>(rows) * static_cast<double>(c.n * c.k));
        }
      }
    }
    // Grouped experts (w1 shape, FP4, 256 distinct constant-filled weights): decode-like (1-2 rows
    // an expert) and prefill-like.
    const int64_t n = 2048, k = 4096;
    const int experts = 256;
    const size_t wbytes = static_cast<size_t>(n * k / 2), sbytes = static_cast<size_t>(n * k / 32);
    uint8_t* pool = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pool), (wbytes + sbytes) * experts));
    DSV4_CUDA_CHECK(cudaMemset(pool, 0x7b, (wbytes + sbytes) * experts));
    std::vector<const void*> data;
    std::vector<const uint8_t*> scale;
    for (int e = 0; e < experts; ++e) {
      data.push_back(pool + wbytes * static_cast<size_t>(e));
      scale.push_back(pool + wbytes * experts + sbytes * static_cast<size_t>(e));
    }
    const Dev<const void*> ddata(data);
    const Dev<const uint8_t*> dscale(scale);
    for (int per : {1, 2, 8, 48}) {
      const int64_t rows = int64_t{experts} * per, sld = (rows + 3) / 4 * 4;
      std::vector<int32_t> off(experts + 1);
      for (int e = 0; e <= experts; ++e) off[static_cast<size_t>(e)] = e * per;
      const Dev<int32_t> doff(off);
      Dev<uint8_t> codes(std::vector<uint8_t>(static_cast<size_t>(rows * k), 0x38));
      Dev<float> scales(std::vector<float>(static_cast<size_t>(k / 128 * sld), 1.0f));
      Dev<uint16_t> y(std::vector<uint16_t>(static_cast<size_t>(rows * n)));
      cuda::GroupedGemmArgs a;
      a.a_codes = codes.p;
      a.a_scales = scales.p;
      a.scale_ld = sld;
      a.rows = rows;
      a.n = n;
      a.k = k;
      a.experts = experts;
      a.offsets = doff.p;
      a.kind = GemmWeightKind::kFp4;
      a.w_data = ddata.p;
      a.w_scale = dscale.p;
      a.y = y.p;
      const float us = graph_us(stream, [&] { cuda::grouped_gemm(a, test_policy(), stream); });
      print_timing("grouped w1 x256", rows, "exact", us, static_cast<double>(wbytes) * experts,
                   2.0 * static_cast<double>(rows) * static_cast<double>(n * k));
    }
    DSV4_CUDA_CHECK(cudaFree(pool));
  }
  DSV4_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace dsv4
