// The fast tier's block-scaled GEMM on the FP8 tensor cores (fast_mma.h).
//
// A CTA owns one row tile (8, 16 or 32 activation rows of one expert, grouped) and 4 x 64 output
// columns, over one split of K; each warp streams its 64 weight rows and the tile's activation codes
// through a private ring of 128-wide K stages (cp.async), so no CTA barrier runs inside the K loop.
//
// Operand layouts (mma m16n8k32, e4m3): lane (g, t) holds k slots 4t..4t+3 and 16+4t..16+4t+3.
// FP8 keeps K in order: ldmatrix hands each lane bytes 4t..4t+3 of a 16-byte unit, and the
// activation fragments are two 32-bit words. FP4 rows hold packed e2m1 codes: ldmatrix hands a lane
// one word of eight codes (k = 8t..8t+7), widened exactly to eight e4m3 bytes that fill both of the
// lane's slot groups; the activation fragment is then the eight contiguous bytes at 8t. The K order
// inside one MMA is free as long as both operands agree, and it never leaves a scale block.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/fast_mma.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
// m16 fragments (16 output columns each) of a warp: fewer for tall tiles, whose accumulators
// would not fit the registers.
template <int TN>
constexpr int kFrags = static_cast<int>(fast_mma_cta_cols(TN) / kWarps / 16);
template <int TN>
constexpr int kWarpCols = 16 * kFrags<TN>;
// Stages of a warp's ring, one 128-wide K block each: one in flight while the other is multiplied.
constexpr int kRing = 2;
constexpr int kMaxKb = static_cast<int>(kFastMmaMaxK / 128);

constexpr bool is_fp8(GemmWeightKind k) { return k == GemmWeightKind::kFp8; }
// Bytes of one weight row in a stage (128 codes), and of one activation row: padded so that a
// fragment load's eight rows fall in distinct banks (32-bit loads at 4t for FP8, 64-bit at 8t for FP4).
constexpr int row_bytes_of(GemmWeightKind k) { return is_fp8(k) ? 128 : 64; }
constexpr int act_stride_of(GemmWeightKind k) { return is_fp8(k) ? 144 : 160; }

template <GemmWeightKind KIND, int TN>
struct Stage {
  alignas(16) uint8_t w[kWarpCols<TN>][row_bytes_of(KIND)];
  alignas(16) uint8_t a[TN][act_stride_of(KIND)];
  uint32_t s[is_fp8(KIND) ? 1 : kWarpCols<TN>];  // FP4: each weight row's four ue8m0 block scales
};

// Physical 16-byte unit of unit u in weight row r: an ldmatrix phase's eight rows in distinct banks.
template <GemmWeightKind KIND>
__device__ __forceinline__ int unit_at(int r, int u) {
  return is_fp8(KIND) ? u ^ (r & 7) : u ^ ((r >> 1) & 3);
}

// Eight e2m1 codes (nibble i = code i) as eight e4m3 bytes, exactly: the magnitude by table, the
// sign bit moved to bit 7.
__device__ __forceinline__ uint2 e2m1x8_e4m3(uint32_t v) {
  constexpr uint32_t kLo = 0x3c383000u, kHi = 0x4c484440u;              // e4m3 of {0, .5, 1, 1.5} and {2, 3, 4, 6}
  const uint32_t mag = v & 0x77777777u, sign = (v & 0x88888888u) >> 1;  // sign nibble 4 picks 0x80
  uint2 r;
  r.x = __byte_perm(kLo, kHi, mag) | __byte_perm(0u, 0x80808080u, sign);
  r.y = __byte_perm(kLo, kHi, mag >> 16) | __byte_perm(0u, 0x80808080u, sign >> 16);
  return r;
}

// d = a·b (+ d) on the FP8 tensor cores, fp32 accumulation.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_e4m3_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

template <GemmWeightKind KIND, int TN>
constexpr size_t ring_bytes() {
  return sizeof(Stage<KIND, TN>) * kRing * kWarps;
}

// The block's activation fragments: b[ks][j] for K step ks (32 wide) and the tile's n8 fragment j.
template <GemmWeightKind KIND, int TN>
__device__ __forceinline__ void load_b(const Stage<KIND, TN>& st, int gid, int tig, uint32_t (&b)[4][TN / 8][2]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
      const uint8_t* row = st.a[j * 8 + gid] + ks * 32;
      if constexpr (is_fp8(KIND)) {
        b[ks][j][0] = *reinterpret_cast<const uint32_t*>(row + 4 * tig);
        b[ks][j][1] = *reinterpret_cast<const uint32_t*>(row + 16 + 4 * tig);
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(row + 8 * tig);
        b[ks][j][0] = v.x;
        b[ks][j][1] = v.y;
      }
    }
  }
}

