// GEMMs of the CUDA backend (MODEL.md §9.3, backend/ops.h LinearParams): y[m, n] = Σ_k x[m, k]·W[n, k].
// GemmRunner plans each call (gemm/gemm_plan.h) under the backend's GemmPolicy and runs that route.
//  * Exact tier: the exact kernels compute the CPU backend's arithmetic bit for bit
//    (backend/cpu/linear.cpp): per K-block (128 for FP8, 32 for FP4) the exact sum P of the codes'
//    products rounded once to fp32, then C += P·(sa·sb) (FP8) or C += (P·sa)·sb (FP4) in block
//    order; plain weights one ascending fp32 sum. Among them: SIMT kernels that quantize bf16 rows as
//    they read them, the int8 tensor cores for 64 or more rows a weight (gemm_imma.h) and few rows
//    of FP4 experts (gemm_imma_skinny.h), one-row GEMVs (fp8_gemv.h, fp4_gemv.h).
//  * Fast tier (spec/NUMERICS.md): FP8/FP4 on the FP8 tensor cores with per-block promotion
//    (gemm/fast_mma.h), dense FP8 of many rows on cuBLASLt's block-scaled GEMM (VEC128 activations x
//    BLK128x128 weights; cuBLASLt 13.1 takes rows % 4 == 0, else the tensor-core kernel), bf16 on
//    cuBLASLt with fp32 accumulation; fp32 weights of many rows on fused multiply-add chains
//    (gemm/fast_sgemm.h), of few on the exact plain kernel.
// Calls that set GemmArgs::exact (the MoE gate, whose scores choose the experts) take the exact
// kernels on either tier.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "backend/cuda/gemm/gemm_plan.h"

