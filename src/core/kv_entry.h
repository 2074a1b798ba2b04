// Byte layouts of KV-cache entries (MODEL.md §9.4, §10) and the paged tables that hold them.
// Used by kv/ to size pools and by both backends to read and write entries.
//
// Layouts (one entry = the stored vector of one token or one compressed block):
//   kBf16      dim bf16 values                                         (2·dim bytes)
//   kF32       dim fp32 values (compressor residual rows)              (4·dim bytes)
//   kAttnFp8   [n e4m3][r bf16][n/64 ue8m0][zero pad to a multiple of 8], n = dim − r (multiple of 64),
//              r = rope_dim; nope block b (64 values) has scale byte b. V4-Flash: 448+128+7+1 = 584 B.
//   kIndexFp4  [dim/2 packed e2m1, element 2j in the low nibble of byte j][dim/32 ue8m0]  (68 B for 128)
//   kIndexFp8  [dim e4m3][fp32 scale, little-endian]                   (132 B for 128); one
//              power-of-two scale per key, so Q4 keys are exact when their 32-blocks' scales lie
//              within 2^10 of each other (the opt-in SGLang-style variant)
//
// encode() quantizes like the reference's simulation (Q8 per 64 on the nope part, Q4 per 32, or one
// power-of-two FP8 scale per key), so it is exact for values already on that grid: decode(encode(v))
// == v bit for bit for the reference's Q8(nope, 64) and Q4(Had(·)) outputs. decode() is exact.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/host_device.h"

namespace dsv4 {

enum class KvEntryFormat : uint8_t { kBf16, kF32, kAttnFp8, kIndexFp4, kIndexFp8 };

struct KvEntryDims {
  int dim = 0;       // values per entry (head_dim, index_head_dim, or a state row width)
  int rope_dim = 0;  // kAttnFp8 only: the trailing dims kept as bf16
};

std::string_view kv_entry_format_name(KvEntryFormat format);

// Throws dsv4::Error when dims do not suit the format (e.g. nope not a multiple of 64).
void check_kv_entry_dims(KvEntryFormat format, KvEntryDims dims);

// Bytes of one entry, padding included.
int64_t kv_entry_bytes(KvEntryFormat format, KvEntryDims dims);

// values.size() == dims.dim, bytes.size() == kv_entry_bytes(format, dims); throws otherwise.
void encode_kv_entry(KvEntryFormat format, KvEntryDims dims, std::span<const float> values, std::span<uint8_t> bytes);
void decode_kv_entry(KvEntryFormat format, KvEntryDims dims, std::span<const uint8_t> bytes, std::span<float> values);

// A paged table of entries: slot s lives at base + (s / entries_per_page)·page_bytes +
// (s % entries_per_page)·entry_bytes, for 0 <= s < capacity. Pointers are host memory for the CPU
// backend, device memory for CUDA, whose kernels take the table as it is. Slot −1 means "no entry"
// wherever slots are passed to ops.
struct EntryTable {
  uint8_t* base = nullptr;
  int64_t page_bytes = 0;
  int32_t entries_per_page = 0;
  int32_t entry_bytes = 0;
  KvEntryFormat format = KvEntryFormat::kBf16;
  int64_t capacity = 0;  // addressable slots (pages · entries_per_page)

  DSV4_HOST_DEVICE uint8_t* entry(int64_t slot) const {
    return base + (slot / entries_per_page) * page_bytes + (slot % entries_per_page) * int64_t{entry_bytes};
  }
  // Whether slot addresses an entry (kernels skip and report a slot outside the table).
  DSV4_HOST_DEVICE bool holds(int64_t slot) const { return slot >= 0 && slot < capacity; }
};

// A table of `entries` consecutive entries in one page (tests, scratch state).
EntryTable contiguous_table(uint8_t* base, int64_t entries, KvEntryFormat format, KvEntryDims dims);

// entry(slot) after checking 0 <= slot < capacity (throws dsv4::Error naming `what` otherwise).
uint8_t* checked_entry(const EntryTable& table, int64_t slot, std::string_view what);

// Throws unless the table is usable for entries of this format and dims (base set, entry_bytes exact,
// pages large enough). `what` names the table in the message.
void check_entry_table(const EntryTable& table, KvEntryDims dims, std::string_view what);

}  // namespace dsv4