// FP8: the 128-wide block's four K steps into a fresh fragment, then promoted with sa·sb.
template <int TN>
__device__ __forceinline__ void multiply_fp8(const Stage<GemmWeightKind::kFp8, TN>& st,
                                             const uint32_t (&b)[4][TN / 8][2], const float (&s)[TN / 8][2], int lane,
                                             float (&C)[kFrags<TN>][TN / 8][4]) {
#pragma unroll
  for (int f = 0; f < kFrags<TN>; ++f) {
    float d[TN / 8][4];
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t A[4];
      const int m = lane / 8, r = 16 * f + lane % 8 + (m % 2) * 8, u = 2 * ks + m / 2;
      ldsm_x4(smem_addr(&st.w[r][unit_at<GemmWeightKind::kFp8>(r, u) * 16]), A);
#pragma unroll
      for (int j = 0; j < TN / 8; ++j) {
        if (ks == 0) {
          mma_e4m3_zero(d[j], A, b[ks][j][0], b[ks][j][1]);
        } else {
          mma_e4m3(d[j], A, b[ks][j][0], b[ks][j][1]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) C[f][j][e] = fmaf(d[j][e], s[j][e % 2], C[f][j][e]);
    }
  }
}

// FP4: each 32-wide block into a fresh fragment, promoted with sa and that block's weight scales.
template <int TN>
__device__ __forceinline__ void multiply_fp4(const Stage<GemmWeightKind::kFp4, TN>& st,
                                             const uint32_t (&b)[4][TN / 8][2], const float (&sa)[TN / 8][2], int lane,
                                             float (&C)[kFrags<TN>][TN / 8][4]) {
  const int gid = lane / 4;
#pragma unroll
  for (int f = 0; f < kFrags<TN>; ++f) {
    const uint32_t sw[2] = {st.s[16 * f + gid], st.s[16 * f + gid + 8]};  // rows g and g + 8
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      uint32_t A[4];  // rows g, g + 8 of block 2jp, then of block 2jp + 1
      const int m = lane / 8, r = 16 * f + lane % 8 + (m % 2) * 8, u = 2 * jp + m / 2;
      ldsm_x4(smem_addr(&st.w[r][unit_at<GemmWeightKind::kFp4>(r, u) * 16]), A);
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int ks = 2 * jp + jj;
        const uint2 lo = e2m1x8_e4m3(A[2 * jj]), hi = e2m1x8_e4m3(A[2 * jj + 1]);
        const uint32_t af[4] = {lo.x, hi.x, lo.y, hi.y};
        const float bs[2] = {ue8m0_f((sw[0] >> (8 * ks)) & 255u), ue8m0_f((sw[1] >> (8 * ks)) & 255u)};
#pragma unroll
        for (int j = 0; j < TN / 8; ++j) {
          float d[4];
          mma_e4m3_zero(d, af, b[ks][j][0], b[ks][j][1]);
#pragma unroll
          for (int e = 0; e < 4; ++e) C[f][j][e] = fmaf(d[e], sa[j][e % 2] * bs[e / 2], C[f][j][e]);
        }
      }
    }
  }
}

