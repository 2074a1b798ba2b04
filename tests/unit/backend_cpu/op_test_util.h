// Helpers for the CPU op tests: seeded random tensors, quantized weights, entry tables.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/weight.h"
#include "core/kv_entry.h"
#include "core/number_formats.h"
#include "core/quant.h"

namespace dsv4::testing {

inline float bf(uint16_t v) { return bf16_to_float(v); }

// Normal(0, scale²) values rounded to bf16 (never all zero).
inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(dist(rng));
  return v;
}

inline std::vector<float> random_f32(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Floats already on the bf16 grid.
inline std::vector<float> random_bf16_values(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::vector<float> v = random_f32(n, rng, scale);
  for (auto& x : v) x = round_bf16(x);
  return v;
}

inline std::vector<float> to_f32(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf(v[i]);
  return out;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// A random FP8 block-scaled weight, quantized the release's way.
struct Fp8Weight {
  std::vector<uint8_t> data, scale;
  int64_t rows = 0, cols = 0;
  Fp8Weight(int64_t r, int64_t c, std::mt19937& rng, float std = 0.05f) : rows(r), cols(c) {
    const auto w = random_f32(static_cast<size_t>(r * c), rng, std);
    data.resize(static_cast<size_t>(r * c));
    scale.resize(static_cast<size_t>(((r + 127) / 128) * ((c + 127) / 128)));
    quantize_weight_fp8(w, r, c, data, scale);
  }
  Fp8BlockWeight block() const { return {data.data(), scale.data(), rows, cols}; }
  Weight view() const { return Weight::fp8(block()); }
};

struct Fp4Weight {
  std::vector<uint8_t> data, scale;
  int64_t rows = 0, cols = 0;
  Fp4Weight(int64_t r, int64_t c, std::mt19937& rng, float std = 0.05f) : rows(r), cols(c) {
    const auto w = random_f32(static_cast<size_t>(r * c), rng, std);
    data.resize(static_cast<size_t>(r * c / 2));
    scale.resize(static_cast<size_t>(r * c / 32));
    quantize_weight_fp4(w, r, c, data, scale);
  }
  Fp4BlockWeight block() const { return {data.data(), scale.data(), rows, cols}; }
  Weight view() const { return Weight::fp4(block()); }
};

// An entry table in owned memory, paged with `per_page` entries per page and a gap between pages
// so that paging mistakes show.
struct OwnedTable {
  std::vector<uint8_t> bytes;
  EntryTable table;
  OwnedTable(int64_t entries, KvEntryFormat format, KvEntryDims dims, int32_t per_page = 4) {
    const int64_t eb = kv_entry_bytes(format, dims);
    const int64_t pages = (entries + per_page - 1) / per_page;
    table.page_bytes = per_page * eb + 24;
    table.entries_per_page = per_page;
    table.entry_bytes = static_cast<int32_t>(eb);
    table.format = format;
    table.capacity = pages * per_page;
    bytes.assign(static_cast<size_t>(pages * table.page_bytes), 0xAB);
    table.base = bytes.data();
  }
};

// Max |a − b| / max(|b|, floor) over all elements.
inline double max_rel_err(const std::vector<float>& a, const std::vector<double>& b, double floor = 1e-3) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]) / std::max(std::fabs(b[i]), floor));
  return m;
}

}  // namespace dsv4::testing
