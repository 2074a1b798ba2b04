// Mixture of experts on the GPU (MODEL.md §6): the gate (scores, top-k or hash routing, weights)
// and the experts (routed FP4/FP8 experts through the grouped GEMM, the FP8 shared expert, combine).
// Arithmetic as in backend/cpu/moe.cpp, so that with exact GEMMs the output is bit-identical to the
// CPU backend. Everything is enqueued on one stream without host synchronisation; index errors
// (unknown token or expert ids) are skipped and recorded in a device error flag (DeviceError).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cuda/gemm.h"

namespace dsv4::cuda {

// Score function of the gate; same values as core ScoreFunc (core/model_config.h).
enum class MoeScore : uint8_t { kSqrtSoftplus = 0, kSoftmax = 1, kSigmoid = 2 };

// Limits of the kernels: experts per layer and experts per token.
constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeMaxTopk = 32;

// backend/ops.h MoeGateParams, device pointers. z = fp32(x)·fp32(W)ᵀ (exact GEMM); s = score(z);
// indices: tid2eid[token_ids[t]·topk + r] (hash routing) or the top-k of s + bias by value
// descending, ties to the lower expert; weights = s[e] / Σ_r s (not for softmax) · route_scale.
// A token id outside [0, vocab) or a table entry outside [0, experts) is reported (kMoeToken /
// kMoeExpert) and gives expert 0 with weight 0.
struct MoeGateArgs {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;
  GemmWeight weight;                   // [experts, dim], kBf16 or kF32
  const float* bias = nullptr;         // [experts] selection-only bias, or null
  const int32_t* tid2eid = nullptr;    // [vocab, topk] hash routing table, or null
  const int32_t* token_ids = nullptr;  // [tokens], hash routing only
  int64_t vocab = 0;
  int experts = 0;
  int topk = 0;
  MoeScore score = MoeScore::kSqrtSoftplus;
  float route_scale = 1;
  int32_t* indices = nullptr;  // [tokens, topk]
  float* weights = nullptr;    // [tokens, topk]
  int32_t* err = nullptr;      // device error flag, or null
};

// backend/ops.h MoeExpertsParams, device pointers except the host arrays w1/w3/w2 (of device
// weights). Per routed (token, expert): a = bf16(w·silu(min(g, L))·clamp(u, ±L)) with g, u the bf16
// outputs of w1, w3 (L = swiglu_limit, no clamp when 0); y_e = w2(a). Shared expert likewise on
// every token without weight or clamp. y = bf16(Σ_e fp32(y_e) in ascending expert order + fp32(y_s)).
// An index outside [0, experts) is reported (kMoeExpert) and that slot contributes nothing.
struct MoeExpertsArgs {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;                   // multiple of 128
  int64_t inter_dim = 0;             // multiple of 128
  const int32_t* indices = nullptr;  // [tokens, topk] from the gate
  const float* weights = nullptr;    // [tokens, topk]
  int topk = 0;
  int experts = 0;
  // Host arrays [experts] of routed weights, all kFp4 or all kFp8: w1, w3 [inter_dim, dim], w2
  // [dim, inter_dim]. Their device pointer tables are cached (keyed by expert 0's data pointer,
  // rebuilt when any pointer changes): the first call per layer uploads them with pageable copies,
  // so make it before any stream capture.
  const GemmWeight* w1 = nullptr;
  const GemmWeight* w3 = nullptr;
  const GemmWeight* w2 = nullptr;
  GemmWeight shared_w1;       // [inter_dim, dim]
  GemmWeight shared_w3;       // [inter_dim, dim]
  GemmWeight shared_w2;       // [dim, inter_dim]
  float swiglu_limit = 0;     // routed experts only; 0 = no clamp
  bool exact_shared = false;  // shared expert through the exact GEMM (bit-identical to the CPU)
  uint16_t* y = nullptr;      // [tokens, dim] bf16
  int32_t* err = nullptr;     // device error flag, or null
  // The shared expert's output [tokens, dim] (16-byte aligned) made beforehand by shared_expert,
  // or null: experts() computes it.
  const uint16_t* shared_y = nullptr;
};

// The shared expert alone: y = w2(bf16(silu(g)·u)), g, u = w1(x), w3(x) as bf16 in the scratch g, u
// [tokens, inter_dim]; the same kernels, hence bits, as inside MoeRunner::experts. On gemm's stream.
struct SharedExpertArgs {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;
  int64_t inter_dim = 0;
  GemmWeight w1, w3, w2;
  bool exact = false;
  uint16_t* y = nullptr;  // [tokens, dim] bf16
};
void shared_expert(GemmRunner& gemm, const SharedExpertArgs& a, uint16_t* g, uint16_t* u, cudaStream_t stream);

// Owns the MoE scratch (grow-only, stream-ordered allocations) and the cached expert pointer
// tables. `stream` must be the stream `gemm` was created with; one call at a time.
class MoeRunner {
 public:
  MoeRunner(GemmRunner& gemm, cudaStream_t stream);
  ~MoeRunner();
  MoeRunner(const MoeRunner&) = delete;
  MoeRunner& operator=(const MoeRunner&) = delete;

  void gate(const MoeGateArgs& a);
  // before_combine (optional) runs on the host right before the kernel that adds the shared output
  // is enqueued: the caller's join of a side stream that made a.shared_y.
  void experts(const MoeExpertsArgs& a, const std::function<void()>& before_combine = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::cuda
