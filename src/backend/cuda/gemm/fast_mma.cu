// The fast tier's block-scaled GEMM on the FP8 tensor cores (fast_mma.h).
//
// A CTA owns one row tile (8, 16 or 32 activation rows of one expert, grouped) and 4 x 64 (or 4 x 32)
// output columns, over one split of K. Each warp streams its weight rows through a private ring of
// 128-wide K stages (cp.async), so no CTA barrier runs inside the K loop; a dense call's first stages
// are issued before the wait on the previous kernel (weights are never written during a step).
// Activations are either resident (the tile's codes for the whole split, in shared memory once: copied,
// or quantized here from bf16 rows, which spares quantize_act's launch) or staged beside each weight
// stage when the split is too long to keep. With several splits, each CTA stores its partial sums and
// the last CTA of a tile adds every split in order (no second launch; counters reset by that CTA).
//
// Operand layouts (mma m16n8k32, e4m3): lane (g, t) holds k slots 4t..4t+3 and 16+4t..16+4t+3.
// FP8 keeps K in order: ldmatrix hands each lane bytes 4t..4t+3 of a 16-byte unit, and the
// activation fragments are two 32-bit words. FP4 rows hold packed e2m1 codes: ldmatrix hands a lane
// one word of eight codes (k = 8t..8t+7), decoded exactly by shifts (fp4_shift.h) to eight e4m3 bytes,
// the even codes in the lane's first slot group and the odd ones in its second; the activation
// fragment's eight bytes at 8t are split the same way. The K order inside one MMA is free as long as
// both operands agree, and it never leaves a scale block.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fast_mma.h"
#include "backend/cuda/gemm/fp4_shift.h"
#include "backend/cuda/gemm/mma_fp8.cuh"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kMaxKb = static_cast<int>(kFastMmaMaxK / 128);

// m16 fragments (16 output columns each) of a warp: fewer for tall tiles, whose accumulators would
// not fit the registers.
template <int TN>
constexpr int kFrags = static_cast<int>(fast_mma_cta_cols(TN) / kWarps / 16);
template <int TN>
constexpr int kWarpCols = 16 * kFrags<TN>;
// Stages of a warp's ring, one 128-wide K block each: with resident activations a stage is weights
// alone, and two stay in flight while one is multiplied.
template <bool kResident>
constexpr int kRing = kResident ? 3 : 2;

constexpr bool is_fp8(GemmWeightKind k) { return k == GemmWeightKind::kFp8; }
// Bytes of one weight row in a stage (128 codes), and the padding of staged or resident activation
// rows (gemm_plan.h: a fragment load's eight rows fall in distinct banks).
constexpr int row_bytes_of(GemmWeightKind k) { return is_fp8(k) ? 128 : 64; }
constexpr int act_pad_of(GemmWeightKind k) { return static_cast<int>(fast_mma_resident_pitch(k, 0)); }

template <GemmWeightKind KIND, int TN, bool kResident>
struct Stage {
  alignas(16) uint8_t w[kWarpCols<TN>][row_bytes_of(KIND)];
  alignas(16) uint8_t a[kResident ? 1 : TN][kResident ? 16 : 128 + act_pad_of(KIND)];
  uint32_t s[is_fp8(KIND) ? 1 : kWarpCols<TN>];  // FP4: each weight row's four ue8m0 block scales
};

template <GemmWeightKind KIND, int TN, bool kResident>
constexpr size_t ring_bytes() {
  return sizeof(Stage<KIND, TN, kResident>) * kRing<kResident> * kWarps;
}

// Physical 16-byte unit of unit u in weight row r: an ldmatrix phase's eight rows in distinct banks.
template <GemmWeightKind KIND>
__device__ __forceinline__ int unit_at(int r, int u) {
  return is_fp8(KIND) ? u ^ (r & 7) : u ^ ((r >> 1) & 3);
}

