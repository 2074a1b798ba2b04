// A paged entry table as kernels see it: core/kv_entry.h's EntryTable restated without host headers
// (nvcc never includes fmt-based headers), with the same byte layouts:
//   kBf16      dim bf16                      kF32  dim fp32
//   kAttnFp8   [n e4m3][r bf16][n/64 ue8m0][pad to 8], n = dim - r
//   kIndexFp4  [dim/2 packed e2m1, low nibble first][dim/32 ue8m0]
//   kIndexFp8  [dim e4m3][fp32 scale]
#pragma once

#include <cstdint>

namespace dsv4::cuda {

enum class EntryFormat : uint8_t { kBf16, kF32, kAttnFp8, kIndexFp4, kIndexFp8 };  // = KvEntryFormat

struct DeviceTable {
  uint8_t* base = nullptr;
  int64_t page_bytes = 0;
  int32_t entries_per_page = 0;
  int32_t entry_bytes = 0;
  EntryFormat format = EntryFormat::kAttnFp8;
  int64_t capacity = 0;  // addressable slots; kernels treat a slot outside [0, capacity) as an error

#ifdef __CUDACC__
  __device__ __forceinline__ uint8_t* entry(int64_t slot) const {
    return base + (slot / entries_per_page) * page_bytes + (slot % entries_per_page) * int64_t{entry_bytes};
  }
  __device__ __forceinline__ bool holds(int64_t slot) const { return slot >= 0 && slot < capacity; }
#endif
};

// Device-side index errors: a kernel that meets an index it cannot use (a slot outside its table, an
// expert or token id out of range) skips that item and records the first error code here; the
// backend reads it back at its next synchronisation and throws. Codes name the op.
enum class DeviceError : int32_t {
  kNone = 0,
  kStoreSlot,
  kAttentionSlot,
  kCompressorSlot,
  kIndexerSlot,
  kMoeExpert,
  kMoeToken,
  kEmbedId,
  kPagedSlots,
};

}  // namespace dsv4::cuda
