// Exact block-scaled GEMMs on the int8 tensor cores (gemm_imma.h has the arithmetic).
//
// A CTA owns 128 rows x BN columns (FP8: BN = 32, FP4: BN = 64) and walks K in 64-wide stages, two
// (or, opt-in, four) in flight. Operands split into digit planes beforehand (digit_planes) are copied
// to shared memory with cp.async; the others are read from global memory into registers and turned
// into digit planes as they are stored (e4m3 through a 256-entry table, e2m1 through byte permutes).
// The 8 warps (4 x 2, 32 rows x BN/2 columns each) run mma.sync
// m16n8k32 over every digit pair into int32 accumulators, one per digit weight 2^(7s). At each
// K-block's end (FP8: 128, FP4: 32) a thread folds its accumulators into the exact block sum (64-bit),
// rounds it to fp32 once and adds the scaled block to its fp32 outputs in block order, exactly as
// the SIMT kernels do. Shared rows are padded to 80 bytes so that ldmatrix reads hit 8 different
// bank groups.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ptx.cuh"

namespace dsv4::cuda {
namespace {

using namespace gemm_tiles;

constexpr int kImThreads = 256;
constexpr int kImWarpsM = 4;
constexpr int kImWarpsN = 2;
constexpr int kImRows = 32 * kImWarpsM;  // rows of a CTA tile
constexpr int kImK = 64;                 // K of a stage
constexpr int kImLd = kImK + 16;         // padded shared row (bytes)
constexpr int kActDigits = 3;

template <GemmWeightKind KIND>
struct ImmaShape {
  static constexpr bool kFp4 = KIND == GemmWeightKind::kFp4;
  static constexpr int kWDigits = kFp4 ? 1 : 3;
  static constexpr int kNf = kFp4 ? 4 : 2;  // n8 fragments per warp
  static constexpr int kCols = kImWarpsN * kNf * 8;
  static constexpr int kSums = kActDigits + kWDigits - 1;  // digit weights 2^0, 2^7, ...
};

// Two buffers of one K stage each: one multiplied while the next is filled.
template <GemmWeightKind KIND>
struct ImmaSmem {
  using S = ImmaShape<KIND>;
  uint32_t lut[256];  // e4m3 code -> its three digits, bytes 0..2
  alignas(16) int8_t a[2][kActDigits][kImRows][kImLd];
  alignas(16) int8_t b[2][S::kWDigits][S::kCols][kImLd];
};

// The digits of an e4m3 code: X = value·2^9 = m (subnormal) or (8 + m)·2^(e-1), in base 128, each
// with the code's sign. NaN codes (never produced by the activation quantizer) give zero digits: a
// checkpoint holding FP8 NaN weights is outside what this kernel reproduces.
__device__ uint32_t e4m3_digits(uint32_t c) {
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  uint32_t x = e == 0 ? m : (8u | m) << (e - 1);
  if ((c & 0x7fu) == 0x7fu) x = 0;
  uint32_t d0 = x & 127u, d1 = (x >> 7) & 127u, d2 = x >> 14;
  if (c & 0x80u) d0 = (0u - d0) & 255u, d1 = (0u - d1) & 255u, d2 = (0u - d2) & 255u;
  return d0 | d1 << 8 | d2 << 16;
}

// Four codes (bytes of w) -> their digit planes (byte i of plane p = digit p of code i).
__device__ __forceinline__ void digits4(const uint32_t* lut, uint32_t w, uint32_t& p0, uint32_t& p1, uint32_t& p2) {
  const uint32_t l0 = lut[w & 255u], l1 = lut[(w >> 8) & 255u], l2 = lut[(w >> 16) & 255u], l3 = lut[w >> 24];
  const uint32_t lo01 = __byte_perm(l0, l1, 0x5140), lo23 = __byte_perm(l2, l3, 0x5140);
  const uint32_t hi01 = __byte_perm(l0, l1, 0x0062), hi23 = __byte_perm(l2, l3, 0x0062);
  p0 = __byte_perm(lo01, lo23, 0x5410);
  p1 = __byte_perm(lo01, lo23, 0x7632);
  p2 = __byte_perm(hi01, hi23, 0x5410);
}

__device__ __forceinline__ void st_shared4(void* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  *reinterpret_cast<uint4*>(p) = make_uint4(x, y, z, w);
}

// kAPlanes / kBPlanes: the activations / the (dense FP8) weight come as digit planes, copied to
// shared memory with cp.async one stage ahead; otherwise the loaders convert codes through the table,
// one stage ahead (loaded before a stage's products, stored after them).
template <GemmWeightKind KIND, bool kAPlanes, bool kBPlanes>
__global__ void __launch_bounds__(kImThreads) imma_block_kernel(const ExactBlockArgs p) {
  pdl_enter();
  using S = ImmaShape<KIND>;
  static_assert(!kBPlanes || !S::kFp4, "FP4 weights are converted as they are loaded");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<ImmaSmem<KIND>*>(smem_raw);
  Tile t;
  if (!row_tile(p, kImRows, t)) return;
  const int64_t col_tiles = cdiv(p.ng, S::kCols);
  const int64_t g = blockIdx.y / col_tiles;
  const int64_t c0 = (blockIdx.y % col_tiles) * S::kCols;  // first column within the group
  const auto* w = static_cast<const uint8_t*>(p.offsets ? p.w_list[t.e] : p.w);
  const uint8_t* ws = p.offsets ? p.w_scale_list[t.e] : p.w_scale;
  s.lut[threadIdx.x] = e4m3_digits(threadIdx.x);

  // Loaders. A: 128 rows x 64 codes = 512 16-byte pieces, two a thread. B: FP8 32 rows x 64 codes
  // (threads 0..127, one piece each); FP4 64 rows x 32 bytes (8 bytes a thread).
  const int tid = static_cast<int>(threadIdx.x);
  int64_t a_off[2];  // of the piece's first byte in a code row / digit plane
  bool a_ok[2];
  for (int h = 0; h < 2; ++h) {
    const int piece = tid + h * kImThreads, r = piece / 4;
    a_ok[h] = r < t.cnt;
    a_off[h] = (t.r0 + (a_ok[h] ? r : 0)) * p.codes_ld + g * p.kg + (piece % 4) * 16;
  }
  constexpr int kWPieceBytes = S::kFp4 ? 8 : 16;
  const int b_row = tid / 4;
  const bool b_live = S::kFp4 || tid < S::kCols * 4;
  const bool b_ok = b_live && c0 + b_row < p.ng;
  const int64_t b_off = (g * p.ng + (b_ok ? c0 + b_row : 0)) * (S::kFp4 ? p.kg / 2 : p.kg) + (tid % 4) * kWPieceBytes;
  const int64_t w_plane = p.n * p.kg;
  uint4 a_reg[2] = {}, b_reg = {0, 0, 0, 0};
  auto load_async = [&](int st, int buf) {  // the digit-plane operands of stage st, into buffer buf
    if constexpr (kAPlanes) {
      for (int h = 0; h < 2; ++h) {
        const int piece = tid + h * kImThreads, r = piece / 4, q = piece % 4;
        const int64_t off = a_off[h] + int64_t{st} * kImK;
        for (int l = 0; l < kActDigits; ++l) {
          cp_async<16>(&s.a[buf][l][r][q * 16], p.a_digits + l * p.a_digit_stride + off, a_ok[h] ? 16 : 0);
        }
      }
    }
    if constexpr (kBPlanes) {
      if (b_live) {
        const int64_t off = b_off + int64_t{st} * kImK;
        for (int l = 0; l < 3; ++l) {
          cp_async<16>(&s.b[buf][l][b_row][(tid % 4) * 16], p.w_digits + l * w_plane + off, b_ok ? 16 : 0);
        }
      }
    }
  };
  auto load_regs = [&](int st) {  // the code operands of stage st, into registers
    if constexpr (!kAPlanes) {
      for (int h = 0; h < 2; ++h) {
        const int64_t off = a_off[h] + int64_t{st} * kImK;
        a_reg[h] = a_ok[h] ? __ldg(reinterpret_cast<const uint4*>(p.codes + off)) : uint4{0, 0, 0, 0};
      }
    }
    if (kBPlanes || !b_live) return;
    const int64_t off = b_off + int64_t{st} * kImK * kWPieceBytes / 16;
    if (b_ok) {
      if constexpr (S::kFp4) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(w + off));
        b_reg.x = v.x, b_reg.y = v.y;
      } else {
        b_reg = __ldg(reinterpret_cast<const uint4*>(w + off));
      }
    }
  };
  auto store = [&](int buf) {  // the register-staged operands, converted
    if constexpr (!kAPlanes) {
      for (int h = 0; h < 2; ++h) {
        const int piece = tid + h * kImThreads, r = piece / 4, q = piece % 4;
        uint32_t d[3][4];
        const uint32_t v[4] = {a_reg[h].x, a_reg[h].y, a_reg[h].z, a_reg[h].w};
        for (int i = 0; i < 4; ++i) digits4(s.lut, v[i], d[0][i], d[1][i], d[2][i]);
        for (int l = 0; l < kActDigits; ++l) st_shared4(&s.a[buf][l][r][q * 16], d[l][0], d[l][1], d[l][2], d[l][3]);
      }
    }
    if (kBPlanes || !b_live) return;
    const int q = tid % 4;
    if constexpr (S::kFp4) {
      const uint2 lo = e2m1x8_int8(b_reg.x), hi = e2m1x8_int8(b_reg.y);
      st_shared4(&s.b[buf][0][b_row][q * 16], lo.x, lo.y, hi.x, hi.y);
    } else {
      uint32_t d[3][4];
      const uint32_t v[4] = {b_reg.x, b_reg.y, b_reg.z, b_reg.w};
      for (int i = 0; i < 4; ++i) digits4(s.lut, v[i], d[0][i], d[1][i], d[2][i]);
      for (int l = 0; l < 3; ++l) st_shared4(&s.b[buf][l][b_row][q * 16], d[l][0], d[l][1], d[l][2], d[l][3]);
    }
  };

