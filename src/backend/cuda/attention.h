// Attention-side kernels: storing K=V entries into a paged table and sparse attention with the sink
// (MODEL.md §5.4, §5.7). Generic paths for any head_dim (nope a multiple of 64, head_dim <= 1024);
// arithmetic as in backend/cpu/attention.cpp (64-index blocks, online softmax, bf16 P). Launchers take
// the op's parameters (backend/op_params.h) with device pointers, plus what the device adds: the RoPE
// frequencies of p.rope in device memory (freqs) and the device error flag (err; slots outside a table
// are skipped and reported there).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_error.h"
#include "backend/op_params.h"

namespace dsv4::cuda {

// Formats kAttnFp8 and kBf16 (attention) and kF32. Values must be on the entry's grid (Q8 already
// applied to the nope dims), as the CPU codec assumes.
void store_entries(const StoreEntriesParams& p, int32_t* err, cudaStream_t stream);

// The fused window insert: RMSNorm, RoPE, Q8 of the nope dims, store (kAttnFp8 or kBf16 tables).
void kv_insert(const KvInsertParams& p, const float* freqs, int32_t* err, cudaStream_t stream);

// Sparse attention as its kernels get it: the op's parameters and what the device adds.
struct AttentionLaunch : SparseAttentionParams {
  const float* freqs = nullptr;  // [rope_dim / 2], with positions
  int32_t* err = nullptr;
};

// The fast path's shadow (attention_mqa.cu) for calls of many tokens: at most this many bf16 rows (64 MB).
constexpr int64_t kMqaShadowRows = 65536;

// Dispatches to the V4 fast path when it applies (mqa_fast_path; a shadow from shadow_min_tokens tokens,
// GemmPolicy::attention_shadow_min_tokens, 0: never), else the generic kernel.
void sparse_attention(const SparseAttentionParams& p, const float* freqs, int32_t* err, cudaStream_t stream,
                      int64_t shadow_min_tokens = 0);

// The fast path (attention_mqa.cu): head_dim 512 with 64 rope dims, heads a multiple of 16, attn-fp8
// tables. Exposed so that tests can compare it with the generic kernel, which leaves the inverse RoPE
// (positions) to sparse_attention.
// shadow_rows > 0: the entries the lists name decoded once into at most that many bf16 rows first (the
// rest decoded by the CTAs that read them, as without one): the same bits.
bool mqa_fast_path(const SparseAttentionParams& p);
void sparse_attention_mqa(const AttentionLaunch& a, cudaStream_t stream, int64_t shadow_rows = 0);
void sparse_attention_generic(const AttentionLaunch& a, cudaStream_t stream);

}  // namespace dsv4::cuda
