// StepIndex: the index arrays of one forward (positions, slots, emission lists), built on the host
// from the batch and the KvAccess, then copied to the device once and shared by all layers. Lists
// that grow with the context (every indexer key, every ratio-128 entry) travel as page lists and are
// expanded on the device, so a long context costs the host one lookup per page.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/model_config.h"
#include "model/forward_batch.h"
#include "model/kv_access.h"

namespace dsv4 {

// One index array of a step: a host-built array inside the step's single upload, or an array the
// device builds (an expanded page list, StepIndex::expand), which owns its memory.
class IndexArray {
 public:
  const int32_t* data() const { return ptr_; }

 private:
  friend class StepUploads;
  friend struct StepIndex;
  const int32_t* ptr_ = nullptr;
  size_t offset_ = 0;
  DeviceArray<int32_t> owned_;
};

// Where a padded step's upload lives from step to step: steps of one shape write the same layout into
// the same memory, so a recording of one reads the next one's arrays (model/step_graphs.h).
class StepArena {
 public:
  // Bumped whenever the storage was replaced (the layout changed): recordings of older ones are stale.
  uint64_t generation() const { return generation_; }

 private:
  friend class StepUploads;
  DeviceArray<int32_t> storage_;
  std::vector<int64_t> layout_;  // the sizes of every array and expansion of the upload
  uint64_t generation_ = 0;
};

// How a StepIndex lays a step out. padded: a decode-only step of a StepShape (one token a slice, shadow
// slices allowed): one emission item per token (block −1 where none completes), context-long lists
// widened to width_bucket() and page lists to the most pages such a width can span; arena: upload
// there instead of into memory of its own.
struct StepLayout {
  bool padded = false;
  StepArena* arena = nullptr;
};

// Compressed entries completed by this forward, for one compressor (attention or indexer).
struct EmitList {
  int64_t entries = 0;
  IndexArray block_index;  // [entries]
  IndexArray rows;         // [entries, c * ratio] state slots, previous block first
  IndexArray out_slots;    // [entries]
};

// Everything one layer reads and writes (slots are per layer: each layer has its own pages).
struct LayerIndex {
  IndexArray window_write;  // [tokens]
  IndexArray window_read;   // [tokens, window]: positions t-W+1..t ascending, -1 padded
  IndexArray state_slots;   // [tokens] attention compressor rows
  EmitList emit;
  // ratio 128: every visible entry per query, ascending, -1 padded. ratio 4: unused.
  IndexArray compressed_slots;
  int32_t compressed_width = 0;
  // ratio 4: the indexer's compressor and keys.
  IndexArray index_state_slots;  // [tokens]
  EmitList index_emit;
  IndexArray key_slots;  // [slices, key_stride]
  IndexArray key_count;  // [slices]
  IndexArray key_map;    // [slices, key_stride] compressed-entry slots of the same j
  int32_t key_stride = 0;
};

struct StepIndex {
  int64_t tokens = 0;
  int64_t slices = 0;
  IndexArray token_ids;    // [tokens]
  IndexArray positions;    // [tokens]
  IndexArray token_slice;  // [tokens] slice index of each token
  int32_t window_width = 0;
  std::vector<LayerIndex> layers;   // [main layers]
  std::vector<int64_t> logit_rows;  // host: the last token of every slice that wants logits
  // Host time the constructor spent in kv.sync (the device page maps and block tables) and in the one
  // upload (ms): where an index build's time goes (bench step prints them).
  double sync_ms = 0;
  double upload_ms = 0;
  int64_t upload_bytes = 0;  // the one upload copies on the host (rows no one reads left out)

  // Everything the host builds reaches the device in one copy. Long slot lists (windows, indexer keys,
  // ratio-128 entries) are page lists until expand() runs ops.paged_slots on a layer's.
  // kv.sync(dev) first: the device's page maps are then current for the step's expansions.
  StepIndex(Device& dev, const ModelConfig& cfg, const ForwardBatch& batch, KvAccess& kv, StepLayout layout = {});
  ~StepIndex();
  StepIndex(const StepIndex&) = delete;  // arrays point into uploads_
  StepIndex& operator=(const StepIndex&) = delete;

  // Builds one layer's expanded lists on the device, as the layer starts (part of the step's device
  // work: recordable), so a step holds one layer's lists at a time; release_expanded() frees them (a
  // recorded step frees what it allocated), by default every layer's.
  void expand(Ops& ops, int layer);
  void release_expanded(int layer = kEveryLayer);
  static constexpr int kEveryLayer = -1;

  struct Expansion {  // one paged_slots call, pointers into the upload
    int layer = 0;
    IndexArray* out = nullptr;
    PagedSlotsParams p;
  };

 private:
  Device* dev_ = nullptr;
  DeviceArray<int32_t> uploads_;
  std::vector<Expansion> expansions_;
};

}  // namespace dsv4
