// Device-side index errors: a kernel that meets an index it cannot use (a slot outside its table, an
// expert or token id out of range) skips that item and records the first error code here; the
// backend reads it back at its next synchronisation and throws. Codes name the op. Kernels read
// entry tables as core/kv_entry.h's EntryTable, whose entry() and holds() run on the device too.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

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
  kGemmFp4Span,
  kGatherRow,
};

}  // namespace dsv4::cuda