template <GemmWeightKind KIND, int TN>
__global__ void __launch_bounds__(kThreads) fast_mma_kernel(const ExactBlockArgs p, int splits, float* partial) {
  using St = Stage<KIND, TN>;
  pdl_enter();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  St* ring = reinterpret_cast<St*>(smem_raw) + (threadIdx.x / kWarp) * kRing;
  Tile t;
  if (!row_tile(p, TN, t)) return;
  // The column tiles of every group, then (a pair) those of the second weight.
  constexpr int kCols = kWarpCols<TN>;
  const int64_t col_tiles = cdiv(p.ng, kWarps * kCols), half = p.groups * col_tiles;
  const bool second = blockIdx.y >= half;
  const int64_t tile = blockIdx.y - (second ? half : 0), g = tile / col_tiles;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int gid = lane / 4, tig = lane % 4;
  const int64_t c0 = (tile % col_tiles) * (kWarps * kCols) + warp * kCols;  // warp's first column in g
  const int cols = static_cast<int>(imin(kCols, p.ng - c0));                // valid columns (may be <= 0)
  const int nkb = static_cast<int>(p.kg / 128), split = static_cast<int>(blockIdx.z);
  const int kb0 = split * nkb / splits, nk = (split + 1) * nkb / splits - kb0;
  const void* wv = p.offsets ? (second ? p.w_list_b : p.w_list)[t.e] : (second ? p.w_b : p.w);
  const uint8_t* ws =
      p.offsets ? (second ? p.w_scale_list_b : p.w_scale_list)[t.e] : (second ? p.w_scale_b : p.w_scale);
  constexpr int kRowBytes = row_bytes_of(KIND), kUnits = kRowBytes / 16;
  const int64_t row_bytes = is_fp8(KIND) ? p.kg : p.kg / 2, n0 = g * p.ng + c0;
  const auto* w0 = static_cast<const uint8_t*>(wv) + n0 * row_bytes;
  const uint8_t* s0 = is_fp8(KIND) ? ws + (n0 / 128) * nkb : ws + n0 * (p.kg / 32);
  const uint8_t* a0 = p.codes + t.r0 * p.codes_ld + g * p.kg;

  auto issue = [&](int kb, St& st) {
    for (int piece = lane; piece < kCols * kUnits; piece += kWarp) {
      const int r = piece / kUnits, u = piece % kUnits, rs = r < cols ? r : cols - 1;
      cp_async<16>(&st.w[r][unit_at<KIND>(r, u) * 16], w0 + rs * row_bytes + kb * kRowBytes + u * 16,
                   r < cols ? 16 : 0);
    }
    for (int piece = lane; piece < TN * 8; piece += kWarp) {
      const int r = piece / 8, u = piece % 8, rs = r < t.cnt ? r : 0;
      cp_async<16>(&st.a[r][u * 16], a0 + rs * p.codes_ld + kb * 128 + u * 16, r < t.cnt ? 16 : 0);
    }
    if constexpr (!is_fp8(KIND)) {
#pragma unroll
      for (int i = 0; i < kCols / kWarp; ++i) {
        const int r = lane + kWarp * i, rs = r < cols ? r : cols - 1;
        cp_async<4>(&st.s[r], s0 + rs * (p.kg / 32) + kb * 4, r < cols ? 4 : 0);
      }
    }
  };
  if (cols > 0) {
    for (int s = 0; s < kRing - 1; ++s) {
      if (s < nk) issue(kb0 + s, ring[s]);
      cp_async_commit();
    }
  }
  // The tile rows' activation scales of this split, beside the rings (overlaps the first copies).
  float* sa = reinterpret_cast<float*>(smem_raw + ring_bytes<KIND, TN>());
  for (int i = static_cast<int>(threadIdx.x); i < TN * nk; i += kThreads) {
    const int r = i / nk, j = i % nk;
    sa[i] = r < t.cnt ? __ldg(p.scales + (g * nkb + kb0 + j) * p.scale_ld + t.r0 + r) : 0.0f;
  }
  __syncthreads();
  if (cols <= 0) return;

  float C[kFrags<TN>][TN / 8][4] = {};  // [fragment][n8 fragment][(col g, g + 8) x (row 2t, 2t + 1)]
  for (int i = 0; i < nk; ++i) {
    // Stage i has landed (this lane's copies) and every lane is done with stage i - 1, whose buffer
    // the copies of stage i + kRing - 1 take.
    cp_async_wait<kRing - 2>();
    __syncwarp();
    if (i + kRing - 1 < nk) issue(kb0 + i + kRing - 1, ring[(i + kRing - 1) % kRing]);
    cp_async_commit();
    const St& st = ring[i % kRing];
    uint32_t b[4][TN / 8][2];
    load_b<KIND, TN>(st, gid, tig, b);
    float s[TN / 8][2];
    const float sw = is_fp8(KIND) ? ue8m0_f(__ldg(s0 + kb0 + i)) : 1.0f;
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) s[j][h] = sa[(j * 8 + 2 * tig + h) * nk + i] * sw;
    }
    if constexpr (is_fp8(KIND)) {
      multiply_fp8<TN>(st, b, s, lane, C);
    } else {
      multiply_fp4<TN>(st, b, s, lane, C);
    }
  }
  void* y = second ? p.y_b : p.y;
  float* part = splits > 1 ? partial + ((second ? splits : 0) + split) * p.rows * p.n : nullptr;
#pragma unroll
  for (int f = 0; f < kFrags<TN>; ++f) {
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 16 * f + gid + (e / 2) * 8, r = j * 8 + 2 * tig + e % 2;
        if (col >= cols || r >= t.cnt) continue;
        if (part) {
          part[(t.r0 + r) * p.n + n0 + col] = C[f][j][e];
        } else {
          store_out(y, p.y_ld, p.y_f32, t.r0 + r, n0 + col, C[f][j][e]);
        }
      }
    }
  }
}

