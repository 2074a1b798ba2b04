// The fast tier's few-row block-scaled GEMM (fast_gemv.h).
//
// Lane (g, t) of a warp holds weight rows g and g + 8 of the warp's 16 and activation row g of the
// tile. For one 128-wide K block it keeps eight operand words a row, word j covering four K values:
//   FP8  bytes (j / 4)·64 + 16t + 4(j % 4): two 16-byte loads a row (pieces at 16t and 64 + 16t);
//   FP4  codes 32(j / 2) + 8t + 4(j % 2): word ks of a row is the lane's eight codes of 32-wide scale
//        block ks (row bytes 16ks + 4t, handed over by ldmatrix from the warp's staged block), decoded by
//        shifts (fp4_shift.h) to e4m3 words 2ks and 2ks + 1 of codes 8t + 0, 2, 4, 6 and 8t + 1, 3, 5, 7,
//        the activation's bytes split alike.
// MMA step ks then multiplies words 2ks and 2ks + 1 of both operands: every K slot holds the same K
// index in the weight and the activation, and an FP4 step never leaves its scale block.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fast_gemv.h"
#include "backend/cuda/gemm/fp4_shift.h"
#include "backend/cuda/gemm/mma_fp8.cuh"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTm = kFastGemvTileRows;

// The weight operand as the kernel reads it: FP8 blocks, or FP4 per 32-wide scale block (codes and scale
// bytes decoded by shifts, four promotions a 128-wide block; one re-encoded e5m2 block a 128, and the
// codes decoded by table, measured slower).
enum class Form { kFp8, kFp4 };
constexpr bool is_fp8(Form f) { return f == Form::kFp8; }

// Element offset inside a 128-wide block of the lane's activation words 2q and 2q + 1 (eight
// consecutive values), for lane column t.
template <Form F>
__device__ __forceinline__ int piece_k(int q, int t) {
  return is_fp8(F) ? (q / 2) * 64 + 16 * t + 8 * (q % 2) : 32 * q + 8 * t;
}

// A weight load that is read once: not kept in L1. Volatile, so that a dense call's first block stays
// ahead of the wait on the previous kernel.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// One K block of a lane's weights: rows g and g + 8 (FP4: one packed word a scale block) and their
// scales (FP8: ws[0] the 16 rows' block scale; FP4: each row's four).
template <Form F>
struct WeightBlock {
  uint32_t w[2][is_fp8(F) ? 8 : 4];
  uint32_t ws[2];
};

// Weight blocks in flight a warp (the kernel's D): the loads of the next D - 1 blocks overlap each
// multiply. 4 for both kinds (an FP8 block is 2 KB a warp, FP4 half that): 6 FP4 blocks measured no
// faster on the H200 (docs/perf-history.md, session 23), 8 spill at the 128 registers of 2 CTAs an SM.
constexpr int kDepth = kFastGemvDepth;

// Where a lane reads: its two weight rows (clamped to rows that exist) and their scales.
struct Rows {
  const uint8_t* w[2];
  const uint8_t* s[2];  // FP8: both the rows' block-scale row; FP4: each row's scales
};

// FP4: a warp's 16 rows of a K block (64 bytes each) copied by cp.async, 16 bytes a lane, into a ring slot
// of its own; ldmatrix then hands lane (g, t) its operand words (matrix ks: row g's bytes 16ks + 4t).
// Measured 5-21% faster than four 4-byte loads a row straight into the registers, each touching eight
// rows' lines (docs/perf.md). Rows sit unpadded, their 16-byte units swizzled (unit u of row r at
// u ^ ((r >> 1) & 3)): ldmatrix's eight row reads of a phase and the copies' eight units of a phase each
// fall in distinct banks (rows padded to 80 bytes left the copies two-way conflicted), in 8 KB less a CTA.
constexpr int kStagePitch = 64;
constexpr int kStageSlot = 16 * kStagePitch;
__device__ __forceinline__ int stage_unit(int r, int u) { return u ^ ((r >> 1) & 3); }

