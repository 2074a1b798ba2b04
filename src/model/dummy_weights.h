// --load-format dummy (vLLM's name): a model's weights made from a seed instead of read from a
// checkpoint, byte for byte what write_random_checkpoint writes for the same config and seed. The
// tensors are laid out in one reserved host range (no memory is committed until a tensor is made)
// and bound like a checkpoint's; PlacedWeights makes each where the backend reads it (model/
// weight_source.h): all of them in host memory on the CPU, one at a time on the way to a GPU.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/model_config.h"
#include "model/random_tensors.h"
#include "model/weight_source.h"
#include "model/weights.h"

namespace dsv4 {

class DummyWeights final : public WeightSource {
 public:
  // Lays the tensors out and binds the views; makes nothing yet. Throws dsv4::Error when the host
  // cannot reserve the range.
  DummyWeights(const ModelConfig& cfg, uint64_t seed);
  ~DummyWeights() override;
  DummyWeights(const DummyWeights&) = delete;
  DummyWeights& operator=(const DummyWeights&) = delete;

  // The bound views, with source = this.
  const ModelWeights& weights() const { return weights_; }
  // The tensors in binding order (checkpoint_tensor_specs) and the view of each.
  const std::vector<TensorSpec>& specs() const { return specs_; }
  const uint8_t* view(size_t i) const { return base_ + slots_[i].offset; }

  uint64_t total_bytes() const override { return total_; }
  // Thread-safe: ranks placing their shards at once may acquire the same tensor (a replicated one);
  // it is released when the last of them releases it.
  void acquire(const void* view) override;
  void release(const void* view) override;
  // Host bytes of the tensors made and not released, now and at most so far.
  uint64_t resident_bytes() const { return resident_; }
  uint64_t peak_resident_bytes() const { return peak_; }

 private:
  struct Slot {
    uint64_t offset = 0;   // page-aligned, so that releasing one never touches a neighbour
    int64_t partner = -1;  // a quantized weight's scales, a scale tensor's weight
    bool made = false;
    int users = 0;  // acquired and not yet released
  };
  size_t slot_of(const void* view) const;
  void make(size_t i);
  void mark_made(size_t i);

  std::mutex mu_;  // the slots and the counts
  RandomTensors gen_;
  std::vector<TensorSpec> specs_;
  std::vector<Slot> slots_;
  std::map<uint64_t, size_t> by_offset_;  // first byte -> slot
  uint8_t* base_ = nullptr;
  uint64_t reserved_ = 0, total_ = 0, resident_ = 0, peak_ = 0;
  ModelWeights weights_;
};

}  // namespace dsv4
