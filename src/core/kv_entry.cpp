#include "core/kv_entry.h"

#include <array>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

constexpr int kNopeBlock = 64;  // Q8 block of the attention nope part
constexpr int kFp4Block = 32;

const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

int64_t pad8(int64_t bytes) { return (bytes + 7) / 8 * 8; }

void encode_attn_fp8(KvEntryDims dims, std::span<const float> v, std::span<uint8_t> out) {
  const int n = dims.dim - dims.rope_dim;
  for (int b = 0; b < n / kNopeBlock; ++b) {
    out[static_cast<size_t>(n + 2 * dims.rope_dim + b)] =
        quantize_block_e4m3(v.subspan(static_cast<size_t>(b * kNopeBlock), kNopeBlock),
                            out.subspan(static_cast<size_t>(b * kNopeBlock), kNopeBlock));
  }
  for (int i = 0; i < dims.rope_dim; ++i) {
    const uint16_t h = float_to_bf16(v[static_cast<size_t>(n + i)]);
    std::memcpy(&out[static_cast<size_t>(n + 2 * i)], &h, 2);
  }
  const size_t used = static_cast<size_t>(n + 2 * dims.rope_dim + n / kNopeBlock);
  std::memset(out.data() + used, 0, out.size() - used);
}

void decode_attn_fp8(KvEntryDims dims, std::span<const uint8_t> in, std::span<float> v) {
  const auto& lut = e4m3_values();
  const int n = dims.dim - dims.rope_dim;
  for (int b = 0; b < n / kNopeBlock; ++b) {
    const float s = ue8m0_to_float(in[static_cast<size_t>(n + 2 * dims.rope_dim + b)]);
    for (int i = b * kNopeBlock; i < (b + 1) * kNopeBlock; ++i)
      v[static_cast<size_t>(i)] = lut[in[static_cast<size_t>(i)]] * s;
  }
  for (int i = 0; i < dims.rope_dim; ++i) {
    uint16_t h;
    std::memcpy(&h, &in[static_cast<size_t>(n + 2 * i)], 2);
    v[static_cast<size_t>(n + i)] = bf16_to_float(h);
  }
}

void encode_index_fp4(KvEntryDims dims, std::span<const float> v, std::span<uint8_t> out) {
  uint8_t codes[kFp4Block];
  const int blocks = dims.dim / kFp4Block;
  for (int b = 0; b < blocks; ++b) {
    out[static_cast<size_t>(dims.dim / 2 + b)] =
        quantize_block_e2m1(v.subspan(static_cast<size_t>(b * kFp4Block), kFp4Block), codes);
    for (int i = 0; i < kFp4Block; i += 2) {
      out[static_cast<size_t>((b * kFp4Block + i) / 2)] = static_cast<uint8_t>(codes[i] | (codes[i + 1] << 4));
    }
  }
}

void decode_index_fp4(KvEntryDims dims, std::span<const uint8_t> in, std::span<float> v) {
  for (int i = 0; i < dims.dim; ++i) {
    const float s = ue8m0_to_float(in[static_cast<size_t>(dims.dim / 2 + i / kFp4Block)]);
    v[static_cast<size_t>(i)] = e2m1_to_float(fp4_at(in.data(), i)) * s;
  }
}

void encode_index_fp8(KvEntryDims dims, std::span<const float> v, std::span<uint8_t> out) {
  // One power-of-two scale per key: exact for Q4 grid values whose block scales lie within 2^10.
  const float s = ue8m0_to_float(quantize_block_e4m3(v, out.first(static_cast<size_t>(dims.dim))));
  std::memcpy(&out[static_cast<size_t>(dims.dim)], &s, 4);
}

void decode_index_fp8(KvEntryDims dims, std::span<const uint8_t> in, std::span<float> v) {
  const auto& lut = e4m3_values();
  float s;
  std::memcpy(&s, &in[static_cast<size_t>(dims.dim)], 4);
  for (int i = 0; i < dims.dim; ++i) v[static_cast<size_t>(i)] = lut[in[static_cast<size_t>(i)]] * s;
}

void check_sizes(KvEntryFormat format, KvEntryDims dims, size_t values, size_t bytes, const char* op) {
  check_kv_entry_dims(format, dims);
  DSV4_CHECK(values == static_cast<size_t>(dims.dim), "{} {}: {} values given, the entry holds {}", op,
             kv_entry_format_name(format), values, dims.dim);
  DSV4_CHECK(bytes == static_cast<size_t>(kv_entry_bytes(format, dims)), "{} {}: {} bytes given, the entry takes {}",
             op, kv_entry_format_name(format), bytes, kv_entry_bytes(format, dims));
}

}  // namespace

std::string_view kv_entry_format_name(KvEntryFormat format) {
  switch (format) {
    case KvEntryFormat::kBf16:
      return "bf16";
    case KvEntryFormat::kF32:
      return "f32";
    case KvEntryFormat::kAttnFp8:
      return "attn-fp8";
    case KvEntryFormat::kIndexFp4:
      return "index-fp4";
    case KvEntryFormat::kIndexFp8:
      return "index-fp8";
  }
  return "unknown";
}