// One 128-wide K block's activation fragments: b[ks][j] for K step ks (32 wide) and the tile's n8
// fragment j, from rows of `pitch` bytes (staged or resident) starting at that block; FP4: a fragment's
// eight bytes by parity, as the weight codes decoded by shifts pair them.
template <GemmWeightKind KIND, int TN>
__device__ __forceinline__ void load_b(const uint8_t* rows, int64_t pitch, int gid, int tig,
                                       uint32_t (&b)[4][TN / 8][2]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
      const uint8_t* row = rows + (j * 8 + gid) * pitch + ks * 32;
      if constexpr (is_fp8(KIND)) {
        b[ks][j][0] = *reinterpret_cast<const uint32_t*>(row + 4 * tig);
        b[ks][j][1] = *reinterpret_cast<const uint32_t*>(row + 16 + 4 * tig);
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(row + 8 * tig);
        const ParityWords x = bytes_by_parity(v.x, v.y);
        b[ks][j][0] = x.even;
        b[ks][j][1] = x.odd;
      }
    }
  }
}

// FP8: the 128-wide block's four K steps into a fresh fragment, then promoted with sa·sb.
template <int TN, typename St>
__device__ __forceinline__ void multiply_fp8(const St& st, const uint32_t (&b)[4][TN / 8][2],
                                             const float (&s)[TN / 8][2], int lane, float (&C)[kFrags<TN>][TN / 8][4]) {
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

// FP4: each 32-wide block into a fresh fragment, promoted with sa (which carries the decoded codes'
// 2^6) and that block's weight scales, codes and scales decoded by shifts.
template <int TN, typename St>
__device__ __forceinline__ void multiply_fp4(const St& st, const uint32_t (&b)[4][TN / 8][2],
                                             const float (&sa)[TN / 8][2], int lane,
                                             float (&C)[kFrags<TN>][TN / 8][4]) {
  const int gid = lane / 4;
#pragma unroll
  for (int f = 0; f < kFrags<TN>; ++f) {
    const uint32_t sw[2] = {st.s[16 * f + gid], st.s[16 * f + gid + 8]};  // rows g and g + 8
    const uint32_t special[2] = {ue8m0_specials(sw[0]), ue8m0_specials(sw[1])};
#pragma unroll
    for (int jp = 0; jp < 2; ++jp) {
      uint32_t A[4];  // rows g, g + 8 of block 2jp, then of block 2jp + 1
      const int m = lane / 8, r = 16 * f + lane % 8 + (m % 2) * 8, u = 2 * jp + m / 2;
      ldsm_x4(smem_addr(&st.w[r][unit_at<GemmWeightKind::kFp4>(r, u) * 16]), A);
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int ks = 2 * jp + jj;
        const ParityWords lo = e2m1x8_e4m3_shifted(A[2 * jj]), hi = e2m1x8_e4m3_shifted(A[2 * jj + 1]);
        const uint32_t af[4] = {lo.even, hi.even, lo.odd, hi.odd};
        const float bs[2] = {__uint_as_float(ue8m0_bits(sw[0], special[0], ks)),
                             __uint_as_float(ue8m0_bits(sw[1], special[1], ks))};
#pragma unroll
        for (int j = 0; j < TN / 8; ++j) {
          float dd[4];
          mma_e4m3_zero_f16(dd, af, b[ks][j][0], b[ks][j][1]);
#pragma unroll
          for (int e = 0; e < 4; ++e) C[f][j][e] = fmaf(dd[e], sa[j][e % 2] * bs[e / 2], C[f][j][e]);
        }
      }
    }
  }
}

