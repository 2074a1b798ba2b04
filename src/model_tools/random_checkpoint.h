// Random checkpoints in exactly the official Hugging Face format (config.json,
// inference/config.json, index, shards; FP8/FP4 quantized the way the release is), deterministic
// from a seed. Weights are scaled for healthy activations: unit variance into every linear,
// attention-score std about 3, sinks about 3, sublayer outputs below the residual, logit std about 3.
#pragma once

#include <cstdint>
#include <filesystem>

#include "core/model_config.h"

namespace dsv4 {

struct RandomCheckpointStats {
  uint64_t tensor_bytes = 0;
  uint64_t num_tensors = 0;
  size_t num_shards = 0;
};

// Writes the folder `out` (created if needed). Shards hold at most max_shard_bytes of tensors.
RandomCheckpointStats write_random_checkpoint(const ModelConfig& cfg, uint64_t seed, const std::filesystem::path& out,
                                              uint64_t max_shard_bytes = uint64_t{4} << 30);

}  // namespace dsv4
