// PagedKv: the KvAccess over the paged cache (kv/KvCacheManager). Each layer's table is its pool
// (entries of one group at the member's offset in every layer page); a slot is the global entry
// index page * entries_per_page + entry, resolved through the request's block table and the
// block's per-layer pages.
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/device.h"
#include "core/model_config.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_memory.h"
#include "model/dense_kv.h"
#include "model/device_block_tables.h"
#include "model/device_page_map.h"
#include "model/kv_access.h"

namespace dsv4 {

// The cache dtypes as entry formats (kv/ sizes the same bytes; checked at construction).
KvFormats kv_formats(KvDTypes dtypes);

// Bytes of each of the manager's pools (one per bucket).
std::vector<size_t> pool_bytes(const KvCacheManager& manager);

class PagedKv final : public KvAccess {
 public:
  PagedKv(const ModelConfig& cfg, const KvCacheManager& manager, KvFormats formats);
  // Over other pools of the manager's layout, one per bucket (pool_bytes(manager) each): a tensor-parallel
  // rank's copy of the KV, written and read at the manager's slots.
  PagedKv(const ModelConfig& cfg, const KvCacheManager& manager, KvFormats formats, std::vector<std::byte*> pools);

  // Binds the batch's sequence index `seq` to a request of the manager.
  void bind(int32_t seq, KvRequestId request);

  EntryTable table(int layer, KvKind kind) const override;
  int32_t slot(int32_t seq, int layer, KvKind kind, int64_t index) const override;
  // One lookup per page: compressed kinds (entries_per_page entries a page) and sliding kinds whose
  // pages tile their period (positions_per_page positions a page).
  // Tiled lists hold block ids, the same for every layer of a unit (one list_key); each layer's
  // page_map() turns them into its pages. A full unit's entries (from item 0 on) are the request's
  // row of the unit's DeviceBlockTables.
  ItemPages item_pages(int32_t seq, int layer, KvKind kind, int64_t begin, int64_t end) const override;
  int64_t list_key(int layer, KvKind kind) const override;
  // The unit's slot (block · entries per page + entry) is the same for every layer of a unit; a layer's
  // slot goes through its page of the block.
  int64_t slot_key(int layer, KvKind kind) const override;
  int64_t unit_slot(int32_t seq, int layer, KvKind kind, int64_t index) const override;
  int32_t layer_slot(int layer, KvKind kind, int64_t unit_slot) const override;
  void layer_slots(int layer, KvKind kind, std::span<const int64_t> unit, std::span<int32_t> out) const override;
  BlockPageMap page_map(int layer, KvKind kind) const override;
  // Creates the pools' device page maps and the full units' device block tables on first use (again
  // on another device) and syncs them, the tables for the bound requests that live; they live in
  // `dev`'s memory, so `dev` must outlive this PagedKv.
  void sync(Device& dev) override;

 private:
  struct Where {
    int group = -1;
    int unit = -1;
    int layer_index = -1;    // the layer's place in its unit's layers
    int ratio = 1;           // positions per entry (compressed kinds)
    bool per_entry = false;  // items are entries (compressed kinds), not positions
    bool tiled = false;      // items map to pages contiguously (item_pages: one lookup per page)
    EntryTable table;
  };
  const Where& where(int layer, KvKind kind) const;
  ItemPages device_row(int32_t seq, const Where& w, int32_t per_page) const;

  const KvCacheManager& mgr_;
  std::vector<std::vector<Where>> where_;  // [layer][kind]
  std::unordered_map<int32_t, KvRequestId> requests_;
  std::vector<std::unique_ptr<DevicePageMap>> maps_;        // [bucket], from the first sync on
  std::vector<std::unique_ptr<DeviceBlockTables>> tables_;  // [unit], full units only
  std::vector<KvRequestId> synced_;                         // scratch: the requests a sync covers
};

}  // namespace dsv4

namespace dsv4 {

// A paged cache with its own host memory, sized for `sequences` requests of up to `max_len`
// positions with prefill chunks of up to `chunk_tokens` in flight (tools and tests).
class OwnedPagedCache {
 public:
  // `device` (optional) places the pools in its memory; default host memory.
  OwnedPagedCache(const ModelConfig& cfg, int sequences, int64_t max_len, int64_t chunk_tokens, KvDTypes dtypes = {},
                  Device* device = nullptr);
  // The bytes its pools would take (nothing allocated): a caller's check that they fit.
  static int64_t bytes_for(const ModelConfig& cfg, int sequences, int64_t max_len, int64_t chunk_tokens,
                           KvDTypes dtypes = {});

  KvCacheManager& manager() { return *mgr_; }
  PagedKv& access() { return *kv_; }
  // Adds request `seq` (its id is seq) and binds it.
  void add(int32_t seq, int64_t prompt_len);
  // Room for the next n positions of `seq`; throws when the pools are full.
  void allocate(int32_t seq, int64_t n, std::span<const int32_t> tokens);

 private:
  std::unique_ptr<KvMemoryAllocator> memory_;
  std::unique_ptr<KvCacheManager> mgr_;
  std::unique_ptr<PagedKv> kv_;
};

}  // namespace dsv4
