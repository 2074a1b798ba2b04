// Placing a model's weights where its backend computes. On a host device the views stay in the
// mmapped checkpoint. On a GPU every tensor the main stack reads is copied once into one device
// buffer (256-byte aligned each) and the views are rebound to the copies; the host views remain
// for the few tensors the model prepares on the host (wo_a's bf16 form, tid2eid). Weights with a
// source (model/weight_source.h) are made here: on a host device all the model reads, kept; on a GPU
// one tensor at a time, released once copied (the host-prepared ones are kept). A model too big for
// the device is refused before anything is made.
#pragma once

#include <cstdint>

#include "backend/device.h"
#include "core/model_config.h"
#include "model/weights.h"

namespace dsv4 {

class PlacedWeights {
 public:
  PlacedWeights(const ModelWeights& host, const ModelConfig& cfg, Device& dev);

  // Device bytes the main stack's weights take once placed (what a GPU must hold for them).
  static uint64_t bytes_needed(const ModelWeights& host, const ModelConfig& cfg);

  const ModelWeights& get() const { return placed_; }
  uint64_t device_bytes() const { return storage_.size(); }

 private:
  void place(const ModelConfig& cfg, Device& dev, WeightSource* source);

  ModelWeights placed_;
  DeviceArray<uint8_t> storage_;
};

}  // namespace dsv4