  // Warp (wm, wn): rows wm*32.. (two m16 fragments), columns wn*kNf*8.. (kNf n8 fragments).
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int wm = warp % kImWarpsM, wn = warp / kImWarpsM;
  const int gid = lane / 4, tig = lane % 4;
  int acc[S::kSums][2][S::kNf][4] = {};
  float C[2][S::kNf][4] = {};

  const float* scales = p.scales + (g * p.kg / 128) * p.scale_ld;
  auto fold = [&](int64_t k0) {  // the block starting at k0 (within the group) is complete
    float sa[2][2], sb[S::kNf][2];
    for (int mf = 0; mf < 2; ++mf) {
      for (int h = 0; h < 2; ++h) {
        const int r = wm * 32 + mf * 16 + gid + h * 8;
        sa[mf][h] = r < t.cnt ? __ldg(scales + (k0 / 128) * p.scale_ld + t.r0 + r) : 0.0f;
      }
    }
    for (int nf = 0; nf < S::kNf; ++nf) {
      for (int h = 0; h < 2; ++h) {
        const int64_t cl = c0 + wn * S::kNf * 8 + nf * 8 + tig * 2 + h, n = g * p.ng + cl;
        const uint8_t* e = S::kFp4 ? ws + n * (p.kg / 32) + k0 / 32 : ws + (n / 128) * (p.kg / 128) + k0 / 128;
        sb[nf][h] = cl < p.ng ? ue8m0_f(__ldg(e)) : 0.0f;
      }
    }
#pragma unroll
    for (int mf = 0; mf < 2; ++mf) {
#pragma unroll
      for (int nf = 0; nf < S::kNf; ++nf) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float a_s = sa[mf][i / 2], b_s = sb[nf][i % 2];
          float v;
          if constexpr (S::kFp4) {  // |sum| < 2^27: int32; value = sum·2^-10
            const int sum = acc[0][mf][nf][i] + acc[1][mf][nf][i] * 128 + acc[2][mf][nf][i] * 16384;
            const float P = __fmul_rn(__int2float_rn(sum), 0x1p-10f);
            v = __fmul_rn(__fmul_rn(P, a_s), b_s);
          } else {  // |lo|, |mid| < 2^31; value = (mid·2^14 + lo)·2^-18
            const int lo = acc[0][mf][nf][i] + acc[1][mf][nf][i] * 128;
            const int mid = acc[2][mf][nf][i] + acc[3][mf][nf][i] * 128 + acc[4][mf][nf][i] * 16384;
            const long long sum = static_cast<long long>(mid) * 16384 + lo;
            const float P = __fmul_rn(__ll2float_rn(sum), 0x1p-18f);
            v = __fmul_rn(P, __fmul_rn(a_s, b_s));
          }
          C[mf][nf][i] = __fadd_rn(C[mf][nf][i], v);
#pragma unroll
          for (int d = 0; d < S::kSums; ++d) acc[d][mf][nf][i] = 0;
        }
      }
    }
  };

  // One 32-wide K slice of the stage in buffer buf: every digit pair's products.
  auto slice = [&](int buf, int ks) {
    uint32_t af[kActDigits][2][4];
    for (int l = 0; l < kActDigits; ++l) {
      for (int mf = 0; mf < 2; ++mf) {
        ldsm_x4(smem_addr(&s.a[buf][l][wm * 32 + mf * 16 + (lane & 15)][ks * 32 + (lane >> 4) * 16]), af[l][mf]);
      }
    }
#pragma unroll
    for (int j = 0; j < S::kWDigits; ++j) {
      uint32_t bf[S::kNf][2];
#pragma unroll
      for (int np = 0; np < S::kNf / 2; ++np) {
        uint32_t r[4];
        const int n = wn * S::kNf * 8 + np * 16 + (lane & 7) + (lane >> 4) * 8;
        ldsm_x4(smem_addr(&s.b[buf][j][n][ks * 32 + ((lane >> 3) & 1) * 16]), r);
        bf[2 * np][0] = r[0], bf[2 * np][1] = r[1], bf[2 * np + 1][0] = r[2], bf[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kActDigits; ++i) {
#pragma unroll
        for (int mf = 0; mf < 2; ++mf) {
#pragma unroll
          for (int nf = 0; nf < S::kNf; ++nf) mma_s8(acc[i + j][mf][nf], af[i][mf], bf[nf][0], bf[nf][1]);
        }
      }
    }
  };

  const int stages = static_cast<int>(p.kg / kImK);
  auto multiply = [&](int st, int buf) {  // stage st's products and the folds of the blocks it completes
    const int64_t k0 = int64_t{st} * kImK;
    for (int ks = 0; ks < 2; ++ks) {
      slice(buf, ks);
      if constexpr (S::kFp4) fold(k0 + ks * 32);
    }
    if (!S::kFp4 && (k0 + kImK) % 128 == 0) fold(k0 + kImK - 128);
  };
  // Two buffers: stage st+1 is copied and converted while stage st is multiplied.
  load_async(0, 0);
  load_regs(0);
  __syncthreads();  // the table is complete
  store(0);
  cp_async_wait_all();
  __syncthreads();
  for (int st = 0; st < stages; ++st) {
    if (st + 1 < stages) {
      load_async(st + 1, (st + 1) & 1);
      load_regs(st + 1);
    }
    multiply(st, st & 1);
    if (st + 1 < stages) store((st + 1) & 1);
    cp_async_wait_all();
    __syncthreads();
  }
  for (int mf = 0; mf < 2; ++mf) {
    for (int nf = 0; nf < S::kNf; ++nf) {
      for (int i = 0; i < 4; ++i) {
        const int r = wm * 32 + mf * 16 + gid + (i / 2) * 8;
        const int64_t cl = c0 + wn * S::kNf * 8 + nf * 8 + tig * 2 + i % 2;
        if (r < t.cnt && cl < p.ng) store_out(p.y, p.y_ld, p.y_f32, t.r0 + r, g * p.ng + cl, C[mf][nf][i]);
      }
    }
  }
}