// FP8: the lane's two 16-byte pieces of rows g and g + 8 and the rows' block scale, into registers.
__device__ __forceinline__ void load_weights(const Rows& r, int kb, int t, WeightBlock<Form::kFp8>& o) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = r.w[h] + kb * 128 + 16 * t;
    const uint4 x = ld_stream16(q), y = ld_stream16(q + 64);
    o.w[h][0] = x.x, o.w[h][1] = x.y, o.w[h][2] = x.z, o.w[h][3] = x.w;
    o.w[h][4] = y.x, o.w[h][5] = y.y, o.w[h][6] = y.z, o.w[h][7] = y.w;
  }
  o.ws[0] = r.s[0][kb];
}

// FP4: lane (g, t) copies rows g and g + 8's 16 bytes at 16t of block kb into the slot (one commit group
// a block) and loads their scale words.
__device__ __forceinline__ void stage_weights(const Rows& r, int kb, int g, int t, uint8_t* slot,
                                              WeightBlock<Form::kFp4>& o) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g + 8 * h;
    cp_async<16>(slot + row * kStagePitch + 16 * stage_unit(row, t), r.w[h] + kb * 64 + 16 * t);
    o.ws[h] = __ldg(reinterpret_cast<const uint32_t*>(r.s[h] + kb * 4));
  }
  cp_async_commit();
}

// The slot's codes into the lane's operand words, once its copies (the oldest of D groups) have landed.
template <int D>
__device__ __forceinline__ void unstage_weights(const uint8_t* slot, int lane, WeightBlock<Form::kFp4>& o) {
  cp_async_wait<D - 1>();
  __syncwarp();
  const int row = lane % 8;  // rows row and row + 8 share the swizzle
  const uint32_t a = smem_addr(slot + row * kStagePitch + 16 * stage_unit(row, lane / 8));
  ldsm_x4(a, o.w[0]);
  ldsm_x4(a + 8 * kStagePitch, o.w[1]);
  __syncwarp();  // every lane's reads before the slot's next copies
}

// Bytes of a tile row's codes in shared memory: padded so that a fragment load's rows fall in
// distinct banks (FP8: 16-byte loads of rows g and g + 1 at 64 bytes apart; FP4: 8-byte loads of four
// rows 32 apart). The rows' scales [nkb][kTm] follow the kTm rows (a lane's two rows side by side: one load,
// no bank conflict).
template <Form F>
__host__ __device__ constexpr int64_t act_pitch(int64_t kg) {
  return kg + (is_fp8(F) ? 64 : 32);
}

// acc += block kb's products of the lane's fragment (weight rows g, g + 8 x tile rows 2t, 2t + 1), the
// activation operand read from the shared codes of tile row g (lanes past the tile's rows read its last row:
// their MMA columns are outputs that are never stored).
template <Form F>
__device__ __forceinline__ void multiply(const WeightBlock<F>& o, const uint8_t* acts, const float* sa_rows,
                                         int64_t pitch, int kb, int cnt, int g, int t, float (&acc)[4]) {
  uint32_t b[8];
  const uint8_t* row = acts + (g < cnt ? g : cnt - 1) * pitch + kb * 128;
  if constexpr (is_fp8(F)) {  // pieces 0-1 and 2-3 are 16 contiguous bytes each
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 v = *reinterpret_cast<const uint4*>(row + piece_k<F>(2 * h, t));
      b[4 * h] = v.x, b[4 * h + 1] = v.y, b[4 * h + 2] = v.z, b[4 * h + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint2 v = *reinterpret_cast<const uint2*>(row + piece_k<F>(q, t));
      b[2 * q] = v.x, b[2 * q + 1] = v.y;
    }
  }
  const float2 sa2 = *reinterpret_cast<const float2*>(sa_rows + kb * kTm + 2 * t);
  const float sa[2] = {sa2.x, sa2.y};
  if constexpr (is_fp8(F)) {
    float d[4];
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t a[4] = {o.w[0][2 * ks], o.w[1][2 * ks], o.w[0][2 * ks + 1], o.w[1][2 * ks + 1]};
      if (ks == 0) {
        mma_e4m3_zero(d, a, b[0], b[1]);
      } else {
        mma_e4m3(d, a, b[2 * ks], b[2 * ks + 1]);
      }
    }
    const float sw = ue8m0_f(o.ws[0]);
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] = fmaf(d[e], sa[e % 2] * sw, acc[e]);
  } else {  // codes as 2^-6 times their values by nibble parity, the activation bytes split alike
    const float sa64[2] = {sa[0] * 64.0f, sa[1] * 64.0f};
    const uint32_t special[2] = {ue8m0_specials(o.ws[0]), ue8m0_specials(o.ws[1])};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const ParityWords lo = e2m1x8_e4m3_shifted(o.w[0][ks]), hi = e2m1x8_e4m3_shifted(o.w[1][ks]);
      const ParityWords x = bytes_by_parity(b[2 * ks], b[2 * ks + 1]);
      const uint32_t a[4] = {lo.even, hi.even, lo.odd, hi.odd};
      float d[4];
      mma_e4m3_zero_f16(d, a, x.even, x.odd);
      const float bs[2] = {__uint_as_float(ue8m0_bits(o.ws[0], special[0], ks)),
                           __uint_as_float(ue8m0_bits(o.ws[1], special[1], ks))};
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = fmaf(d[e], sa64[e % 2] * bs[e / 2], acc[e]);
    }
  }
}