// The tile's bf16 rows over this split, quantized here (the exact quantizer, bit for bit: a warp per
// 128-block) into resident codes and their scales; rows past the tile zero. A warp takes four blocks
// at a time, their loads issued together, so the loads' latency is paid once per four.
__device__ void quantize_resident(const ExactBlockArgs& p, const Tile& t, int64_t k0, int nk, int tn, uint8_t* res,
                                  int64_t pitch, float* sa) {
  constexpr int kIlp = 4;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int live = t.cnt * nk;
  for (int i0 = warp * kIlp; i0 < live; i0 += kWarps * kIlp) {
    float v[kIlp][4];
#pragma unroll
    for (int u = 0; u < kIlp; ++u) {
      const int i = i0 + u;
      v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0.0f;
      if (i < live) bf16x4(p.x + (t.r0 + i / nk) * p.x_ld + k0 + (i % nk) * 128 + lane * 4, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kIlp; ++u) {
      const int i = i0 + u;
      if (i >= live) break;  // warp-uniform
      uint32_t packed = 0;
      const float s = quantize_lane4(v[u], packed);
      *reinterpret_cast<uint32_t*>(res + (i / nk) * pitch + (i % nk) * 128 + lane * 4) = packed;
      if (lane == 0) sa[i] = s;
    }
  }
  // Rows past the tile: zero codes and scales.
  const int words = static_cast<int>(pitch / 4);
  for (int i = static_cast<int>(threadIdx.x); i < (tn - t.cnt) * words; i += kThreads) {
    reinterpret_cast<uint32_t*>(res + (t.cnt + i / words) * pitch)[i % words] = 0u;
  }
  for (int i = live + static_cast<int>(threadIdx.x); i < tn * nk; i += kThreads) sa[i] = 0.0f;
}

template <GemmWeightKind KIND, int TN, bool kResident>
__global__ void __launch_bounds__(kThreads)
    fast_mma_kernel(const ExactBlockArgs p, int splits, float* partial, int32_t* counters) {
  using St = Stage<KIND, TN, kResident>;
  constexpr int kR = kRing<kResident>, kCols = kWarpCols<TN>;
  constexpr int kRowBytes = row_bytes_of(KIND), kUnits = kRowBytes / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int last_split;
  __shared__ float wscale[is_fp8(KIND) ? kWarps : 1][is_fp8(KIND) ? kMaxKb : 1];  // FP8: the warp's block scales
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int gid = lane / 4, tig = lane % 4;
  St* ring = reinterpret_cast<St*>(smem_raw) + warp * kR;
  // The column tiles of every group, then (a pair) those of the second weight; the split of K.
  const int64_t col_tiles = cdiv(p.ng, kWarps * kCols), half = p.groups * col_tiles;
  const bool second = blockIdx.y >= half;
  const int64_t tile = blockIdx.y - (second ? half : 0), g = tile / col_tiles;
  const int64_t c0 = (tile % col_tiles) * (kWarps * kCols) + warp * kCols;  // warp's first column in g
  const int cols = static_cast<int>(imin(kCols, p.ng - c0));                // valid columns (may be <= 0)
  const int nkb = static_cast<int>(p.kg / 128), split = static_cast<int>(blockIdx.z);
  const int kb0 = split * nkb / splits, nk = (split + 1) * nkb / splits - kb0;
  const int64_t row_bytes = is_fp8(KIND) ? p.kg : p.kg / 2, n0 = g * p.ng + c0;
  const uint8_t* w0 = nullptr;
  const uint8_t* s0 = nullptr;
  // Each lane copies one 16-byte unit column (u) of every kPass-th weight row: its source walks by a
  // fixed step, so a stage costs a few instructions a copy. Rows past the warp's columns are zero-filled
  // (their source stays at the first row, which exists).
  constexpr int kPass = kWarp / kUnits;
  const int lane_u = lane % kUnits, lane_r = lane / kUnits;
  const uint8_t* w_lane = nullptr;  // the lane's first row and unit
  const uint8_t* s_lane = nullptr;  // FP4: the lane's first scale row
  int64_t w_step = 0, s_step = 0;
  auto bind_weight = [&](int e) {
    const void* wv = p.offsets ? (second ? p.w_list_b : p.w_list)[e] : (second ? p.w_b : p.w);
    const uint8_t* ws =
        p.offsets ? (second ? p.w_scale_list_b : p.w_scale_list)[e] : (second ? p.w_scale_b : p.w_scale);
    w0 = static_cast<const uint8_t*>(wv) + n0 * row_bytes;
    s0 = is_fp8(KIND) ? ws + (n0 / 128) * nkb : ws + n0 * (p.kg / 32);
    w_lane = w0 + (lane_r < cols ? lane_r : 0) * row_bytes + lane_u * 16;
    w_step = kPass * row_bytes;
    s_lane = s0 + (lane < cols ? lane : 0) * (p.kg / 32);
    s_step = int64_t{kWarp} * (p.kg / 32);
  };
  auto issue_w = [&](int kb, St& st) {
    const uint8_t* src = w_lane + kb * kRowBytes;
    const uint8_t* first = src;
#pragma unroll 4
    for (int i = 0; i < kCols / kPass; ++i, src += w_step) {
      const int r = lane_r + kPass * i;
      cp_async<16>(&st.w[r][unit_at<KIND>(r, lane_u) * 16], r < cols ? src : first, r < cols ? 16 : 0);
    }
    if constexpr (!is_fp8(KIND)) {
      const uint8_t* ssrc = s_lane + kb * 4;
#pragma unroll
      for (int i = 0; i < kCols / kWarp; ++i, ssrc += s_step) {
        const int r = lane + kWarp * i;
        cp_async<4>(&st.s[r], r < cols ? ssrc : s_lane + kb * 4, r < cols ? 4 : 0);
      }
    }
  };
  Tile t;
  // Dense: the tile and the weights are known before the previous kernel ends; the first stages' weights
  // start streaming before the wait.
  const bool dense = !p.offsets;
  if (dense) {
    t.r0 = int64_t{blockIdx.x} * TN;
    t.cnt = static_cast<int>(imin(TN, p.rows - t.r0));
    bind_weight(0);
    if (cols > 0) {
      for (int s = 0; s < kR - 1 && s < nk; ++s) issue_w(kb0 + s, ring[s]);
    }
  }
  pdl_enter();
  if (!dense) {
    if (!find_expert_tile(p.offsets, p.experts, TN, blockIdx.x, t)) return;  // CTA-uniform
    bind_weight(t.e);
    if (cols > 0) {
      for (int s = 0; s < kR - 1 && s < nk; ++s) issue_w(kb0 + s, ring[s]);
    }
  }
  const int64_t k0 = g * p.kg + int64_t{kb0} * 128;  // this split's first activation column
  float* sa = reinterpret_cast<float*>(smem_raw + ring_bytes<KIND, TN, kResident>());
  uint8_t* res = reinterpret_cast<uint8_t*>(sa + TN * nk);
  const int64_t pitch = kResident ? fast_mma_resident_pitch(KIND, nk) : 128 + act_pad_of(KIND);
  auto issue_a = [&](int kb, St& st) {  // staged activations of one block
    for (int piece = lane; piece < TN * 8; piece += kWarp) {
      const int r = piece / 8, u = piece % 8, rs = r < t.cnt ? r : 0;
      cp_async<16>(&st.a[r][u * 16], p.codes + (t.r0 + rs) * p.codes_ld + g * p.kg + kb * 128 + u * 16,
                   r < t.cnt ? 16 : 0);
    }
  };
  if constexpr (kResident) {
    if (!p.x) {  // the tile's codes for the split, copied once by the whole CTA
      const int per_row = nk * 8;
      for (int i = static_cast<int>(threadIdx.x); i < TN * per_row; i += kThreads) {
        const int r = i / per_row, u = i % per_row, rs = r < t.cnt ? r : 0;
        cp_async<16>(res + r * pitch + u * 16, p.codes + (t.r0 + rs) * p.codes_ld + k0 + u * 16, r < t.cnt ? 16 : 0);
      }
    }
  } else if (cols > 0) {
    for (int s = 0; s < kR - 1 && s < nk; ++s) issue_a(kb0 + s, ring[s]);
  }
  cp_async_commit();  // every prologue copy in group 0; empty groups keep one group a stage
  for (int s = 1; s < kR - 1; ++s) cp_async_commit();
  if (kResident && p.x) {
    quantize_resident(p, t, k0, nk, TN, res, pitch, sa);
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < TN * nk; i += kThreads) {
      const int r = i / nk, j = i % nk;
      sa[i] = r < t.cnt ? __ldg(p.scales + (g * nkb + kb0 + j) * p.scale_ld + t.r0 + r) : 0.0f;
    }
  }
  if constexpr (is_fp8(KIND)) {  // the warp's weight block scales of the split, off the K loop's path
    for (int i = lane; cols > 0 && i < nk; i += kWarp) wscale[warp][i] = ue8m0_f(__ldg(s0 + kb0 + i));
  }
  if (kResident && !p.x) cp_async_wait<kR - 2>();  // the resident codes (group 0) before the barrier
  __syncthreads();

  float C[kFrags<TN>][TN / 8][4] = {};  // [fragment][n8 fragment][(col g, g + 8) x (row 2t, 2t + 1)]
  for (int i = 0; cols > 0 && i < nk; ++i) {
    // Stage i has landed (this lane's copies) and every lane is done with stage i - 1, whose buffer
    // the copies of stage i + kR - 1 take.
    cp_async_wait<kR - 2>();
    __syncwarp();
    if (i + kR - 1 < nk) {
      issue_w(kb0 + i + kR - 1, ring[(i + kR - 1) % kR]);
      if constexpr (!kResident) issue_a(kb0 + i + kR - 1, ring[(i + kR - 1) % kR]);
    }
    cp_async_commit();
    const St& st = ring[i % kR];
    uint32_t b[4][TN / 8][2];
    if constexpr (kResident) {
      load_b<KIND, TN>(res + i * 128, pitch, gid, tig, b);
    } else {
      load_b<KIND, TN>(&st.a[0][0], pitch, gid, tig, b);
    }
    float s[TN / 8][2];
    const float sw = is_fp8(KIND) ? wscale[is_fp8(KIND) ? warp : 0][is_fp8(KIND) ? i : 0] : 64.0f;  // FP4: the 2^6
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
  float* part = partial + ((second ? splits : 0) + split) * p.rows * p.n;  // used when splits > 1
#pragma unroll
  for (int f = 0; f < kFrags<TN>; ++f) {
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 16 * f + gid + (e / 2) * 8, r = j * 8 + 2 * tig + e % 2;
        if (col >= cols || r >= t.cnt) continue;
        if (splits > 1) {
          part[(t.r0 + r) * p.n + n0 + col] = C[f][j][e];
        } else {
          store_out(y, p.y_ld, p.y_f32, t.r0 + r, n0 + col, C[f][j][e]);
        }
      }
    }
  }
  if (splits == 1) return;
  // The last CTA of this tile to finish adds the splits' partial sums in split order.
  __threadfence();
  __syncthreads();
  int32_t* counter = counters + blockIdx.x * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last_split = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (!last_split) return;
  __threadfence();
  const float* base = partial + (second ? splits : 0) * p.rows * p.n;
  const int64_t cta_c0 = g * p.ng + (tile % col_tiles) * (kWarps * kCols);
  const int cta_cols = static_cast<int>(imin(kWarps * kCols, g * p.ng + p.ng - cta_c0));
  for (int i = static_cast<int>(threadIdx.x); i < t.cnt * cta_cols; i += kThreads) {
    const int64_t r = t.r0 + i / cta_cols, c = cta_c0 + i % cta_cols, at = r * p.n + c, stride = p.rows * p.n;
    float v = __ldcg(base + at);
    int s = 1;
    for (; s + 3 < splits; s += 4) {  // four loads in flight, added in split order
      const float v1 = __ldcg(base + s * stride + at), v2 = __ldcg(base + (s + 1) * stride + at);
      const float v3 = __ldcg(base + (s + 2) * stride + at), v4 = __ldcg(base + (s + 3) * stride + at);
      v += v1;
      v += v2;
      v += v3;
      v += v4;
    }
    for (; s < splits; ++s) v += __ldcg(base + s * stride + at);
    store_out(y, p.y_ld, p.y_f32, r, c, v);
  }
  if (threadIdx.x == 0) *counter = 0;  // ready for the next call
}

