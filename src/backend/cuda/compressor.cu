#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/compressor.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/glibc_expf.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kMaxDim = 512;
constexpr int kMaxRows = 256;
constexpr int kMaxThreads = 512;
constexpr int kLanes = 8;  // the CPU's strided-lane sums (cpu_support.h)

// ---- quantization as core/quant.cpp and the entry codec do it --------------------------------------

__device__ __forceinline__ float clampf(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

// core/number_formats.h's ue8m0_to_float (byte 0 is 2^-127).
__device__ __forceinline__ float ue8m0_value(uint8_t e) {
  return e == 255 ? __uint_as_float(0x7fc00000u) : (e == 0 ? 0x1p-127f : e8_value(e));
}

// core/number_formats.h's float_to_e2m1: nearest, ties to the even code, the sign kept for zero.
__device__ __forceinline__ uint8_t e2m1_code(float f) {
  const uint8_t sign = signbit(f) ? 8 : 0;
  const float a = fabsf(f);
  uint8_t c = 7;
  if (a <= 0.25f) {
    c = 0;
  } else if (a < 0.75f) {
    c = 1;
  } else if (a <= 1.25f) {
    c = 2;
  } else if (a < 1.75f) {
    c = 3;
  } else if (a <= 2.5f) {
    c = 4;
  } else if (a < 3.5f) {
    c = 5;
  } else if (a <= 5.0f) {
    c = 6;
  }
  return sign | c;
}

__device__ __forceinline__ uint8_t e4m3_scale_byte(float amax) {
  return ceil_pow2_e8(__fmul_rn(fmaxf(amax, 1e-4f), 1.0f / 448.0f));
}
__device__ __forceinline__ uint8_t e2m1_scale_byte(float amax) {
  return ceil_pow2_e8(__fmul_rn(fmaxf(amax, 6.0f * 0x1p-126f), 1.0f / 6.0f));
}
__device__ __forceinline__ uint8_t e4m3_code(float v, float s) {
  return f_to_e4m3(clampf(__fdiv_rn(v, s), -448.0f, 448.0f));
}
__device__ __forceinline__ uint8_t e2m1_code(float v, float s) {
  return e2m1_code(clampf(__fdiv_rn(v, s), -6.0f, 6.0f));
}

// max |v[i]| over v[0, n), by one warp; every lane gets it.
__device__ float warp_amax(const float* v, int n, int lane) {
  float m = 0.0f;
  for (int i = lane; i < n; i += kWarp) m = fmaxf(m, fabsf(v[i]));
  return warp_max(m);
}

// Q8(v, block) / Q4(v) in place on v[0, n) (n a multiple of the block), one warp per block.
__device__ void fake_quant_e4m3(float* v, int n, int block) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int b = warp * block; b < n; b += (blockDim.x / kWarp) * block) {
    const float s = ue8m0_value(e4m3_scale_byte(warp_amax(v + b, block, lane)));
    for (int i = b + lane; i < b + block; i += kWarp) v[i] = round_bf16(__fmul_rn(e4m3_to_f(e4m3_code(v[i], s)), s));
  }
}
__device__ void fake_quant_e2m1(float* v, int n) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int b = warp * kWarp; b < n; b += blockDim.x) {
    const float s = ue8m0_value(e2m1_scale_byte(warp_amax(v + b, kWarp, lane)));
    v[b + lane] = round_bf16(__fmul_rn(e2m1_to_f(e2m1_code(v[b + lane], s)), s));
  }
}

// ---- entry encoders (core/kv_entry.cpp), exact for values on the entry's grid ------------------------

// A bf16 field of an entry (2-byte aligned: the launcher checks the table). One 16-bit store: ptxas of
// CUDA 13.0 lowers a byte store of a cvt.rn.bf16 result to a float→u8 conversion (F2I.U8.F16).
__device__ __forceinline__ void store_bf16(uint8_t* p, float v) { *reinterpret_cast<uint16_t*>(p) = f_to_bf16(v); }

