// KvAccess: how the model reaches KV state. The model never allocates KV memory; it asks for each
// layer's tables and for the slot of an item of a sequence. Items are positions for the per-token
// kinds (window, compressor state rows) and entry indices for the compressed kinds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/device.h"
#include "backend/op_params.h"
#include "core/kv_entry.h"

namespace dsv4 {

enum class KvKind : uint8_t {
  kWindow,           // raw K=V of one token (all layers)
  kCompressorState,  // the attention compressor's fp32 residual row of one token (ratio 4, 128)
  kIndexerState,     // the indexer compressor's residual row of one token (ratio 4)
  kCompressed,       // one compressed KV entry (ratio 4, 128)
  kIndexerKey,       // one indexer key (ratio 4)
};

// Items [begin, end) of one sequence as pages: item i sits at slot
// page(pages[(i − base) / per_page])·per_page + i mod per_page, base = begin rounded down to a multiple
// of per_page (a −1 page: not resident), where page() maps an entry through the layer's page_map() (the
// entries are then block ids, shared by the layers of a list_key) or, without a map, is the identity.
// The form the paged_slots op expands on the device.
struct ItemPages {
  int32_t per_page = 1;
  int64_t base = 0;
  std::vector<int32_t> pages;
  // Or pages kept on the device from step to step (then `pages` is empty and base 0): row `row` of
  // `table` [rows, stride], item i's entry at i / per_page.
  struct DeviceRow {
    const int32_t* table = nullptr;
    int64_t rows = 0;
    int32_t stride = 0;
    int32_t row = -1;
  } device;
};

class KvAccess {
 public:
  virtual ~KvAccess() = default;
  virtual EntryTable table(int layer, KvKind kind) const = 0;
  // Slot of item `index` of sequence `seq` in the table of `layer`; -1 when it is not resident.
  virtual int32_t slot(int32_t seq, int layer, KvKind kind, int64_t index) const = 0;
  // Items [begin, end) as pages. The default has one item per page (one slot() each); a paged cache
  // answers with one lookup per page.
  virtual ItemPages item_pages(int32_t seq, int layer, KvKind kind, int64_t begin, int64_t end) const {
    ItemPages p;
    p.base = begin;
    for (int64_t i = begin; i < end; ++i) p.pages.push_back(slot(seq, layer, kind, i));
    return p;
  }
  // Layer-kind pairs of one key get equal item_pages for every sequence and range (their page maps
  // tell them apart), so a step builds such lists once. The default: a key of its own.
  virtual int64_t list_key(int layer, KvKind kind) const { return int64_t{layer} * 8 + static_cast<int>(kind); }
  // slot() in two halves, so that a step looks an item up once for all the layers of one slot_key:
  // unit_slot() is the same for every layer of the key (−1: not resident) and layer_slot() turns it
  // into the layer's slot. The default: a key of its own, unit_slot() = slot(), layer_slot() the identity.
  virtual int64_t slot_key(int layer, KvKind kind) const { return int64_t{layer} * 8 + static_cast<int>(kind); }
  virtual int64_t unit_slot(int32_t seq, int layer, KvKind kind, int64_t index) const {
    return slot(seq, layer, kind, index);
  }
  virtual int32_t layer_slot(int /*layer*/, KvKind /*kind*/, int64_t unit_slot) const {
    return static_cast<int32_t>(unit_slot);
  }
  // layer_slot() of many unit slots (−1 stays −1) into out (as long as unit): a step maps every token of a
  // key this way, once per layer, so implementations look the layer's place up once for all of them.
  virtual void layer_slots(int layer, KvKind kind, std::span<const int64_t> unit, std::span<int32_t> out) const {
    for (size_t i = 0; i < unit.size(); ++i) out[i] = unit[i] < 0 ? -1 : layer_slot(layer, kind, unit[i]);
  }
  // What item_pages' entries of a layer and kind go through on the device (default: nothing).
  virtual BlockPageMap page_map(int /*layer*/, KvKind /*kind*/) const { return {}; }
  // Brings the device's copy of whatever page_map() points at up to date, ordered before the work
  // issued after it on `dev` (StepIndex calls it first).
  virtual void sync(Device& /*dev*/) {}
};

}  // namespace dsv4
