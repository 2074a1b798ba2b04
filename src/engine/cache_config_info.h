// The labels of vLLM's `vllm:cache_config_info` gauge: the fields of vLLM's CacheConfig (their names and
// Python spellings: "True", "None", "0.9") filled with what dsv4's engine resolved, so that dashboards
// reading block size, cache dtype or prefix caching from it work unchanged. Fields that have no dsv4
// counterpart (swap, mamba, offloading) carry vLLM's value for "not in use".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/model_config.h"
#include "engine/cache_sizing.h"
#include "engine/engine_config.h"

namespace dsv4 {

using InfoLabels = std::vector<std::pair<std::string, std::string>>;

// In vLLM's order; without `engine` (the metrics page adds it).
InfoLabels cache_config_info(const EngineConfig& config, const KvCacheSetup& cache, const ModelConfig& model);

}  // namespace dsv4