// [n e4m3][r bf16][n/64 ue8m0][zero pad], n = d − r.
__device__ void encode_attn_fp8(const float* v, int d, int r, int entry_bytes, uint8_t* out) {
  const int n = d - r, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int b = warp; b < n / 64; b += warps) {
    const uint8_t e = e4m3_scale_byte(warp_amax(v + b * 64, 64, lane));
    const float s = ue8m0_value(e);
    for (int i = b * 64 + lane; i < (b + 1) * 64; i += kWarp) out[i] = e4m3_code(v[i], s);
    if (lane == 0) out[n + 2 * r + b] = e;
  }
  for (int i = threadIdx.x; i < r; i += blockDim.x) store_bf16(out + n + 2 * i, v[n + i]);
  for (int i = n + 2 * r + n / 64 + threadIdx.x; i < entry_bytes; i += blockDim.x) out[i] = 0;
}

// [d/2 packed e2m1, element 2j in the low nibble of byte j][d/32 ue8m0].
__device__ void encode_index_fp4(const float* v, int d, uint8_t* out) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int b = warp * kWarp; b < d; b += blockDim.x) {
    const uint8_t e = e2m1_scale_byte(warp_amax(v + b, kWarp, lane));
    const uint8_t code = e2m1_code(v[b + lane], ue8m0_value(e));
    const uint8_t high = static_cast<uint8_t>(__shfl_down_sync(0xffffffffu, code, 1));
    if (lane % 2 == 0) out[(b + lane) / 2] = static_cast<uint8_t>(code | (high << 4));
    if (lane == 0) out[d / 2 + b / kWarp] = e;
  }
}

// [d e4m3][fp32 scale]: one power-of-two scale over the whole entry, by warp 0.
__device__ void encode_index_fp8(const float* v, int d, uint8_t* out) {
  if (threadIdx.x >= kWarp) return;
  const int lane = threadIdx.x;
  const float s = ue8m0_value(e4m3_scale_byte(warp_amax(v, d, lane)));
  for (int i = lane; i < d; i += kWarp) out[i] = e4m3_code(v[i], s);
  if (lane < 4) out[d + lane] = static_cast<uint8_t>(__float_as_uint(s) >> (8 * lane));
}

__device__ void encode_entry(const EntryTable& t, const float* v, int d, int r, uint8_t* out) {
  switch (t.format) {
    case KvEntryFormat::kAttnFp8:
      encode_attn_fp8(v, d, r, t.entry_bytes, out);
      break;
    case KvEntryFormat::kIndexFp4:
      encode_index_fp4(v, d, out);
      break;
    case KvEntryFormat::kIndexFp8:
      encode_index_fp8(v, d, out);
      break;
    case KvEntryFormat::kBf16:
      for (int i = threadIdx.x; i < d; i += blockDim.x) store_bf16(out + 2 * i, v[i]);
      break;
    case KvEntryFormat::kF32:
      for (int i = threadIdx.x; i < 4 * d; i += blockDim.x)
        out[i] = static_cast<uint8_t>(__float_as_uint(v[i / 4]) >> (8 * (i % 4)));
      break;
  }
}

// ---- compressor_store ------------------------------------------------------------------------------

__global__ void store_kernel(const float* a, const float* g, int64_t tokens, int64_t cd, const int32_t* positions,
                             const float* ape, int ratio, EntryTable state, const int32_t* slots, int32_t* err) {
  pdl_enter();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= tokens * 2 * cd) return;
  const int64_t t = i / (2 * cd), k = i % (2 * cd);
  const int32_t slot = slots[t];
  if (slot < 0) return;
  if (!state.holds(slot)) {
    report(err, DeviceError::kCompressorSlot);
    return;
  }
  float* row = reinterpret_cast<float*>(state.entry(slot));
  row[k] = k < cd ? a[t * cd + k] : __fadd_rn(g[t * cd + k - cd], ape[(positions[t] % ratio) * cd + k - cd]);
}

// ---- compressor_emit -------------------------------------------------------------------------------

