// Random weights for a config, deterministic from a seed: value i of a tensor depends only on
// (seed, name, i), so a tensor can be made alone, in any order (make-tiny writes them into shards,
// --load-format dummy makes them where the model reads them). FP8/FP4 weights are quantized the way
// the release is, each with its ".scale" tensor from the same float matrix. The scales keep
// activations healthy: unit variance into every linear, attention-score std about 3, sinks about 3,
// sublayer outputs below the residual, logit std about 3.
#pragma once

#include <cstdint>
#include <span>

#include "core/model_config.h"
#include "model/weights.h"

namespace dsv4 {

class RandomTensors {
 public:
  RandomTensors(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg), seed_(seed) {}

  // A quantized weight (F8_E4M3 or packed FP4 as I8) pairs with the ".scale" tensor named after it.
  static bool is_quantized(const TensorSpec& s) { return s.dtype == DType::kF8E4M3 || s.dtype == DType::kI8; }
  static std::string scale_name(const TensorSpec& weight);
  // The shape of a quantized weight's scale tensor.
  static std::vector<int64_t> scale_shape(const TensorSpec& weight);

  // A tensor that is not quantized (bf16, f32, the i64 tid2eid tables); `out` holds its bytes.
  void fill(const TensorSpec& s, std::span<uint8_t> out) const;
  // A quantized weight and its scales at once (they come from one float matrix).
  void fill_quantized(const TensorSpec& weight, std::span<uint8_t> data, std::span<uint8_t> scale) const;

 private:
  ModelConfig cfg_;
  uint64_t seed_;
};

}  // namespace dsv4
