// Opening a model folder: config.json -> ModelConfig, the checkpoint (mmapped, lazy), the expert
// format inferred from the tensors, and every weight bound.
#pragma once

#include <filesystem>
#include <memory>

#include "core/model_config.h"
#include "io/checkpoint.h"
#include "model/weights.h"

namespace dsv4 {

struct LoadedModel {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;  // owns the mappings the weights point into
  ModelWeights weights;
};

// Throws dsv4::Error naming the file, key or tensor at fault.
LoadedModel load_model(const std::filesystem::path& dir);

}  // namespace dsv4
