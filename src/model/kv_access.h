// KvAccess: how the model reaches KV state. The model never allocates KV memory; it asks for each
// layer's tables and for the slot of an item of a sequence. Items are positions for the per-token
// kinds (window, compressor state rows) and entry indices for the compressed kinds.
#pragma once

#include <cstdint>

#include "core/kv_entry.h"

namespace dsv4 {

enum class KvKind : uint8_t {
  kWindow,           // raw K=V of one token (all layers)
  kCompressorState,  // the attention compressor's fp32 residual row of one token (ratio 4, 128)
  kIndexerState,     // the indexer compressor's residual row of one token (ratio 4)
  kCompressed,       // one compressed KV entry (ratio 4, 128)
  kIndexerKey,       // one indexer key (ratio 4)
};

class KvAccess {
 public:
  virtual ~KvAccess() = default;
  virtual EntryTable table(int layer, KvKind kind) const = 0;
  // Slot of item `index` of sequence `seq` in the table of `layer`; -1 when it is not resident.
  virtual int32_t slot(int32_t seq, int layer, KvKind kind, int64_t index) const = 0;
};

}  // namespace dsv4
