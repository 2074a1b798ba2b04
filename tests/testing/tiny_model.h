// A random checkpoint of the "tiny" preset, written once per seed and process into a temporary folder
// and loaded: the weights of the suites that run the model without golden data (model, GPU).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "model/model_loader.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"
#include "testing/paths.h"

namespace dsv4::testing {

inline const LoadedModel& tiny_model(uint64_t seed) {
  static std::map<uint64_t, std::unique_ptr<LoadedModel>> models;
  std::unique_ptr<LoadedModel>& m = models[seed];
  if (!m) {
    const auto dir = temp_dir("tiny-" + std::to_string(seed));
    write_random_checkpoint(find_preset("tiny").config, seed, dir);
    m = std::make_unique<LoadedModel>(load_model(dir));
  }
  return *m;
}

}  // namespace dsv4::testing
