// StepGraphs: decode steps recorded once per StepShape and replayed (CUDA graphs). A shape's first
// step runs eagerly (the ops size the scratch they keep), its second is recorded and launched, later
// ones upload their index arrays into the shape's StepArena and replay. A recording is dropped and
// made again when what it baked in moved: the arena's layout, the ops' kept scratch
// (Ops::scratch_epoch), the KV tables, the shared logits buffer. A shape whose recording or replay
// fails runs eagerly from then on, with one warning. Least recently used shapes are dropped past
// `max_shapes`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/model_config.h"
#include "model/forward_batch.h"
#include "model/kv_access.h"
#include "model/step_index.h"
#include "model/step_shape.h"

namespace dsv4 {

class StepGraphs {
 public:
  // The whole step's device work for one StepIndex (its expansions included: StepIndex::expand):
  // writes logits [index.logit_rows, vocab].
  using Body = std::function<void(StepIndex& index, float* logits)>;

  StepGraphs(Device& dev, Ops& ops, const ModelConfig& cfg, size_t max_shapes = 48);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs `padded` (pad_batch of `shape`), recorded and replayed when `record` and the device can
  // record, else eagerly in the shape's arena; returns its logits [shape.batch, vocab] on the device,
  // valid until the next run. Nothing waits for the device.
  const float* run(const StepShape& shape, const ForwardBatch& padded, KvAccess& kv, bool record, const Body& body);

  const StepGraphStats& stats() const { return stats_; }
  size_t shapes() const { return entries_.size(); }

 private:
  struct Entry;
  Entry& entry(const StepShape& shape);
  float* logits(int64_t rows);
  std::vector<const void*> tables(const KvAccess& kv) const;
  void evict();

  Device& dev_;
  Ops& ops_;
  const ModelConfig& cfg_;
  size_t max_shapes_;
  std::map<StepShape, std::unique_ptr<Entry>> entries_;
  uint64_t tick_ = 0;
  DeviceArray<float> logits_;  // shared by every shape, grow-only
  uint64_t logits_generation_ = 0;
  bool warned_ = false;
  StepGraphStats stats_;
};

}  // namespace dsv4