// v / s for a power-of-two scale s as v · (1/s): the same correctly rounded value, without a division.
__device__ __forceinline__ uint32_t act_codes2(uint32_t bf16_pair, float inv) {
  const float a = __uint_as_float(bf16_pair << 16), b = __uint_as_float(bf16_pair & 0xffff0000u);
  const float2 v = make_float2(fminf(fmaxf(a * inv, -448.0f), 448.0f), fminf(fmaxf(b * inv, -448.0f), 448.0f));
  return __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
}

// Lane quad g quantizes tile row g's 128-block (lane t: values 32t..32t+31, loaded as raw) into the
// shared codes, with the exact quantizer's scale (the quad's amax), stored by lane t = 0. Every lane of
// the warp calls it (the quads exchange through shuffles); only rows of the tile store.
__device__ __forceinline__ void quantize_quad(const uint4 (&raw)[4], bool store, uint8_t* codes, float* scale, int t) {
  float amax = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t u[4] = {raw[q].x, raw[q].y, raw[q].z, raw[q].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      amax = fmaxf(amax, fabsf(__uint_as_float(u[i] << 16)));
      amax = fmaxf(amax, fabsf(__uint_as_float(u[i] & 0xffff0000u)));
    }
  }
  amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, 2));
  const float s = act_scale(amax);
  const float inv = __uint_as_float((254u - (__float_as_uint(s) >> 23)) << 23);
  uint32_t c[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    c[2 * q] = act_codes2(raw[q].x, inv) | (act_codes2(raw[q].y, inv) << 16);
    c[2 * q + 1] = act_codes2(raw[q].z, inv) | (act_codes2(raw[q].w, inv) << 16);
  }
  if (!store) return;
  reinterpret_cast<uint4*>(codes + 32 * t)[0] = make_uint4(c[0], c[1], c[2], c[3]);
  reinterpret_cast<uint4*>(codes + 32 * t)[1] = make_uint4(c[4], c[5], c[6], c[7]);
  if (t == 0) *scale = s;
}