template <GemmWeightKind KIND, int TN, bool kResident>
void launch(const ExactBlockArgs& a, int splits, float* partial, int32_t* counters, cudaStream_t stream) {
  constexpr size_t kMaxSmem = ring_bytes<KIND, TN, kResident>() + sizeof(float) * TN * kMaxKb +
                              (kResident ? static_cast<size_t>(kFastMmaResidentBytes) : 0);
  const auto kernel = fast_mma_kernel<KIND, TN, kResident>;
  allow_dynamic_smem(kernel, kMaxSmem);
  const int64_t nk = cdiv(a.kg / 128, splits);
  const size_t smem = ring_bytes<KIND, TN, kResident>() + sizeof(float) * TN * nk +
                      (kResident ? static_cast<size_t>(TN * fast_mma_resident_pitch(a.kind, nk)) : 0);
  const int64_t tiles = row_tiles(a.rows, TN, a.offsets ? a.experts : 0);
  const int64_t cols = (a.y_b ? 2 : 1) * a.groups * cdiv(a.ng, fast_mma_cta_cols(TN));
  DSV4_CUDA_REQUIRE(tiles < (int64_t{1} << 31) && cols <= 65535 && splits <= 65535, "fast mma gemm: grid out of range");
  launch_kernel(kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(cols), static_cast<unsigned>(splits)),
                kThreads, smem, stream, a, splits, partial, counters);
}