// Softmax pooling of channel ch over the candidate rows (null = absent previous row), as pool_entry:
// max, then Σ exp(g − m) and Σ (x / Σ)·a in candidate order, fp32 without contraction.
__device__ float pool_channel(const float* const* rows, int n_rows, int ratio, int c, int dc, int ch) {
  const int64_t cd = int64_t{c} * dc;
  auto value_at = [&](int r) { return (c == 2 && r < ratio) ? int64_t{ch} : int64_t{c - 1} * dc + ch; };
  float m = -INFINITY;
  for (int r = 0; r < n_rows; ++r) {
    if (!rows[r]) continue;
    const float g = rows[r][cd + value_at(r)];
    m = m < g ? g : m;  // std::max
  }
  float sum = 0.0f;
  for (int r = 0; r < n_rows; ++r) {
    if (rows[r]) sum = __fadd_rn(sum, host_expf(__fsub_rn(rows[r][cd + value_at(r)], m)));
  }
  float e = 0.0f;
  for (int r = 0; r < n_rows; ++r) {
    if (!rows[r]) continue;
    const float x = host_expf(__fsub_rn(rows[r][cd + value_at(r)], m));
    e = __fadd_rn(e, __fmul_rn(__fdiv_rn(x, sum), rows[r][value_at(r)]));
  }
  return e;
}

// e = bf16(w · (e · rsqrt(mean(e²) + eps))), the sum of squares in the CPU's 8-lane order.
__device__ void rms_norm_entry(float* e, int dc, const uint16_t* w, float eps) {
  __shared__ float lanes[kLanes];
  if (threadIdx.x < kLanes) {
    float l = 0.0f;
    for (int i = threadIdx.x; i < dc; i += kLanes) l = __fadd_rn(l, __fmul_rn(e[i], e[i]));
    lanes[threadIdx.x] = l;
  }
  __syncthreads();
  const float ss = __fadd_rn(__fadd_rn(__fadd_rn(lanes[0], lanes[1]), __fadd_rn(lanes[2], lanes[3])),
                             __fadd_rn(__fadd_rn(lanes[4], lanes[5]), __fadd_rn(lanes[6], lanes[7])));
  const float var = __fdiv_rn(ss, static_cast<float>(dc));
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
  for (int i = threadIdx.x; i < dc; i += blockDim.x) e[i] = round_bf16(__fmul_rn(bf16_to_f(w[i]), __fmul_rn(e[i], rs)));
  __syncthreads();
}

// Forward RoPE of x[0, 2·half) at `position`; cos/sin in double rounded to float (as row_kernels.cu).
__device__ void rope_entry(float* x, int half, int32_t position, const float* freqs) {
  const float p = static_cast<float>(position);
  for (int k = threadIdx.x; k < half; k += blockDim.x) {
    float re = x[2 * k], im = x[2 * k + 1];
    rope_rotate(re, im, __fmul_rn(p, freqs[k]), false);
    x[2 * k] = round_bf16(re);
    x[2 * k + 1] = round_bf16(im);
  }
  __syncthreads();
}

// e = bf16(scale · H e), the butterflies in the CPU's order.
__device__ void hadamard_entry(float* e, int dc, float scale) {
  hadamard_butterflies(e, dc);
  for (int i = threadIdx.x; i < dc; i += blockDim.x) e[i] = round_bf16(__fmul_rn(e[i], scale));
  __syncthreads();
}

// compressor_emit as its kernel gets it.
struct EmitLaunch : CompressorEmitParams {
  const float* freqs = nullptr;  // [rope_dim / 2]
  int32_t* err = nullptr;
};

// Resolves the entry's rows into `rows` (null = absent); false when one is unusable.
__device__ bool gather_rows(const EmitLaunch& a, int c, int64_t entry, const float** rows) {
  const int n_rows = c * a.ratio;
  bool bad = false;
  for (int r = threadIdx.x; r < n_rows; r += blockDim.x) {
    const int32_t slot = a.rows[entry * n_rows + r];
    const bool previous = c == 2 && r < a.ratio;
    const bool ok = slot >= 0 ? a.state.holds(slot) : previous;
    bad |= !ok;
    rows[r] = ok && slot >= 0 ? reinterpret_cast<const float*>(a.state.entry(slot)) : nullptr;
  }
  return !__syncthreads_or(bad);
}