void check_kv_entry_dims(KvEntryFormat format, KvEntryDims dims) {
  DSV4_CHECK(dims.dim > 0, "kv entry {}: dim must be positive, got {}", kv_entry_format_name(format), dims.dim);
  switch (format) {
    case KvEntryFormat::kBf16:
    case KvEntryFormat::kF32:
    case KvEntryFormat::kIndexFp8:
      return;
    case KvEntryFormat::kAttnFp8:
      DSV4_CHECK(dims.rope_dim >= 0 && dims.rope_dim < dims.dim && (dims.dim - dims.rope_dim) % kNopeBlock == 0,
                 "kv entry attn-fp8: dim {} - rope_dim {} must be a positive multiple of 64", dims.dim, dims.rope_dim);
      return;
    case KvEntryFormat::kIndexFp4:
      DSV4_CHECK(dims.dim % kFp4Block == 0, "kv entry index-fp4: dim {} must be a multiple of 32", dims.dim);
      return;
  }
  fail("kv entry: unknown format {}", static_cast<int>(format));
}

int64_t kv_entry_bytes(KvEntryFormat format, KvEntryDims dims) {
  check_kv_entry_dims(format, dims);
  const int64_t d = dims.dim;
  switch (format) {
    case KvEntryFormat::kBf16:
      return 2 * d;
    case KvEntryFormat::kF32:
      return 4 * d;
    case KvEntryFormat::kAttnFp8: {
      const int64_t n = d - dims.rope_dim;
      return pad8(n + 2 * int64_t{dims.rope_dim} + n / kNopeBlock);
    }
    case KvEntryFormat::kIndexFp4:
      return d / 2 + d / kFp4Block;
    case KvEntryFormat::kIndexFp8:
      return d + 4;
  }
  return 0;
}

void encode_kv_entry(KvEntryFormat format, KvEntryDims dims, std::span<const float> values, std::span<uint8_t> bytes) {
  check_sizes(format, dims, values.size(), bytes.size(), "encode");
  switch (format) {
    case KvEntryFormat::kBf16:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = float_to_bf16(values[i]);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
      return;
    case KvEntryFormat::kF32:
      std::memcpy(bytes.data(), values.data(), bytes.size());
      return;
    case KvEntryFormat::kAttnFp8:
      encode_attn_fp8(dims, values, bytes);
      return;
    case KvEntryFormat::kIndexFp4:
      encode_index_fp4(dims, values, bytes);
      return;
    case KvEntryFormat::kIndexFp8:
      encode_index_fp8(dims, values, bytes);
      return;
  }
}

void decode_kv_entry(KvEntryFormat format, KvEntryDims dims, std::span<const uint8_t> bytes, std::span<float> values) {
  check_sizes(format, dims, values.size(), bytes.size(), "decode");
  switch (format) {
    case KvEntryFormat::kBf16:
      for (size_t i = 0; i < values.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, &bytes[2 * i], 2);
        values[i] = bf16_to_float(h);
      }
      return;
    case KvEntryFormat::kF32:
      std::memcpy(values.data(), bytes.data(), bytes.size());
      return;
    case KvEntryFormat::kAttnFp8:
      decode_attn_fp8(dims, bytes, values);
      return;
    case KvEntryFormat::kIndexFp4:
      decode_index_fp4(dims, bytes, values);
      return;
    case KvEntryFormat::kIndexFp8:
      decode_index_fp8(dims, bytes, values);
      return;
  }
}

EntryTable contiguous_table(uint8_t* base, int64_t entries, KvEntryFormat format, KvEntryDims dims) {
  DSV4_CHECK(entries > 0 && entries <= std::numeric_limits<int32_t>::max(), "contiguous_table: {} entries out of range",
             entries);
  EntryTable t;
  t.base = base;
  t.format = format;
  t.entry_bytes = static_cast<int32_t>(kv_entry_bytes(format, dims));
  t.entries_per_page = static_cast<int32_t>(entries);
  t.page_bytes = entries * t.entry_bytes;
  t.capacity = entries;
  return t;
}

uint8_t* checked_entry(const EntryTable& table, int64_t slot, std::string_view what) {
  DSV4_CHECK(slot >= 0 && slot < table.capacity, "{}: slot {} outside the table's [0, {})", what, slot, table.capacity);
  return table.entry(slot);
}

void check_entry_table(const EntryTable& table, KvEntryDims dims, std::string_view what) {
  DSV4_CHECK(table.base != nullptr, "{}: table base is null", what);
  const int64_t bytes = kv_entry_bytes(table.format, dims);
  DSV4_CHECK(table.entry_bytes == bytes, "{}: entry_bytes {} but a {} entry of dim {} takes {} bytes", what,
             table.entry_bytes, kv_entry_format_name(table.format), dims.dim, bytes);
  DSV4_CHECK(table.entries_per_page > 0, "{}: entries_per_page must be positive, got {}", what, table.entries_per_page);
  DSV4_CHECK(table.capacity > 0, "{}: capacity must be positive, got {}", what, table.capacity);
  DSV4_CHECK(table.page_bytes >= int64_t{table.entries_per_page} * table.entry_bytes,
             "{}: page_bytes {} cannot hold {} entries of {} bytes", what, table.page_bytes, table.entries_per_page,
             table.entry_bytes);
}

}  // namespace dsv4