template <GemmWeightKind KIND, int TN>
void launch_tile(const ExactBlockArgs& a, const FastMmaShape& s, float* partial, int32_t* counters, cudaStream_t st) {
  return s.resident ? launch<KIND, TN, true>(a, s.splits, partial, counters, st)
                    : launch<KIND, TN, false>(a, s.splits, partial, counters, st);
}

template <GemmWeightKind KIND>
void launch_kind(const ExactBlockArgs& a, const FastMmaShape& s, float* partial, int32_t* counters, cudaStream_t st) {
  switch (s.tile_rows) {
    case 8:
      return launch_tile<KIND, 8>(a, s, partial, counters, st);
    case 16:
      return launch_tile<KIND, 16>(a, s, partial, counters, st);
    case 32:
      return launch_tile<KIND, 32>(a, s, partial, counters, st);
    default:
      DSV4_CUDA_REQUIRE(false, "fast mma gemm: tile rows must be 8, 16 or 32");
  }
}

}  // namespace

int64_t fast_mma_scratch_floats(const ExactBlockArgs& a, const FastMmaShape& s) {
  return s.splits > 1 ? (a.y_b ? 2 : 1) * int64_t{s.splits} * a.rows * a.n : 0;
}

int64_t fast_mma_counters(const ExactBlockArgs& a, const FastMmaShape& s) {
  if (s.splits <= 1) return 0;
  return row_tiles(a.rows, s.tile_rows, a.offsets ? a.experts : 0) * (a.y_b ? 2 : 1) * a.groups *
         cdiv(a.ng, fast_mma_cta_cols(s.tile_rows));
}