// The tile's activations for every K block of group grp into shared memory: codes and scales copied
// (cp.async, all in flight at once), or a dense call's bf16 rows quantized here, a warp a block of every tile row at a
// time (a lane quad a row). Scales past the tile are 0.
__device__ void stage_acts(const ExactBlockArgs& p, const Tile& tl, int64_t grp, uint8_t* acts, float* sa_rows,
                           int64_t pitch) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int nkb = static_cast<int>(p.kg / 128), live = tl.cnt * nkb;
  const int64_t k0 = grp * p.kg;
  if (p.x) {
    const int64_t row = tl.r0 + g;
    const uint16_t* x = nullptr;
    if (g < tl.cnt) x = p.x + row * p.x_ld + k0 + 32 * t;
    for (int kb = warp; kb < nkb; kb += kWarps) {
      uint4 raw[4] = {};
      if (g < tl.cnt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) raw[q] = __ldg(reinterpret_cast<const uint4*>(x + kb * 128 + 8 * q));
      }
      quantize_quad(raw, g < tl.cnt, acts + g * pitch + kb * 128, sa_rows + kb * kTm + g, t);
    }
  } else {
    const int per_row = static_cast<int>(p.kg / 16);
    for (int i = static_cast<int>(threadIdx.x); i < tl.cnt * per_row; i += kThreads) {
      const int r = i / per_row, u = i % per_row;
      cp_async<16>(acts + r * pitch + u * 16, p.codes + (tl.r0 + r) * p.codes_ld + k0 + u * 16);
    }
    cp_async_commit();
    for (int i = static_cast<int>(threadIdx.x); i < live; i += kThreads) {
      const int r = i / nkb, kb = i % nkb;
      sa_rows[kb * kTm + r] = __ldg(p.scales + (grp * nkb + kb) * p.scale_ld + tl.r0 + r);
    }
    cp_async_wait<0>();
  }
  for (int i = static_cast<int>(threadIdx.x); i < kTm * nkb; i += kThreads) {
    if (i % kTm >= tl.cnt) sa_rows[i] = 0.0f;
  }
}

