// Private interface between the GEMM kernels (gemm.cu) and GemmRunner (cublaslt_gemm.cpp): plain
// parameter structs and launchers of the exact kernels, the activation scratch layout and the fp32
// weight-scale conversion of the cuBLASLt path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm.h"

namespace dsv4::cuda {

// Leading dimension of the fp32 activation scales [K/128][ld] (cuBLASLt VEC128 on the B operand:
// the row index runs fastest). The one place that fixes it: rows rounded up to a multiple of 4.
inline int64_t act_scale_ld(int64_t rows) { return (rows + 3) / 4 * 4; }

// Leading dimension of the fp32 weight scales [ceil(N/128)][ld] (cuBLASLt BLK128x128 on the A
// operand: the K-block index runs fastest, padded to a multiple of 4 = 16 bytes).
__host__ __device__ inline int64_t weight_scale_ld(int64_t k) { return ((k + 127) / 128 + 3) / 4 * 4; }

// Block-scaled exact GEMM over activations quantized by quantize_act (codes) or, for dense GEMMs,
// bf16 rows that the kernel quantizes as it stages them (x; 16-byte aligned, x_ld % 8 == 0): the same
// codes without the extra launch and round trip. Row m of the output uses row m, columns
// [g·kg, (g+1)·kg) for output column n of group g = n / ng.
struct ExactBlockArgs {
  GemmWeightKind kind = GemmWeightKind::kFp8;  // kFp8 or kFp4
  const uint16_t* x = nullptr;                 // bf16 [rows][x_ld], or null: codes and scales
  int64_t x_ld = 0;
  const uint8_t* codes = nullptr;  // e4m3 [rows][codes_ld]
  int64_t codes_ld = 0;
  const float* scales = nullptr;  // [codes_ld/128][scale_ld]
  int64_t scale_ld = 0;
  int64_t rows = 0;  // dense: the rows; grouped: host bound of offsets[experts]
  int64_t n = 0;     // all output columns
  int64_t ng = 0;    // output columns of one group
  int64_t kg = 0;    // weight columns (K of one group)
  int groups = 1;
  // Dense: one weight. Grouped (offsets != null): per-expert device pointer arrays.
  const void* w = nullptr;
  const uint8_t* w_scale = nullptr;
  const void* const* w_list = nullptr;
  const uint8_t* const* w_scale_list = nullptr;
  const int32_t* offsets = nullptr;
  int experts = 0;
  bool offsets_settled = false;  // GroupedGemmArgs::offsets_settled
  void* y = nullptr;
  int64_t y_ld = 0;
  bool y_f32 = false;
  // Optional split-K scratch (dense only): with few row x column tiles each CTA takes one 1024-wide
  // K stage, stores its block contributions and the last CTA of a tile adds them all in order.
  // counters must start zeroed (the kernel leaves them zeroed).
  float* partial = nullptr;
  int64_t partial_floats = 0;
  int32_t* counters = nullptr;
  int64_t counter_count = 0;
  // Optional int8 digit planes for the tensor-core kernel (gemm_imma.h, digit_planes): of the
  // activation codes (plane p at a_digits + p·a_digit_stride, rows of codes_ld bytes) and of a dense
  // FP8 weight (plane p at w_digits + p·n·kg, rows of kg bytes). Without them it converts the codes
  // itself, once per CTA that reads them.
  const int8_t* a_digits = nullptr;
  int64_t a_digit_stride = 0;
  const int8_t* w_digits = nullptr;
  // Optional pair: second weights (w_b / w_scale_b dense, w_list_b / w_scale_list_b grouped) of w's
  // shape and kind, read with the same activations, output at y_b (same strides). The one-row FP4
  // GEMV and the few-row tensor-core kernel take both in one launch; otherwise the two run in turn.
  const void* w_b = nullptr;
  const uint8_t* w_scale_b = nullptr;
  const void* const* w_list_b = nullptr;
  const uint8_t* const* w_scale_list_b = nullptr;
  void* y_b = nullptr;
  // Optional (wgmma, FP4): the weights widened beforehand (wgmma_gemm.h): weight slot s (expert e, or
  // the pair's wide_slots + e) holds e5m2 codes [n][kg] at wide + s·n·kg and fp32 row-block scales
  // [n][kg/128] at wide_scale + s·n·kg/128.
  uint8_t* wide = nullptr;
  float* wide_scale = nullptr;
  int wide_slots = 0;
};
void exact_block_gemm(const ExactBlockArgs& a, const GemmPolicy& policy, cudaStream_t stream);

// Whether a call has its pair (a second weight on the same rows, output at y_b).
__host__ __device__ inline bool has_pair(const ExactBlockArgs& a) {
  return a.y_b && (a.offsets ? a.w_list_b != nullptr : a.w_b != nullptr);
}

// The split-K scratch exact_block_gemm would use for these arguments (zeros: it would not split).
struct SplitNeed {
  int64_t floats = 0;
  int64_t counters = 0;
};
SplitNeed exact_block_split_need(const ExactBlockArgs& a, const GemmPolicy& policy);

// Plain exact GEMM (bf16 or f32 weight, bf16 x): one ascending fp32 sum per output.
struct ExactPlainArgs {
  const uint16_t* x = nullptr;  // bf16 [rows][x_ld]
  int64_t x_ld = 0;
  int64_t rows = 0;
  int64_t n = 0;
  int64_t ng = 0;
  int64_t kg = 0;
  int groups = 1;
  const void* w = nullptr;  // [n][kg]
  bool w_f32 = false;
  // Optional (bf16 weights): the same values as FP8 blocks, e4m3 [n][kg] and ue8m0 [n/128][kg/128]
  // (backend/weight.h's twin); the few-row kernel reads these where given.
  const uint8_t* w_fp8 = nullptr;
  const uint8_t* w_fp8_scale = nullptr;
  void* y = nullptr;
  int64_t y_ld = 0;
  bool y_f32 = false;
  // Optional pair: a second weight of w's shape and kind read with the same input, its output at y_b
  // (same strides). Both run in one launch: a decode step's chains of the two run side by side.
  const void* w_b = nullptr;
  void* y_b = nullptr;
  // Wide row tiles (8-32 rows) keep at least this many CTAs (0: the SM count): GemmPolicy's value.
  int64_t min_wide_tiles = 0;
};
void exact_plain_gemm(const ExactPlainArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