bool fast_mma_takes_bf16(const ExactBlockArgs& a, const FastMmaShape& s) {
  // Each warp quantizes at most 16 of its tile's blocks: beyond that quantize_act's launch costs less.
  const int64_t rows = a.rows < s.tile_rows ? a.rows : s.tile_rows;
  const bool short_work = rows * cdiv(a.kg / 128, s.splits) <= 16 * kWarps;
  return s.resident && short_work && !a.offsets && a.x && aligned_to(a.x, 16) && a.x_ld % 8 == 0;
}

void fast_mma_gemm(const ExactBlockArgs& a, const FastMmaShape& s, float* partial, int32_t* counters,
                   cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_mma_takes(a.kind, a.kg, a.ng, a.groups) && a.ng * a.groups == a.n,
                    "fast mma gemm: unsupported weight shape");
  if (a.x) {
    DSV4_CUDA_REQUIRE(fast_mma_takes_bf16(a, s),
                      "fast mma gemm: bf16 rows need a resident dense plan, 16-byte aligned");
  } else {
    DSV4_CUDA_REQUIRE(a.codes && a.scales && a.codes_ld % 16 == 0 && aligned_to(a.codes, 16) && a.scale_ld >= a.rows,
                      "fast mma gemm: needs 16-byte aligned activation codes and their scales");
  }
  DSV4_CUDA_REQUIRE(a.offsets ? a.experts > 0 && a.w_list && a.w_scale_list : a.w && a.w_scale && aligned_to(a.w, 16),
                    "fast mma gemm: missing or unaligned weights");
  DSV4_CUDA_REQUIRE(s.splits >= 1 && s.splits <= a.kg / 128 && (s.splits == 1 || (partial && counters)),
                    "fast mma gemm: bad split or missing split scratch");
  DSV4_CUDA_REQUIRE(
      !s.resident || s.tile_rows * fast_mma_resident_pitch(a.kind, cdiv(a.kg / 128, s.splits)) <= kFastMmaResidentBytes,
      "fast mma gemm: the split is too long for resident activations");
  DSV4_CUDA_REQUIRE(a.y_ld >= a.n, "fast mma gemm: bad output stride");
  if (a.rows <= 0) return;
  if (a.kind == GemmWeightKind::kFp8) {
    launch_kind<GemmWeightKind::kFp8>(a, s, partial, counters, stream);
  } else {
    launch_kind<GemmWeightKind::kFp4>(a, s, partial, counters, stream);
  }
}

}  // namespace dsv4::cuda