__global__ void __launch_bounds__(kMaxThreads) emit_kernel(EmitLaunch a, int c, float had_scale) {
  pdl_enter();
  __shared__ float e[kMaxDim];
  __shared__ const float* rows[kMaxRows];
  const int64_t entry = blockIdx.x;
  if (a.block_index[entry] < 0) return;  // a padded step's empty emission item (uniform per block)
  const int dc = a.head_dim;
  const int32_t out_slot = a.out_slots[entry];
  if (!gather_rows(a, c, entry, rows) || (out_slot >= 0 && !a.out.holds(out_slot))) {
    if (threadIdx.x == 0) report(a.err, DeviceError::kCompressorSlot);
    return;
  }
  for (int ch = threadIdx.x; ch < dc; ch += blockDim.x)
    e[ch] = round_bf16(pool_channel(rows, c * a.ratio, a.ratio, c, dc, ch));
  __syncthreads();
  rms_norm_entry(e, dc, a.norm_weight, a.norm_eps);
  rope_entry(e + dc - a.rope_dim, a.rope_dim / 2, a.block_index[entry] * a.ratio, a.freqs);
  if (a.indexer) {
    hadamard_entry(e, dc, had_scale);
    fake_quant_e2m1(e, dc);
  } else {
    fake_quant_e4m3(e, dc - a.rope_dim, 64);
  }
  __syncthreads();
  if (out_slot >= 0) encode_entry(a.out, e, dc, a.rope_dim, a.out.entry(out_slot));
}

}  // namespace

void compressor_store(const CompressorStepParams& p, const float* a, const float* g, int32_t* err,
                      cudaStream_t stream) {
  const int64_t cd = p.wkv.rows;
  DSV4_CUDA_REQUIRE(p.ratio > 0 && cd > 0, "compressor_store: ratio and cd must be positive");
  DSV4_CUDA_REQUIRE(p.state.format == KvEntryFormat::kF32 && p.state.entry_bytes == 8 * cd,
                    "compressor_store: the state table must hold f32 rows of 2·cd");
  const int64_t n = p.tokens * 2 * cd;
  if (n == 0) return;
  launch_kernel(store_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, a, g, p.tokens, cd, p.positions,
                p.ape, p.ratio, p.state, p.state_slots, err);
}

void compressor_emit(const CompressorEmitParams& p, const float* freqs, int32_t* err, cudaStream_t stream) {
  const EmitLaunch a{p, freqs, err};
  const int c = a.ratio == 4 ? 2 : 1, dc = a.head_dim, r = a.rope_dim;
  DSV4_CUDA_REQUIRE(a.ratio > 0 && c * a.ratio <= kMaxRows, "compressor_emit: ratio must give at most 256 rows");
  DSV4_CUDA_REQUIRE(dc >= 32 && dc <= kMaxDim && dc % 32 == 0,
                    "compressor_emit: head_dim must be 32..512, a multiple of 32");
  DSV4_CUDA_REQUIRE(r > 0 && r <= dc && r % 2 == 0, "compressor_emit: rope_dim must be even and in (0, head_dim]");
  if (a.indexer) {
    DSV4_CUDA_REQUIRE((dc & (dc - 1)) == 0, "compressor_emit: indexer head_dim must be a power of two");
  } else {
    DSV4_CUDA_REQUIRE(r < dc && (dc - r) % 64 == 0, "compressor_emit: head_dim - rope_dim must be a multiple of 64");
  }
  DSV4_CUDA_REQUIRE(a.state.format == KvEntryFormat::kF32 && a.state.entry_bytes == 8LL * c * dc,
                    "compressor_emit: the state table must hold f32 rows of 2·c·head_dim");
  // kv_entry_bytes throws (dsv4::Error) for dims the format cannot hold.
  DSV4_CUDA_REQUIRE(a.out.entry_bytes == kv_entry_bytes(a.out.format, {dc, r}),
                    "compressor_emit: the output table's entry size does not match its format and dims");
  DSV4_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(a.out.base) % 2 == 0 && a.out.page_bytes % 2 == 0,
                    "compressor_emit: the output table must be 2-byte aligned");
  if (a.entries == 0) return;
  const int threads = dc < 128 ? 128 : dc;
  const float had_scale = static_cast<float>(std::pow(static_cast<double>(dc), -0.5));  // as hadamard_row
  launch_kernel(emit_kernel, static_cast<unsigned>(a.entries), threads, 0, stream, a, c, had_scale);
}

}  // namespace dsv4::cuda
