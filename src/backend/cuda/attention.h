// Attention-side kernels: storing K=V entries into a paged table and sparse attention with the sink
// (MODEL.md §5.4, §5.7). Generic paths for any head_dim (nope a multiple of 64, head_dim <= 1024);
// arithmetic as in backend/cpu/attention.cpp (64-index blocks, online softmax, bf16 P).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_table.h"

namespace dsv4::cuda {

// rows x [head_dim] bf16 -> the entries at slots[r] (-1: skipped; outside the table: reported in
// err, skipped). Formats kAttnFp8 and kBf16 (attention) and kF32. Values must be on the entry's grid
// (Q8 already applied to the nope dims), as the CPU codec assumes.
void store_entries(const uint16_t* x, int64_t rows, int head_dim, int rope_dim, DeviceTable table, const int32_t* slots,
                   int32_t* err, cudaStream_t stream);

// The fused window insert (backend/ops.h KvInsertParams): RMSNorm, RoPE, Q8 of the nope dims, store.
struct KvInsertArgs {
  const uint16_t* x = nullptr;  // [rows, dim]
  int64_t rows = 0;
  int dim = 0;
  int rope_dim = 0;
  const uint16_t* norm_weight = nullptr;
  float eps = 1e-6f;
  const int32_t* positions = nullptr;
  const float* freqs = nullptr;  // [rope_dim / 2]
  DeviceTable table;             // kAttnFp8 or kBf16
  const int32_t* slots = nullptr;
  int32_t* err = nullptr;
};
void kv_insert(const KvInsertArgs& a, cudaStream_t stream);

struct AttentionArgs {
  const uint16_t* q = nullptr;  // [tokens, heads, head_dim]
  uint16_t* out = nullptr;      // [tokens, heads, head_dim]
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  int rope_dim = 0;
  const float* sink = nullptr;  // [heads]
  float softmax_scale = 0;
  DeviceTable window;
  const int32_t* window_slots = nullptr;
  int32_t window_width = 0;
  DeviceTable compressed;
  const int32_t* compressed_slots = nullptr;
  int32_t compressed_width = 0;
  int32_t* err = nullptr;              // device error flag (slots outside a table are skipped and reported)
  const int32_t* positions = nullptr;  // [tokens]: inverse RoPE of the output's last rope_dim dims
  const float* freqs = nullptr;        // [rope_dim / 2], with positions
};

// Dispatches to the V4 fast path when it applies (mqa_fast_path), else the generic kernel.
void sparse_attention(const AttentionArgs& a, cudaStream_t stream);

// The fast path (attention_mqa.cu): head_dim 512 with 64 rope dims, heads a multiple of 16, attn-fp8
// tables. Exposed so that tests can compare it with the generic kernel.
bool mqa_fast_path(const AttentionArgs& a);
void sparse_attention_mqa(const AttentionArgs& a, cudaStream_t stream);
void sparse_attention_generic(const AttentionArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
