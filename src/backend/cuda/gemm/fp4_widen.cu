// FP4 weights widened to e5m2 rows (fp4_widen.h).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm/fp4_shift.h"
#include "backend/cuda/gemm/fp4_widen.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/launch.cuh"

namespace dsv4::cuda {
namespace {

using gemm_tiles::cdiv;

// A thread a (weight slot, row, 128-wide K block): the block's codes as e5m2 against its largest scale
// and that scale, exactly as the wgmma kernel's widen_stage makes them in shared memory (fp4_shift.h's
// table words; a span past 26 octaves reported).
__global__ void widen_kernel(const ExactBlockArgs p, int experts, int32_t* err) {
  pdl_enter();
  const int64_t kbs = p.kg / 128, per_slot = p.n * kbs;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int halves = has_pair(p) ? 2 : 1;
  if (i >= halves * experts * per_slot) return;
  const int s = static_cast<int>(i / per_slot / experts), e = static_cast<int>(i / per_slot % experts);
  const int64_t r = i % per_slot / kbs, kb = i % kbs;
  if (p.offsets && p.offsets[e + 1] == p.offsets[e]) return;
  const uint8_t* w = static_cast<const uint8_t*>(p.offsets ? (s ? p.w_list_b : p.w_list)[e] : (s ? p.w_b : p.w));
  const uint8_t* ws = p.offsets ? (s ? p.w_scale_list_b : p.w_scale_list)[e] : (s ? p.w_scale_b : p.w_scale);
  const uint32_t sw = *reinterpret_cast<const uint32_t*>(ws + r * (p.kg / 32) + kb * 4), top = max_byte(sw);
  if (top != 255u && top - min_byte(sw) > 26u) report(err, DeviceError::kGemmFp4Span);
  const int64_t slot = (s ? p.wide_slots : 0) + e;
  p.wide_scale[slot * per_slot + r * kbs + kb] = __uint_as_float(fp4_block_scale_bits(top));
  const uint4* src = reinterpret_cast<const uint4*>(w + r * (p.kg / 2) + kb * 64);
  uint4* dst = reinterpret_cast<uint4*>(p.wide + slot * p.n * p.kg + r * p.kg + kb * 128);
#pragma unroll
  for (int u = 0; u < 4; ++u) {  // a 16-byte unit of codes is one 32-wide sub-block
    const uint4 v = src[u];
    const Fp8Table t = e5m2_table(static_cast<int>((sw >> (8 * u)) & 255u) - static_cast<int>(top) + 13);
    const HalfWords c0 = e2m1x8_by_table(v.x, t), c1 = e2m1x8_by_table(v.y, t);
    const HalfWords c2 = e2m1x8_by_table(v.z, t), c3 = e2m1x8_by_table(v.w, t);
    dst[2 * u] = uint4{c0.lo, c0.hi, c1.lo, c1.hi};
    dst[2 * u + 1] = uint4{c2.lo, c2.hi, c3.lo, c3.hi};
  }
}

}  // namespace

void widen_fp4(const ExactBlockArgs& a, int experts, int32_t* err, cudaStream_t stream) {
  DSV4_CUDA_REQUIRE(a.kind == GemmWeightKind::kFp4 && a.kg % 128 == 0 && a.wide && a.wide_scale && experts >= 1,
                    "widen_fp4: an FP4 call with K % 128 == 0 and its scratch");
  const int64_t threads = int64_t{experts} * (has_pair(a) ? 2 : 1) * a.n * (a.kg / 128);
  launch_kernel(widen_kernel, static_cast<unsigned>(cdiv(threads, 256)), dim3(256), 0, stream, a, experts, err);
}

}  // namespace dsv4::cuda
