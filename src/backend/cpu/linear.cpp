#include "backend/cpu/linear.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "backend/cpu/cpu_support.h"
#include "core/number_formats.h"
#include "core/quant.h"

namespace dsv4::cpu {
namespace {

constexpr int kTileN = 32;        // output columns per work item
constexpr int64_t kChunkM = 64;   // rows per work item
constexpr int64_t kSuperM = 256;  // rows whose activations are prepared together
constexpr int kActBlock = 128;    // activation quantization block (§9.3)

enum class Mode { kFp8, kFp4, kPlain };

struct Plan {
  Mode mode = Mode::kPlain;
  int block = 128;    // K-block of the summation order
  int64_t k = 0;      // columns of x
  int64_t kg = 0;     // columns of one group (= weight cols)
  int64_t ng = 0;     // output columns of one group
  int64_t tiles = 0;  // tiles per group
  int64_t x_stride = 0;
  int64_t y_stride = 0;
};

Plan make_plan(const LinearParams& p) {
  Plan pl;
  pl.mode = p.w.type == WeightType::kFp8Block   ? Mode::kFp8
            : p.w.type == WeightType::kFp4Block ? Mode::kFp4
                                                : Mode::kPlain;
  pl.block = pl.mode == Mode::kFp4 ? 32 : 128;
  pl.kg = p.w.cols;
  pl.k = pl.kg * p.groups;
  pl.ng = p.w.rows / p.groups;
  pl.tiles = (pl.ng + kTileN - 1) / kTileN;
  pl.x_stride = p.x_stride ? p.x_stride : pl.k;
  pl.y_stride = p.y_stride ? p.y_stride : p.w.rows;
  return pl;
}

// Row r of x as the GEMM consumes it: e4m3 values with one scale per 128 (FP8/FP4 weights) or the
// widened bf16 values (plain weights).
void prepare_row(const uint16_t* x, const Plan& pl, float* a, float* sa) {
  if (pl.mode == Mode::kPlain) {
    bf16_to_f32(x, a, pl.k);
    return;
  }
  const float* lut = e4m3_table();
  float block[kActBlock];
  uint8_t codes[kActBlock];
  for (int64_t b = 0; b < pl.k / kActBlock; ++b) {
    bf16_to_f32(x + b * kActBlock, block, kActBlock);
    sa[b] = ue8m0_to_float(quantize_block_e4m3(block, codes));
    for (int i = 0; i < kActBlock; ++i) a[b * kActBlock + i] = lut[codes[i]];
  }
}

// The block-scaled weights' decoded values as doubles (block products are summed exactly in fp64):
// e4m3 codes, and both values of a packed FP4 byte, low nibble first.
const double* e4m3_doubles() {
  static const auto table = [] {
    std::array<double, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}
struct Fp4Pair {
  double lo, hi;
};
const Fp4Pair* fp4_pairs() {
  static const auto table = [] {
    std::array<Fp4Pair, 256> t{};
    for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = {e2m1_to_float(b & 0xf), e2m1_to_float(b >> 4)};
    return t;
  }();
  return table.data();
}

using V8f = float __attribute__((vector_size(32)));
using V8u = uint32_t __attribute__((vector_size(32)));
using V8h = uint16_t __attribute__((vector_size(16)));

// 8 bf16 values widened to fp32 (the bf16 bits are fp32's high half). By reference: a 32-byte vector
// by value would change the ABI between the clones.
DSV4_INLINE void widen_bf16(const uint16_t* p, V8f& f) {
  V8h h;
  std::memcpy(&h, p, sizeof(h));
  const V8u u = __builtin_convertvector(h, V8u) << 16;
  std::memcpy(&f, &u, sizeof(f));
}

// r[i][k] -> r[k][i] for an 8x8 block held as 8 vectors (unpack pairs, then quads, then halves).
DSV4_INLINE void transpose8(V8f (&r)[8]) {
  using I = __attribute__((vector_size(32))) int32_t;
  V8f t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(r[i], r[i + 1], I{0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], I{2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4) {
    for (int h = 0; h < 2; ++h) {
      u[i + 2 * h] = __builtin_shuffle(t[i + h], t[i + h + 2], I{0, 1, 8, 9, 4, 5, 12, 13});
      u[i + 2 * h + 1] = __builtin_shuffle(t[i + h], t[i + h + 2], I{2, 3, 10, 11, 6, 7, 14, 15});
    }
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = __builtin_shuffle(u[c], u[c + 4], I{0, 1, 2, 3, 8, 9, 10, 11});
    r[c + 4] = __builtin_shuffle(u[c], u[c + 4], I{4, 5, 6, 7, 12, 13, 14, 15});
  }
}

// A full bf16 tile (kTileN rows, len a multiple of 8) transposed 8x8 block by 8x8 block: the scalar
// column-by-column copy below costs ~10x the tile's arithmetic at one activation row (decode).
DSV4_INLINE void load_bf16_tile(const uint16_t* rows, int64_t stride, int len, float* wt) {
  for (int j0 = 0; j0 < kTileN; j0 += 8) {
    for (int k = 0; k < len; k += 8) {
      V8f r[8];
      for (int i = 0; i < 8; ++i) widen_bf16(rows + (j0 + i) * stride + k, r[i]);
      transpose8(r);
      for (int i = 0; i < 8; ++i) std::memcpy(wt + (k + i) * kTileN + j0, &r[i], sizeof(V8f));
    }
  }
}

// wt[len][kTileN] = bf16/f32 weight values of rows n0.. (zero past nvalid).
DSV4_INLINE void load_plain_tile(const Weight& w, int64_t n0, int nvalid, int64_t k0, int len, float* wt) {
  if (w.type == WeightType::kBf16 && nvalid == kTileN && len % 8 == 0) {
    load_bf16_tile(static_cast<const uint16_t*>(w.data) + n0 * w.cols + k0, w.cols, len, wt);
    return;
  }
  if (nvalid < kTileN) std::fill(wt, wt + int64_t{len} * kTileN, 0.0f);
  for (int j = 0; j < nvalid; ++j) {
    const int64_t n = n0 + j;
    float* col = wt + j;
    if (w.type == WeightType::kBf16) {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + n * w.cols + k0;
      for (int k = 0; k < len; ++k) col[k * kTileN] = bf16_to_float(src[k]);
    } else {
      const float* src = static_cast<const float*>(w.data) + n * w.cols + k0;
      for (int k = 0; k < len; ++k) col[k * kTileN] = src[k];
    }
  }
}

// wt[len][kTileN] = unscaled FP8/FP4 weight values of rows n0.. as doubles (zero past nvalid), sb =
// their block scales (1 past nvalid). Eight columns at a time, so that each k fills one cache line of
// the tile (a 128 x 32 tile of doubles is an L1's worth).
DSV4_INLINE void load_block_tile(const Weight& w, int64_t n0, int nvalid, int64_t k0, int len, double* wt, float* sb) {
  constexpr int kCols = 8;
  if (nvalid < kTileN) {
    std::fill(wt, wt + int64_t{len} * kTileN, 0.0);
    std::fill(sb, sb + kTileN, 1.0f);
  }
  const bool fp8 = w.type == WeightType::kFp8Block;
  for (int j = 0; j < nvalid; ++j) {
    const int64_t n = n0 + j;
    sb[j] = ue8m0_to_float(fp8 ? w.scale[(n / 128) * ((w.cols + 127) / 128) + k0 / 128]
                               : w.scale[n * (w.cols / 32) + k0 / 32]);
  }
  for (int j0 = 0; j0 < nvalid; j0 += kCols) {
    const int cols = std::min(kCols, nvalid - j0);
    double* tile = wt + j0;
    if (fp8) {
      const double* lut = e4m3_doubles();
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + (n0 + j0) * w.cols + k0;
      for (int k = 0; k < len; ++k) {
        for (int j = 0; j < cols; ++j) tile[k * kTileN + j] = lut[src[j * w.cols + k]];
      }
    } else {
      const Fp4Pair* pairs = fp4_pairs();
      const int64_t stride = w.cols / 2;
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + (n0 + j0) * stride + k0 / 2;
      for (int k = 0; k < len; k += 2) {
        for (int j = 0; j < cols; ++j) {
          const Fp4Pair v = pairs[src[j * stride + k / 2]];
          tile[k * kTileN + j] = v.lo;
          tile[(k + 1) * kTileN + j] = v.hi;
        }
      }
    }
  }
}

// One row against one K-block of a tile of FP8/FP4 weights: the block product P, the exact sum of
// the block's products (each exact in fp64, multiples of 2^-18 below 2^18 in magnitude, so up to 128
// of them sum exactly in fp64 whatever the order) rounded once to fp32, then the reference's scaling:
// FP8 C += P·(sa·sb), FP4 C += (P·sa)·sb.
template <Mode M>
DSV4_INLINE void row_block(const float* a, const double* wt, int len, float* c, const float* sb, float sa) {
  double acc[kTileN] = {};
  for (int k = 0; k < len; ++k) {
    const double av = a[k];
    const double* w = wt + k * kTileN;
    for (int j = 0; j < kTileN; ++j) acc[j] += av * w[j];
  }
  for (int j = 0; j < kTileN; ++j) {
    const auto p = static_cast<float>(acc[j]);
    if constexpr (M == Mode::kFp8) {
      c[j] += p * (sa * sb[j]);
    } else {
      c[j] += p * sa * sb[j];
    }
  }
}

// Plain weights: one row's sum continued over a K-block of the tile, products in ascending k.
DSV4_INLINE void row_block_plain(const float* a, const float* wt, int len, float* c) {
  float acc[kTileN];
  for (int j = 0; j < kTileN; ++j) acc[j] = c[j];
  for (int k = 0; k < len; ++k) {
    const float av = a[k];
    const float* w = wt + k * kTileN;
    for (int j = 0; j < kTileN; ++j) acc[j] += av * w[j];
  }
  for (int j = 0; j < kTileN; ++j) c[j] = acc[j];
}

template <Mode M, typename T>
DSV4_INLINE void run_rows(const float* a, const float* sa, const Plan& pl, int64_t rows, int64_t acol0, const T* wt,
                          int len, float* c, const float* sb) {
  const int64_t sblocks = pl.k / kActBlock;
  for (int64_t m = 0; m < rows; ++m) {
    if constexpr (M == Mode::kPlain) {
      row_block_plain(a + m * pl.k + acol0, wt, len, c + m * kTileN);
    } else {
      row_block<M>(a + m * pl.k + acol0, wt, len, c + m * kTileN, sb, sa[m * sblocks + acol0 / kActBlock]);
    }
  }
}

struct Item {
  int64_t m_first;  // row within the prepared rows
  int64_t rows;
  int64_t group;
  int64_t tile;
};

DSV4_SIMD_CLONES void run_item(const LinearParams& p, const Plan& pl, const float* a, const float* sa, int64_t m_base,
                               const Item& it) {
  float* c = thread_scratch<float>(Scratch::kGemmAcc, static_cast<size_t>(it.rows * kTileN));
  // The weight tile: doubles for FP8/FP4 (the exact block sums), floats for plain weights.
  void* tile = thread_scratch<double>(Scratch::kGemmTile, static_cast<size_t>(pl.block * kTileN));
  auto* wd = static_cast<double*>(tile);
  auto* wf = static_cast<float*>(tile);
  float sb[kTileN];
  std::fill(c, c + it.rows * kTileN, 0.0f);
  const int64_t n_in_group = it.tile * kTileN;
  const int64_t n0 = it.group * pl.ng + n_in_group;
  const int nvalid = static_cast<int>(std::min<int64_t>(kTileN, pl.ng - n_in_group));
  const float* arows = a + it.m_first * pl.k;
  const float* sarows = sa + it.m_first * (pl.k / kActBlock);
  for (int64_t k0 = 0; k0 < pl.kg; k0 += pl.block) {
    const int len = static_cast<int>(std::min<int64_t>(pl.block, pl.kg - k0));
    const int64_t acol0 = it.group * pl.kg + k0;
    switch (pl.mode) {
      case Mode::kFp8:
        load_block_tile(p.w, n0, nvalid, k0, len, wd, sb);
        run_rows<Mode::kFp8>(arows, sarows, pl, it.rows, acol0, wd, len, c, sb);
        break;
      case Mode::kFp4:
        load_block_tile(p.w, n0, nvalid, k0, len, wd, sb);
        run_rows<Mode::kFp4>(arows, sarows, pl, it.rows, acol0, wd, len, c, sb);
        break;
      case Mode::kPlain:
        load_plain_tile(p.w, n0, nvalid, k0, len, wf);
        run_rows<Mode::kPlain>(arows, sarows, pl, it.rows, acol0, wf, len, c, sb);
        break;
    }
  }
  for (int64_t m = 0; m < it.rows; ++m) {
    const int64_t row = m_base + it.m_first + m;
    const float* cm = c + m * kTileN;
    if (p.y_type == ActType::kBF16) {
      uint16_t* y = static_cast<uint16_t*>(p.y) + row * pl.y_stride + n0;
      for (int j = 0; j < nvalid; ++j) y[j] = float_to_bf16(cm[j]);
    } else {
      float* y = static_cast<float*>(p.y) + row * pl.y_stride + n0;
      std::copy(cm, cm + nvalid, y);
    }
  }
}

}  // namespace

void linear(ThreadPool& pool, const LinearParams& p) {
  const Plan pl = make_plan(p);
  const int64_t groups = p.groups;
  for (int64_t m_base = 0; m_base < p.rows; m_base += kSuperM) {
    const int64_t rows = std::min(kSuperM, p.rows - m_base);
    float* a = thread_scratch<float>(Scratch::kGemmA, static_cast<size_t>(rows * pl.k + rows * (pl.k / kActBlock)));
    float* sa = a + rows * pl.k;
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        prepare_row(p.x + (m_base + r) * pl.x_stride, pl, a + r * pl.k, sa + r * (pl.k / kActBlock));
    });
    const int64_t chunks = (rows + kChunkM - 1) / kChunkM;
    const int64_t items = chunks * groups * pl.tiles;
    pool.parallel_for(items, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t chunk = i % chunks, gt = i / chunks;
        const Item it{chunk * kChunkM, std::min(kChunkM, rows - chunk * kChunkM), gt / pl.tiles, gt % pl.tiles};
        run_item(p, pl, a, sa, m_base, it);
      }
    });
  }
}

}  // namespace dsv4::cpu
