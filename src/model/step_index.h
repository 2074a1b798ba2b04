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

// Compressed entries completed by this forward, for one compressor (attention or indexer).
struct EmitList {
  int64_t entries = 0;
  DeviceArray<int32_t> block_index;  // [entries]
  DeviceArray<int32_t> rows;         // [entries, c * ratio] state slots, previous block first
  DeviceArray<int32_t> out_slots;    // [entries]
};

// Everything one layer reads and writes (slots are per layer: each layer has its own pages).
struct LayerIndex {
  DeviceArray<int32_t> window_write;  // [tokens]
  DeviceArray<int32_t> window_read;   // [tokens, window]: positions t-W+1..t ascending, -1 padded
  DeviceArray<int32_t> state_slots;   // [tokens] attention compressor rows
  EmitList emit;
  // ratio 128: every visible entry per query, ascending, -1 padded. ratio 4: unused.
  DeviceArray<int32_t> compressed_slots;
  int32_t compressed_width = 0;
  // ratio 4: the indexer's compressor and keys.
  DeviceArray<int32_t> index_state_slots;  // [tokens]
  EmitList index_emit;
  DeviceArray<int32_t> key_slots;  // [slices, key_stride]
  DeviceArray<int32_t> key_count;  // [slices]
  DeviceArray<int32_t> key_map;    // [slices, key_stride] compressed-entry slots of the same j
  int32_t key_stride = 0;
};

struct StepIndex {
  int64_t tokens = 0;
  int64_t slices = 0;
  DeviceArray<int32_t> token_ids;    // [tokens]
  DeviceArray<int32_t> positions;    // [tokens]
  DeviceArray<int32_t> token_slice;  // [tokens] slice index of each token
  int32_t window_width = 0;
  std::vector<LayerIndex> layers;   // [main layers]
  std::vector<int64_t> logit_rows;  // host: the last token of every slice that wants logits

  // Long slot lists (indexer keys, ratio-128 entries) are expanded from page lists by ops.paged_slots.
  StepIndex(Device& dev, Ops& ops, const ModelConfig& cfg, const ForwardBatch& batch, const KvAccess& kv);
};

}  // namespace dsv4