template <GemmWeightKind KIND, bool kAPlanes, bool kBPlanes>
void launch(const ExactBlockArgs& p, cudaStream_t stream) {
  using S = ImmaShape<KIND>;
  constexpr size_t kSmem = sizeof(ImmaSmem<KIND>);
  auto* kernel = imma_block_kernel<KIND, kAPlanes, kBPlanes>;
  allow_dynamic_smem(kernel, kSmem);
  const int64_t gx = row_tiles(p.rows, kImRows, p.offsets ? p.experts : 0), gy = p.groups * cdiv(p.ng, S::kCols);
  DSV4_CUDA_REQUIRE(gx < (int64_t{1} << 31) && gy <= 65535, "imma gemm: grid out of range");
  launch_kernel(kernel, dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kImThreads, kSmem, stream, p);
}

// One thread per 16 codes: three 16-byte digit pieces (the table in shared memory).
__global__ void __launch_bounds__(256)
    digit_planes_kernel(const uint8_t* codes, int64_t rows, int64_t k, int64_t ld, int8_t* out, int64_t plane_stride) {
  pdl_enter();
  __shared__ uint32_t lut[256];
  lut[threadIdx.x] = e4m3_digits(threadIdx.x);
  __syncthreads();
  const int64_t per_row = k / 16, i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= rows * per_row) return;
  const int64_t off = (i / per_row) * ld + (i % per_row) * 16;
  const uint4 c = __ldg(reinterpret_cast<const uint4*>(codes + off));
  const uint32_t v[4] = {c.x, c.y, c.z, c.w};
  uint32_t d[3][4];
  for (int j = 0; j < 4; ++j) digits4(lut, v[j], d[0][j], d[1][j], d[2][j]);
  for (int l = 0; l < 3; ++l) {
    *reinterpret_cast<uint4*>(out + l * plane_stride + off) = make_uint4(d[l][0], d[l][1], d[l][2], d[l][3]);
  }
}

}  // namespace

