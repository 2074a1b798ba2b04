// Sizing the KV cache for the engine (CPU backend): --kv-cache-memory becomes pools (size_kv_pools,
// which reserves sliding windows for max_num_seqs requests and one prefill chunk), and --max-model-len
// is checked against what one request can hold in them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "engine/engine_config.h"
#include "kv/kv_layout.h"

namespace dsv4 {

struct KvCacheSetup {
  KvLayout layout;
  std::vector<int64_t> pool_pages;  // per bucket
  int64_t kv_cache_memory = 0;      // the budget
  int64_t pool_bytes = 0;           // what the pools take of it
  int64_t max_model_len = 0;        // resolved
  int64_t largest_request = 0;      // positions one request can hold in the pools
  int64_t host_tier_tokens = 0;     // the same for the host tier's pages (--kv-offload-bytes; 0 when off)
  std::string warning;              // set when max_model_len was lowered to what fits
};

// min(4 GiB, 25% of physical memory).
int64_t default_kv_cache_memory();

// The host tier's bytes: `requested`, or for kKvOffloadAuto half of `available` (the host memory free at
// startup; available_host_memory()), in whole MiB.
int64_t resolve_kv_offload_bytes(int64_t requested, int64_t available);
// MemAvailable of /proc/meminfo in bytes (0 when unreadable).
int64_t available_host_memory();

// Tokens a step takes at most: `requested`, or for 0 vLLM's default for its OpenAI server, 8192 on a GPU
// (`gpu_bytes` > 0) of at least kLargeGpuBytes and 2048 on smaller ones and on the CPU. Where decodes run, the
// latency policy still holds a step with prefill to its time target; alone, prompts take bigger chunks (an 8K
// prompt in one step of 8192 tokens).
inline constexpr int64_t kLargeGpuBytes = int64_t{70} << 30;
int64_t resolve_max_num_batched_tokens(int64_t requested, int64_t gpu_bytes);

// The engine's reserve for one step's activations of `tokens` tokens: a prefill chunk's widest tensors,
// with room for the allocator's slack (bench step prints it beside the peak a step measured).
int64_t step_activation_reserve(const ModelConfig& model, int64_t tokens);

// Positions one request can hold at most in pools of `pool_pages` (0 when not even one).
int64_t largest_request(const KvLayout& layout, std::span<const int64_t> pool_pages);

// KV bytes the pools charge one request of `tokens` positions.
int64_t request_kv_bytes(const KvLayout& layout, int64_t tokens);

// Of `spare` bytes of GPU memory (the KV budget before any grant), what a backend's optional workspace
// (Ops::optional_workspace_bytes, at most `wanted`) may take: the spare beyond pools (as plan_kv_cache
// splits them, sliding windows included) that hold max_num_seqs requests of max_model_len positions each
// (the model's length where 0).
int64_t optional_workspace_grant(const ModelConfig& model, const EngineConfig& config, int64_t spare, int64_t wanted);

// Throws dsv4::Error with the numbers: a block size other than 256, a budget too small for the sliding
// windows, an explicit max_model_len above the model's or above what fits.
KvCacheSetup plan_kv_cache(const ModelConfig& model, const EngineConfig& config);

}  // namespace dsv4
