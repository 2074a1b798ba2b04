// Opening a model folder: config.json -> ModelConfig (with --hf-overrides merged over it), then the
// weights: the checkpoint (mmapped, lazy, the expert format inferred from its tensors) or, with
// --load-format dummy, weights made from a seed where the backend reads them (model/dummy_weights.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_config.h"
#include "io/checkpoint.h"
#include "model/dummy_weights.h"
#include "model/weights.h"

namespace dsv4 {

// vLLM's --load-format: auto reads the checkpoint, dummy makes random weights.
enum class LoadFormat { kAuto, kDummy };
const char* load_format_name(LoadFormat f);
LoadFormat parse_load_format(std::string_view name);  // throws dsv4::Error naming the choices

struct LoadOptions {
  LoadFormat format = LoadFormat::kAuto;
  nlohmann::json hf_overrides = nlohmann::json::object();  // io/hf_overrides.h
  uint64_t seed = 0;                                       // of the dummy weights

  // "auto" or "dummy (seed N)", then the overrides when there are any: one line for summaries.
  std::string describe() const;
  // {"load_format", "hf_overrides"} (and "seed" for dummy) for JSON outputs.
  nlohmann::ordered_json to_json() const;
};

struct LoadedModel {
  std::filesystem::path dir;
  ModelConfig config;
  LoadOptions options;
  std::unique_ptr<Checkpoint> checkpoint;  // auto: owns the mappings the weights point into
  std::unique_ptr<DummyWeights> dummy;     // dummy: owns the bytes made for the weights
  ModelWeights weights;

  // The tensors the weights are bound to (a checkpoint's, less the layers the overrides drop).
  std::vector<TensorSpec> tensors() const;
};

// Throws dsv4::Error naming the file, key or tensor at fault. With a checkpoint, the overrides may drop
// layers (their tensors are skipped) but not change a tensor: that needs --load-format dummy.
LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace dsv4