namespace dsv4::cuda {

// One weight matrix [rows = N, cols = K] in device memory, scales as stored in the checkpoint:
// FP8 ue8m0 [ceil(N/128), ceil(K/128)], FP4 ue8m0 [N, K/32]; FP4 data packed [N, K/2].
struct GemmWeight {
  GemmWeightKind kind = GemmWeightKind::kBf16;
  const void* data = nullptr;
  const uint8_t* scale = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* fp8_twin = nullptr;  // bf16 only: the same values as FP8 blocks (backend/weight.h)
  const uint8_t* fp8_twin_scale = nullptr;
};

enum class GemmOut : uint8_t { kBf16, kF32 };

struct GemmArgs {
  const uint16_t* x = nullptr;  // [rows, groups·K] bf16, row stride x_stride (0 = groups·K)
  int64_t rows = 0;
  GemmWeight w;       // [N, K]
  void* y = nullptr;  // [rows, N], row stride y_stride (0 = N)
  GemmOut out = GemmOut::kBf16;
  int groups = 1;  // grouped (wo_a): output column n uses x slice n / (N/groups)
  int64_t x_stride = 0;
  int64_t y_stride = 0;
  bool exact = false;  // the exact kernels whatever the runner's tier
};

// Owns the cuBLASLt handle, its workspace and scratch for quantized activations and split-K
// partials. run() only enqueues on the stream (scratch grows with stream-ordered allocations); it
// is not thread-safe. Weights and x must be 16-byte aligned for the fast paths.
struct GroupedGemmArgs;

class GemmRunner {
 public:
  // error_flag (optional, device): the device's error word, where kernels report (device_error.h).
  explicit GemmRunner(cudaStream_t stream, const GemmPolicy& policy = {}, int32_t* error_flag = nullptr);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  void run(const GemmArgs& a);
  // run(a) and the same with the weight w_b (a's kind and shape) into y_b: one launch where the exact
  // plain kernels (the compressor's wkv and wgate) or the few-row block-scaled kernel (the shared
  // expert's w1 and w3 at decode) take both, else two runs.
  void run_pair(const GemmArgs& a, const GemmWeight& w_b, void* y_b);
  // The routed experts' grouped GEMM (a pair in one launch where the route takes it), planned as run().
  void grouped(const GroupedGemmArgs& a);
  // Whether grouped() of `kind` weights over `rows` rows (experts > 0) or a dense call would use
  // activation digit planes (GroupedGemmArgs::a_digits), which the caller then makes.
  bool wants_digit_planes(GemmWeightKind kind, int64_t rows, int experts, int64_t k) const;
  // Whether grouped() of `kind` weights over `rows` rows plans a cuBLASLt matmul an expert
  // (GemmRoute::kCublasLtExperts), which takes an expert's rows in one matmul when their count is a
  // multiple of 4 (else a second one for its last 4 rows, reading the weight again): callers that can
  // pad their row layout to that then do (the MoE). kept: the call's experts are kept re-encoded
  // (keeps_experts; the route then starts at fewer rows).
  bool lt_experts_planned(GemmWeightKind kind, int64_t rows, int experts, int64_t k, bool kept = false) const;
  // Whether the FP4 experts of the device pointer table w_list (and w_list_b's, as its pair; or null), of n x k
  // each, are kept re-encoded for cuBLASLt's route or would be at their next call there (GemmPolicy::
  // lt_experts_resident, within set_kept_budget's bytes). grouped() asks the same of its weights when they
  // are known to re-encode exactly (GroupedGemmArgs::reencode_checked).
  bool keeps_experts(const void* const* w_list, const void* const* w_list_b, int64_t n, int64_t k, int experts) const;
  const GemmPolicy& policy() const;
  // Whether every 128x128 block of every expert's FP4 weight in a (a grouped FP4 call's weights, and the
  // pair's where y_b is set; offsets given, not read) re-encodes exactly to e4m3 with one scale (gemm/lt_experts.h): a
  // check over all experts and a sync, so callers ask once per weight list. Nothing (no answer) while the stream is
  // being recorded.
  std::optional<bool> fp4_experts_reencode_exactly(const GroupedGemmArgs& a);
  // Forgets the experts kept re-encoded from the device pointer table w_list (GemmPolicy::
  // lt_experts_resident), as or with a pair: its owner is about to free or refill it.
  void forget_kept_experts(const void* const* w_list);
  // The most bytes of experts it keeps re-encoded (unbounded until set; lists past it re-encode a pass at a
  // time each call): what the engine's memory plan granted (CudaOps::grant_optional_workspace).
  void set_kept_budget(int64_t bytes);
  // Grouped calls run as a cuBLASLt matmul an expert (GemmRoute::kCublasLtExperts), and those its plan
  // sent there that took the wgmma kernel instead (scales spanning too far, cuBLASLt refusing, a graph
  // being recorded: the route reads the experts' row counts on the host).
  // lt_count_reads: the route's syncs for the row counts (GroupedGemmArgs::same_offsets spares them).
  struct Stats {
    int64_t lt_expert_calls = 0;
    int64_t lt_expert_fallbacks = 0;
    int64_t lt_count_reads = 0;
    int64_t lt_resident_weights = 0;  // weight lists re-encoded once and kept (GemmPolicy::lt_experts_resident)
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Grouped block-scaled GEMM for the routed experts: rows are sorted by expert, expert e owning rows
// [offsets[e], offsets[e+1]) (device array, experts + 1 entries, offsets[experts] <= rows). Each
// expert has its own weight [N, K] (FP8 or FP4, all experts one kind and shape), given as device
// arrays of per-expert data and scale pointers. Activations come pre-quantized (quantize_act).
// y: bf16 [rows, N]; rows past offsets[experts] are left untouched (but row_slack's). Same arithmetic as
// the exact kernel.
// a_codes and every expert's weight must be 16-byte aligned; K a multiple of 128.
struct GroupedGemmArgs {
  const uint8_t* a_codes = nullptr;  // e4m3 [rows, K]
  const float* a_scales = nullptr;   // [K/128, scale_ld] (K-block major)
  int64_t scale_ld = 0;
  int64_t rows = 0;  // host-known upper bound of offsets[experts]
  int64_t n = 0;
  int64_t k = 0;
  int experts = 0;
  const int32_t* offsets = nullptr;
  GemmWeightKind kind = GemmWeightKind::kFp8;
  const void* const* w_data = nullptr;      // device [experts]
  const uint8_t* const* w_scale = nullptr;  // device [experts]
  uint16_t* y = nullptr;
  // Row stride of y and y_b (0: n). The pair side by side (y_b = y + n, y_ld = 2n) lets the cuBLASLt
  // route multiply both weights of an expert in one matmul.
  int64_t y_ld = 0;
  // Optional digit planes of a_codes (gemm_imma.h digit_planes, rows of k bytes): plane p at
  // a_digits + p·a_digit_stride. They spare the tensor-core kernel converting codes per CTA.
  const int8_t* a_digits = nullptr;
  int64_t a_digit_stride = 0;
  // Optional pair (the MoE's w1 and w3): a second weight of every expert, same shape and kind, read
  // with the same rows, its output at y_b. The one-row GEMV and the tensor-core kernels run both in one
  // launch, so that their CTAs share the waves; the other kernels run one after the other.
  const void* const* w_data_b = nullptr;
  const uint8_t* const* w_scale_b = nullptr;
  uint16_t* y_b = nullptr;
  // Rows past offsets[experts] (up to 3) the call may read in a_codes and overwrite in y and y_b: the
  // cuBLASLt route multiplies an expert of 1-3 rows as 4 (what its block-scaled GEMM takes), those experts
  // first, in ascending order on one stream, so each spill is written again by a later expert's own rows
  // or lands past the last (gemm_plan.h lt_expert_pieces); it needs 3.
  int row_slack = 0;
  // The cuBLASLt route reads the experts' row counts on the host and checks that their FP4 blocks
  // re-encode exactly: a sync a call. A caller that knows more says so: every expert's weights (and the
  // pair's) re-encode exactly (GemmRunner::fp4_experts_reencode_exactly, asked once per weight list),
  // and offsets hold what they held at this runner's previous call, a grouped one (then, where that call
  // read them on the host, this one reads nothing).
  bool reencode_checked = false;
  bool same_offsets = false;
  // offsets were final before the kernel just before this call's began: written two or more kernels back
  // on this stream, so a kernel of this call may read them before its wait on the previous one (launch.cuh).
  bool offsets_settled = false;
};
void grouped_gemm(const GroupedGemmArgs& a, const GemmPolicy& policy, cudaStream_t stream);

// Activation quantization of the FP8/FP4 GEMMs (MODEL.md §2.2 with block 128): per row and 128-block,
// e4m3 codes [rows, K] and the fp32 power-of-two scale at scales[kb·scale_ld + row] (K-block major,
// scale_ld >= rows; cuBLASLt's VEC128 layout). Bit-identical to core/quant.h.
// ws (optional, same launch): an FP8 weight's ue8m0 scales [ceil(n/128)][ceil(k/128)] -> fp32
// [ceil(n/128)][weight_scale_ld(k)] (padding zero) at ws.out, the BLK128x128 operand of cuBLASLt.
struct WeightScaleJob {
  const uint8_t* scale = nullptr;
  int64_t n = 0, k = 0;
  float* out = nullptr;
};
void quantize_act(const uint16_t* x, int64_t rows, int64_t k, int64_t x_stride, uint8_t* codes, float* scales,
                  int64_t scale_ld, cudaStream_t stream, const WeightScaleJob& ws = {});

}  // namespace dsv4::cuda
