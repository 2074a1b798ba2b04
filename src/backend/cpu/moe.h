// CPU MoE (MODEL.md §6): the gate (sqrt-softplus / sigmoid / softmax scores, selection bias, hash
// routing) and the experts with SwiGLU clamp (the swiglu op), combined in ascending expert order,
// shared expert last. Top-k ties go to the lower expert index; the CUDA backend must break them the same way.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

void moe_gate(ThreadPool& pool, const MoeGateParams& p);
void moe_experts(ThreadPool& pool, const MoeExpertsParams& p);
void shared_expert(ThreadPool& pool, const SharedExpertParams& p);
// Experts split across ranks: their pair-by-pair halves and the combine over pair rows.
void moe_pairs(ThreadPool& pool, const MoePairsParams& p);
void moe_combine(ThreadPool& pool, const MoeCombineParams& p);
// The step between the experts' GEMMs, which they run through here; also the swiglu op.
void swiglu(ThreadPool& pool, const SwigluParams& p);

}  // namespace dsv4::cpu