// RG row groups of 16 weight rows a CTA; the CTA's kWarps / RG warps of a row group split its K blocks
// into runs, added in K order at the end. The CTA runs `items` column tiles in turn, on one tile of rows
// and its staged activations: each warp's weight loads run on from one tile into the next (no drain, no
// second tile search or staging), and the launch fits one wave where `items` tiles a CTA took several
// (items > 1: groups == 1 and each run a multiple of D blocks, so that a tile starts at ring slot 0).
// Weights are never written during a step, so a dense call's first blocks load before the wait on the
// previous kernel; so do a grouped call's whose offsets were settled before that kernel began (finding
// the tile reads them).
// kTurns: `items` as given (else 1: the code of one tile a CTA, without the cursor's registers).
template <Form F, int RG, int D, bool kTurns>
__global__ void __launch_bounds__(kThreads, 2) fast_gemv_kernel(const ExactBlockArgs p, int items_arg) {
  constexpr bool kStaged = !is_fp8(F);  // FP4 codes through the warp's shared-memory ring
  constexpr int KP = kWarps / RG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int items = kTurns ? items_arg : 1;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, t = lane % 4, part = warp % KP;
  // Column tiles of every group, then (a pair) those of the second weight (the grid's y fits 32 bits).
  const int col_tiles = static_cast<int>(cdiv(p.ng, 16 * RG)), half = p.groups * col_tiles;
  const int ys = (p.y_b ? 2 : 1) * half;
  const int nkb = static_cast<int>(p.kg / 128), kb0 = part * nkb / KP, kb1 = (part + 1) * nkb / KP, nb = kb1 - kb0;
  const int64_t row_bytes = is_fp8(F) ? p.kg : p.kg / 2;
  // Column tile i of the CTA: its weight, group and the warp's first row there (nv <= 0: none of its rows).
  struct Place {
    bool second;
    int grp;
    int64_t n0;
    int nv;
  };
  const auto place = [&](int i) {
    Place q;
    const int y = static_cast<int>(blockIdx.y) * items + i;
    q.second = y >= half;
    const int tile = y - (q.second ? half : 0);
    q.grp = tile / col_tiles;
    const int64_t c0 = int64_t{tile - q.grp * col_tiles} * (16 * RG) + (warp / KP) * 16;
    q.nv = y < ys ? static_cast<int>(imin(16, p.ng - c0)) : 0;
    q.n0 = q.grp * p.ng + c0;
    return q;
  };
  Rows rows{};
  auto bind = [&](int e, const Place& q) {
    const void* wv = p.offsets ? (q.second ? p.w_list_b : p.w_list)[e] : (q.second ? p.w_b : p.w);
    const uint8_t* ws =
        p.offsets ? (q.second ? p.w_scale_list_b : p.w_scale_list)[e] : (q.second ? p.w_scale_b : p.w_scale);
    const int64_t r[2] = {g < q.nv ? g : 0, g + 8 < q.nv ? g + 8 : 0};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows.w[h] = static_cast<const uint8_t*>(wv) + (q.n0 + r[h]) * row_bytes;
      rows.s[h] = is_fp8(F) ? ws + (q.n0 / 128) * nkb : ws + (q.n0 + r[h]) * (p.kg / 32);
    }
  };
  WeightBlock<F> ring[D];
  const int64_t pitch = act_pitch<F>(p.kg);
  uint8_t* slots = smem_raw + kTm * pitch + kTm * nkb * 4 + warp * D * kStageSlot;  // FP4: the warp's ring
  Tile tl;
  // The loads' cursor: block lkb of column tile lit (live: the warp has rows there), one block a call into
  // ring slot j; past the tile's last block an empty commit (FP4: the waits count D groups a block).
  int lit = 0, lkb = kb0;
  bool live = false;
  auto load_next = [&](int j) {
    const bool now = live && lkb < kb1;
    if constexpr (kStaged) {
      if (now) {
        stage_weights(rows, lkb, g, t, slots + j * kStageSlot, ring[j]);
      } else {
        cp_async_commit();
      }
    } else if (now) {
      load_weights(rows, lkb, t, ring[j]);
    }
    ++lkb;
  };
  // kTurns, after each turn of D loads: past its tile's last block the cursor goes on into the next tile
  // (runs of whole turns: a tile ends with a turn, so the check runs once a turn, not once a block).
  auto next_tile = [&] {
    if (!kTurns || lkb != kb1 || lit >= items) return;
    lkb = kb0;
    live = false;
    if (++lit < items) {
      const Place q = place(lit);
      live = q.nv > 0;
      if (live) bind(tl.e, q);
    }
  };
  // The tile (CTA-uniform; false: none), then the warp's first blocks in flight.
  auto start = [&] {
    if (p.offsets) {
      if (!find_expert_tile(p.offsets, p.experts, kTm, blockIdx.x, tl)) return false;
    } else {
      tl.r0 = int64_t{blockIdx.x} * kTm;
      tl.cnt = static_cast<int>(imin(kTm, p.rows - tl.r0));
      tl.e = 0;
    }
    const Place q = place(0);
    live = q.nv > 0;
    if (live) bind(tl.e, q);
#pragma unroll
    for (int j = 0; j < D; ++j) load_next(j);
    next_tile();
    return true;
  };
  const bool early = !p.offsets || p.offsets_settled;
  if (early && !start()) return;
  pdl_enter();
  if (!early && !start()) return;
  uint8_t* acts = smem_raw;
  float* sa_rows = reinterpret_cast<float*>(smem_raw + kTm * pitch);
  stage_acts(p, tl, place(0).grp, acts, sa_rows, pitch);
  __syncthreads();
  for (int it = 0; it < items; ++it) {
    const Place q = place(it);
    const bool work = q.nv > 0;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b = 0; b < nb; b += D) {
#pragma unroll
      for (int j = 0; j < D; ++j) {
        if (b + j < nb) {
          if (work) {
            if constexpr (kStaged) unstage_weights<D>(slots + j * kStageSlot, lane, ring[j]);
            multiply<F>(ring[j], acts, sa_rows, pitch, kb0 + b + j, tl.cnt, g, t, acc);
          }
          load_next(j);
        }
      }
      next_tile();
    }
    if constexpr (KP > 1) {  // the row group's runs, added in K order by its first warp
      // kTurns: a buffer a tile's parity (tile it + 2 writes only after every warp passed tile it + 1's barrier).
      __shared__ float run_sums[kTurns ? 2 : 1][kWarps][4][kWarp];
      const int buf = kTurns ? it & 1 : 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) run_sums[buf][warp][e][lane] = acc[e];
      __syncthreads();
      if (part == 0) {
        for (int r = 1; r < KP; ++r) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] += run_sums[buf][warp + r][e][lane];
        }
      }
    }
    if (part != 0 || !work) continue;
    void* y = q.second ? p.y_b : p.y;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int wr = g + (e / 2) * 8, ar = 2 * t + e % 2;
      if (wr < q.nv && ar < tl.cnt) store_out(y, p.y_ld, p.y_f32, tl.r0 + ar, q.n0 + wr, acc[e]);
    }
  }
}

