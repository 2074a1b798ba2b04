// DenseKv: a KvAccess that keeps every item of every sequence in contiguous per-layer tables.
// Nothing slides out and nothing is shared: the simplest correct cache, used to cross-check the
// paged cache and for single-request tools.
#pragma once

#include <vector>

#include "backend/device.h"
#include "core/model_config.h"
#include "model/kv_access.h"

namespace dsv4 {

struct KvFormats {
  KvEntryFormat attention = KvEntryFormat::kAttnFp8;  // window and compressed entries
  KvEntryFormat indexer = KvEntryFormat::kIndexFp4;   // indexer keys
};

// Entry dims and row widths of each kind for a config (state rows hold value and score halves).
KvEntryDims kv_entry_dims(const ModelConfig& c, int ratio, KvKind kind);

// Whether a layer of compress ratio `ratio` keeps entries of `kind` (the window everywhere; compressor
// state and entries at ratio 4 and 128; the indexer's at ratio 4).
bool kv_kind_applies(KvKind kind, int ratio);

class DenseKv final : public KvAccess {
 public:
  DenseKv(Device& dev, const ModelConfig& c, int sequences, int64_t max_len, KvFormats formats = {});

  EntryTable table(int layer, KvKind kind) const override;
  int32_t slot(int32_t seq, int layer, KvKind kind, int64_t index) const override;

 private:
  struct Table {
    EntryTable table;
    int64_t per_seq = 0;
    DeviceArray<uint8_t> memory;
  };
  const Table* find(int layer, KvKind kind) const;

  int sequences_;
  std::vector<std::vector<Table>> tables_;  // [layer][kind]
};

}  // namespace dsv4
