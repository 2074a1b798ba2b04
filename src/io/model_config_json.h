// config.json of a DeepSeek-V4 checkpoint <-> ModelConfig.
// Reads the Hugging Face config.json (or the reference's inference/config.json format, told apart
// by its keys), cross-checks inference/config.json when the folder has one, warns about unknown
// keys and refuses keys of incompatible revisions (V4.1 layer sharing, dspark drafts).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace dsv4 {

struct ConfigLoadResult {
  ModelConfig config;
  std::vector<std::string> warnings;                   // unknown keys and the like, already logged
  std::optional<WeightFormat> declared_expert_format;  // inference/config.json's expert_dtype
};

// dir_or_file: a model folder (its config.json) or a config.json file. Throws dsv4::Error naming
// the file and key at fault. The expert format is left at its default; weight binding infers it.
// `hf_overrides` (io/hf_overrides.h) is merged over config.json first; inference/config.json, which
// would then disagree, gives only its expert dtype.
ConfigLoadResult load_model_config_ex(const std::filesystem::path& dir_or_file,
                                      const nlohmann::json& hf_overrides = nlohmann::json::object());
ModelConfig load_model_config(const std::filesystem::path& dir_or_file);

// Parses one JSON document of either format (origin names it in errors).
ConfigLoadResult parse_model_config(const nlohmann::json& j, const std::string& origin);

// The two files make-tiny writes, in the release's key order.
nlohmann::ordered_json to_hf_config_json(const ModelConfig& c);
nlohmann::ordered_json to_inference_config_json(const ModelConfig& c);

}  // namespace dsv4
