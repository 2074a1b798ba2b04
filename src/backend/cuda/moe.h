// Mixture of experts on the GPU (MODEL.md §6): the gate (scores, top-k or hash routing, weights)
// and the experts (routed FP4/FP8 experts through the grouped GEMM, the FP8 shared expert, combine).
// Arithmetic as in backend/cpu/moe.cpp, so that with exact GEMMs the output is bit-identical to the
// CPU backend. Everything is enqueued on one stream without host synchronisation; index errors
// (unknown token or expert ids) are skipped and recorded in the device error flag `err` (DeviceError,
// may be null). The contracts are backend/op_params.h's MoeGateParams, MoeExpertsParams,
// SharedExpertParams and SwigluParams, taken with device pointers (weight views of device memory).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cuda/gemm.h"
#include "backend/op_params.h"

namespace dsv4::cuda {

// Limits of the kernels: experts per layer and experts per token.
constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeMaxTopk = 32;

// The shared expert alone: the same kernels, hence bits, as inside MoeRunner::experts, with g and u
// [tokens, inter_dim] bf16 scratch; `exact`: its GEMMs through the exact kernel and its SwiGLU exact
// whatever gemm's tier. On gemm's stream.
void shared_expert(GemmRunner& gemm, const SharedExpertParams& p, bool exact, uint16_t* g, uint16_t* u,
                   cudaStream_t stream);

// SwiGLU (16-byte vectors where g, u and out allow, element by element otherwise); the experts run the
// same arithmetic inside (swiglu_one), so their bits agree with it. fast: the sigmoid's exp as the fast
// tier allows (fast_expf) for ops with sums around it; the swiglu op itself passes false (the replay gate
// wants the exact op's bits of ops without sums).
void swiglu(const SwigluParams& p, bool fast, cudaStream_t stream);
// The moe_combine op: indices distinct per row (ranked by value), topk <= kMoeMaxTopk.
void moe_combine(const MoeCombineParams& p, cudaStream_t stream);

// Owns the MoE scratch (grow-only, stream-ordered allocations) and the cached expert pointer
// tables. `stream` must be the stream `gemm` was created with; one call at a time.
class MoeRunner {
 public:
  MoeRunner(GemmRunner& gemm, cudaStream_t stream);
  ~MoeRunner();
  MoeRunner(const MoeRunner&) = delete;
  MoeRunner& operator=(const MoeRunner&) = delete;

  // z = fp32(x)·fp32(W)ᵀ through the exact GEMM, then the scores and routes in one kernel a token. A
  // token id outside [0, vocab) or a table entry outside [0, experts) is reported (kMoeToken /
  // kMoeExpert) and gives expert 0 with weight 0.
  void gate(const MoeGateParams& p, int32_t* err);
  // Routed weights all kFp4 or all kFp8 (dim and inter_dim multiples of 128), the shared expert FP8;
  // an index outside [0, experts) is reported (kMoeExpert) and that slot contributes nothing. The
  // device pointer tables of the host arrays w1/w3/w2 are cached (keyed by expert 0's data pointer,
  // rebuilt when any pointer changes): the first call per layer uploads them with pageable copies, so
  // make it before any stream capture. p.shared_y must be 16-byte aligned. exact_shared: the shared
  // expert through the exact GEMM (bit-identical to the CPU) whatever gemm's precision.
  // before_combine (optional) runs on the host right before the kernel that adds the shared output
  // is enqueued: the caller's join of a side stream that made p.shared_y.
  void experts(const MoeExpertsParams& p, int32_t* err, bool exact_shared = false,
               const std::function<void()>& before_combine = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::cuda
