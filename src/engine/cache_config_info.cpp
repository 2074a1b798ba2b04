#include "engine/cache_config_info.h"

#include <fmt/format.h>

#include "kv/kv_layout.h"

namespace dsv4 {
namespace {

std::string python_bool(bool b) { return b ? "True" : "False"; }

// vLLM spells "every block" as None and otherwise takes the same numbers as dsv4.
std::string retention_name(int64_t interval) { return interval == -1 ? "None" : std::to_string(interval); }

}  // namespace

InfoLabels cache_config_info(const EngineConfig& c, const KvCacheSetup& cache, const ModelConfig& model) {
  const bool cpu = c.backend == "cpu";
  return {
      {"block_size", std::to_string(c.block_size)},
      {"gpu_memory_utilization", fmt::format("{}", c.gpu_memory_utilization)},
      {"swap_space", "0"},
      {"cache_dtype", std::string(kv_cache_dtype_name(c.kv_dtypes.cache))},
      {"is_attention_free", "False"},
      {"num_gpu_blocks_override", "None"},
      {"sliding_window", std::to_string(model.window_size)},
      {"enable_prefix_caching", python_bool(c.enable_prefix_caching)},
      {"prefix_caching_hash_algo", "xxhash"},
      {"cpu_offload_gb", "0"},
      {"calculate_kv_scales", "False"},
      {"cpu_kvcache_space_bytes", cpu ? std::to_string(cache.kv_cache_memory) : "None"},
      {"mamba_page_size_padded", "None"},
      {"mamba_block_size", "None"},
      {"mamba_cache_dtype", "auto"},
      {"mamba_ssm_cache_dtype", "auto"},
      {"mamba_cache_mode", "none"},
      {"num_gpu_blocks", std::to_string(cache.largest_request / kKvBlockTokens)},
      {"num_cpu_blocks", "None"},
      {"kv_sharing_fast_prefill", "False"},
      {"kv_cache_memory_bytes", std::to_string(cache.kv_cache_memory)},
      {"kv_offloading_size", "None"},
      {"kv_offloading_backend", "native"},
      {"prefix_cache_retention_interval", retention_name(c.prefix_cache_retention_interval)},
  };
}

}  // namespace dsv4