// The tile's codes and scales, then (FP4) every warp's ring of kDepth slots.
int64_t smem_bytes(const ExactBlockArgs& a, Form f) {
  const int64_t pitch = f == Form::kFp8 ? act_pitch<Form::kFp8>(a.kg) : act_pitch<Form::kFp4>(a.kg);
  return kTm * pitch + kTm * (a.kg / 128) * 4 + (f == Form::kFp4 ? int64_t{kWarps} * kDepth * kStageSlot : 0);
}

template <Form F, int RG, int D>
void launch(const ExactBlockArgs& a, int items, cudaStream_t stream) {
  const auto kernel = items > 1 ? fast_gemv_kernel<F, RG, D, true> : fast_gemv_kernel<F, RG, D, false>;
  allow_dynamic_smem(kernel, kFastGemvMaxSmem);
  const int64_t tiles = a.offsets ? row_tiles(a.rows, kTm, a.experts) : cdiv(a.rows, kTm);
  const int64_t col_tiles = (a.y_b ? 2 : 1) * a.groups * cdiv(a.ng, 16 * RG), cols = cdiv(col_tiles, items);
  DSV4_CUDA_REQUIRE(tiles < (int64_t{1} << 31) && cols <= 65535 && cols * items < (int64_t{1} << 31),
                    "fast gemv: grid out of range");
  DSV4_CUDA_REQUIRE(items == 1 || (a.groups == 1 && a.kg / 128 % (kWarps / RG * D) == 0),
                    "fast gemv: column tiles a CTA > 1 need one group and K runs of whole ring turns");
  launch_kernel(kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(cols)), kThreads,
                static_cast<size_t>(smem_bytes(a, F)), stream, a, items);
}

template <Form F, int D>
void launch_parts(const ExactBlockArgs& a, GemvShape shape, cudaStream_t stream) {
  switch (shape.k_parts) {
    case 1:
      return launch<F, 8, D>(a, shape.items, stream);
    case 2:
      return launch<F, 4, D>(a, shape.items, stream);
    case 4:
      return launch<F, 2, D>(a, shape.items, stream);
    default:
      return launch<F, 1, D>(a, shape.items, stream);
  }
}

}  // namespace

bool fast_gemv_takes(const ExactBlockArgs& a) {
  const bool fp8 = a.kind == GemmWeightKind::kFp8;
  if (!(fp8 || a.kind == GemmWeightKind::kFp4) || a.kg <= 0 || a.kg % 128 != 0 || a.ng <= 0) return false;
  if (a.ng * a.groups != a.n || (fp8 && a.groups > 1 && a.ng % 128 != 0) || a.y_ld < a.n) return false;
  if (smem_bytes(a, fp8 ? Form::kFp8 : Form::kFp4) > kFastGemvMaxSmem) return false;  // FP4: the wider pitch
  if (a.offsets ? !(a.experts > 0 && a.w_list && a.w_scale_list) : !(a.w && a.w_scale && aligned_to(a.w, 16))) {
    return false;
  }
  if (a.x) return !a.offsets && aligned_to(a.x, 16) && a.x_ld % 8 == 0;
  return a.codes && a.scales && aligned_to(a.codes, 16) && a.codes_ld % 16 == 0 && a.scale_ld >= a.rows;
}

void fast_gemv(const ExactBlockArgs& a, GemvShape shape, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(fast_gemv_takes(a), "fast gemv: unsupported call (kind, shape, alignment or operands)");
  const int k = shape.k_parts;
  DSV4_CUDA_REQUIRE(k == 1 || k == 2 || k == 4 || k == 8, "fast gemv: k_parts 1, 2, 4 or 8");
  DSV4_CUDA_REQUIRE(shape.items >= 1, "fast gemv: at least one column tile a CTA");
  if (a.rows <= 0) return;
  if (a.kind == GemmWeightKind::kFp8) {
    launch_parts<Form::kFp8, kDepth>(a, shape, stream);
  } else {
    launch_parts<Form::kFp4, kDepth>(a, shape, stream);
  }
}

}  // namespace dsv4::cuda