bool imma_wanted(GemmWeightKind kind, int64_t rows_per_weight, int64_t kg, int64_t dense_n, const GemmPolicy& policy) {
  const bool block = kind == GemmWeightKind::kFp8 || kind == GemmWeightKind::kFp4;
  if (!policy.exact_imma || !block || kg <= 0 || kg % 128 != 0) return false;
  if (rows_per_weight >= policy.imma_min_rows) return true;
  // Decode batches: one part-empty row tile, worth it where the weight spans enough column tiles to
  // fill the GPU (measured at 32 rows: it wins on the wide weights, wq_b, wo_b, shared_w2, and loses on
  // shared_w1 and wq_a; docs/perf-history.md). The SIMT kernel scales with the rows, this one does not:
  // at 8 rows the SIMT kernel wins everywhere.
  const int64_t cols =
      kind == GemmWeightKind::kFp8 ? ImmaShape<GemmWeightKind::kFp8>::kCols : ImmaShape<GemmWeightKind::kFp4>::kCols;
  return dense_n > 0 && rows_per_weight >= kImmaDecodeRows && cdiv(dense_n, cols) >= kImmaDecodeTiles;
}

void imma_block_gemm(const ExactBlockArgs& a, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(!a.x && a.codes && a.scales, "imma gemm: needs activation codes and scales");
  DSV4_CUDA_REQUIRE(a.codes_ld % 16 == 0 && reinterpret_cast<uintptr_t>(a.codes) % 16 == 0,
                    "imma gemm: activation codes must be 16-byte aligned rows");
  DSV4_CUDA_REQUIRE(a.kg % 128 == 0, "imma gemm: K must be a multiple of 128");
  DSV4_CUDA_REQUIRE(!a.w_digits || (a.kind == GemmWeightKind::kFp8 && !a.offsets),
                    "imma gemm: weight digit planes are for dense FP8 weights");
  if (a.rows <= 0) return;
  const bool ap = a.a_digits != nullptr, bp = a.w_digits != nullptr;
  if (a.kind == GemmWeightKind::kFp4) {
    return ap ? launch<GemmWeightKind::kFp4, true, false>(a, stream)
              : launch<GemmWeightKind::kFp4, false, false>(a, stream);
  }
  if (ap && bp) return launch<GemmWeightKind::kFp8, true, true>(a, stream);
  if (ap) return launch<GemmWeightKind::kFp8, true, false>(a, stream);
  if (bp) return launch<GemmWeightKind::kFp8, false, true>(a, stream);
  launch<GemmWeightKind::kFp8, false, false>(a, stream);
}

void digit_planes(const uint8_t* codes, int64_t rows, int64_t k, int64_t ld, int8_t* out, int64_t plane_stride,
                  cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(k % 16 == 0 && ld % 16 == 0 && ld >= k && plane_stride >= rows * ld,
                    "digit_planes: rows must be 16-byte pieces inside their planes");
  DSV4_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(codes) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                        plane_stride % 16 == 0,
                    "digit_planes: codes and planes must be 16-byte aligned");
  const int64_t pieces = rows * (k / 16);
  if (pieces == 0) return;
  DSV4_CUDA_REQUIRE(pieces / 256 < (int64_t{1} << 31), "digit_planes: too many codes");
  launch_kernel(digit_planes_kernel, static_cast<unsigned>(cdiv(pieces, 256)), 256, 0, stream, codes, rows, k, ld, out,
                plane_stride);
}

}  // namespace dsv4::cuda
