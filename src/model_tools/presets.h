// Named model configurations for `dsv4 make-tiny` (random checkpoints in the official format).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/model_config.h"

namespace dsv4 {

struct Preset {
  std::string name;
  std::string description;
  ModelConfig config;
  uint64_t default_seed;
};

// tiny: CI-sized (a few MB), layer kinds 0, 4 and 128, vocab 1024.
// serve: the embedded default model: the real V4 tokenizer's vocab (129280), dim 256, < 200 MB.
// flash-attn: V4-Flash attention exactly (43 layers, 64 x 512 heads, indexer 64 x 128 top-512, MTP)
//   with 32 routed experts so that it fits one H200 with room for a large KV cache.
const Preset& find_preset(std::string_view name);  // throws naming the known presets
std::vector<std::string> preset_names();

}  // namespace dsv4