// The splits' partial sums added in split order into y (and y_b): rows of the call only (grouped:
// [offsets[0], offsets[experts])), so rows past the experts' stay untouched.
__global__ void fast_mma_reduce_kernel(const ExactBlockArgs p, int splits, const float* partial) {
  pdl_enter();
  int64_t lo = 0, hi = p.rows;
  if (p.offsets) lo = p.offsets[0], hi = imin(p.offsets[p.experts], p.rows);
  const int64_t per = p.rows * p.n, halves = p.y_b ? 2 : 1;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < halves * per;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t h = i / per, at = i % per, r = at / p.n;
    if (r < lo || r >= hi) continue;
    const float* src = partial + h * splits * per + at;
    float v = src[0];
    for (int s = 1; s < splits; ++s) v += src[s * per];
    store_out(h ? p.y_b : p.y, p.y_ld, p.y_f32, r, at % p.n, v);
  }
}

template <GemmWeightKind KIND, int TN>
void launch(const ExactBlockArgs& a, int splits, float* partial, cudaStream_t stream) {
  constexpr size_t kMaxSmem = ring_bytes<KIND, TN>() + sizeof(float) * TN * kMaxKb;
  static const bool attr = [] {
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(fast_mma_kernel<KIND, TN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kMaxSmem)));
    return true;
  }();
  (void)attr;
  const int64_t nk = cdiv(a.kg / 128, splits);
  const size_t smem = ring_bytes<KIND, TN>() + sizeof(float) * TN * nk;
  const int64_t tiles = row_tiles(a.rows, TN, a.offsets ? a.experts : 0);
  const int64_t cols = (a.y_b ? 2 : 1) * a.groups * cdiv(a.ng, fast_mma_cta_cols(TN));
  DSV4_CUDA_REQUIRE(tiles < (int64_t{1} << 31) && cols <= 65535 && splits <= 65535, "fast mma gemm: grid out of range");
  launch_kernel(fast_mma_kernel<KIND, TN>, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(cols), splits),
                kThreads, smem, stream, a, splits, partial);
}

template <GemmWeightKind KIND>
void launch_kind(const ExactBlockArgs& a, const FastMmaShape& s, float* partial, cudaStream_t stream) {
  switch (s.tile_rows) {
    case 8:
      return launch<KIND, 8>(a, s.splits, partial, stream);
    case 16:
      return launch<KIND, 16>(a, s.splits, partial, stream);
    case 32:
      return launch<KIND, 32>(a, s.splits, partial, stream);
    default:
      DSV4_CUDA_REQUIRE(false, "fast mma gemm: tile rows must be 8, 16 or 32");
  }
}

bool aligned_to(const void* q, uintptr_t n) { return reinterpret_cast<uintptr_t>(q) % n == 0; }

}  // namespace

int64_t fast_mma_scratch_floats(const ExactBlockArgs& a, const FastMmaShape& s) {
  return s.splits > 1 ? (a.y_b ? 2 : 1) * int64_t{s.splits} * a.rows * a.n : 0;
}

void fast_mma_gemm(const ExactBlockArgs& a, const FastMmaShape& s, float* partial, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_mma_takes(a.kind, a.kg, a.ng, a.groups) && a.ng * a.groups == a.n,
                    "fast mma gemm: unsupported weight shape");
  DSV4_CUDA_REQUIRE(
      !a.x && a.codes && a.scales && a.codes_ld % 16 == 0 && aligned_to(a.codes, 16) && a.scale_ld >= a.rows,
      "fast mma gemm: needs 16-byte aligned activation codes and their scales");
  DSV4_CUDA_REQUIRE(a.offsets ? a.experts > 0 && a.w_list && a.w_scale_list : a.w && a.w_scale && aligned_to(a.w, 16),
                    "fast mma gemm: missing or unaligned weights");
  DSV4_CUDA_REQUIRE(s.splits >= 1 && s.splits <= a.kg / 128 && (s.splits == 1 || partial),
                    "fast mma gemm: bad split or missing split scratch");
  DSV4_CUDA_REQUIRE(a.y_ld >= a.n, "fast mma gemm: bad output stride");
  if (a.rows <= 0) return;
  if (a.kind == GemmWeightKind::kFp8) {
    launch_kind<GemmWeightKind::kFp8>(a, s, partial, stream);
  } else {
    launch_kind<GemmWeightKind::kFp4>(a, s, partial, stream);
  }
  if (s.splits > 1) {
    const int64_t total = (a.y_b ? 2 : 1) * a.rows * a.n;
    const auto blocks = static_cast<unsigned>(imin(cdiv(total, 256), 4096));
    launch_kernel(fast_mma_reduce_kernel, dim3(blocks), 256, 0, stream, a, s.splits,
                  static_cast<const float*>(partial));
  }
}

}  // namespace dsv4::cuda
