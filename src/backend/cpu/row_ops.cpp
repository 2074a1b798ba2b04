#include "backend/cpu/row_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "backend/cpu/cpu_support.h"
#include "core/error.h"
#include "core/quant.h"

namespace dsv4::cpu {

void quant_sim(ThreadPool& pool, const QuantSimParams& p) {
  const int64_t stride = p.row_stride ? p.row_stride : p.cols;
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    float* x = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(p.cols));
    const std::span<float> row(x, static_cast<size_t>(p.cols));
    for (int64_t r = r0; r < r1; ++r) {
      uint16_t* v = p.x + r * stride;
      bf16_to_f32(v, x, p.cols);
      if (p.kind == QuantSim::kFp8) {
        fake_quant_e4m3(row, p.block);
      } else {
        fake_quant_e2m1(row);
      }
      f32_to_bf16(x, v, p.cols);
    }
  });
}

void store_entries(ThreadPool& pool, const StoreEntriesParams& p) {
  const int64_t d = p.dims.dim;
  const size_t bytes = static_cast<size_t>(p.table.entry_bytes);
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    float* x = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(d));
    for (int64_t r = r0; r < r1; ++r) {
      if (p.slots[r] < 0) continue;
      bf16_to_f32(p.x + r * d, x, d);
      encode_kv_entry(p.table.format, p.dims, {x, static_cast<size_t>(d)},
                      {checked_entry(p.table, p.slots[r], "store_entries"), bytes});
    }
  });
}

void embed(ThreadPool& pool, const EmbedParams& p) {
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      DSV4_CHECK(p.ids[t] >= 0 && p.ids[t] < p.vocab, "embed: token id {} outside [0, {})", p.ids[t], p.vocab);
      const uint16_t* src = p.table + int64_t{p.ids[t]} * p.dim;
      for (int c = 0; c < p.copies; ++c) std::copy(src, src + p.dim, p.out + (t * p.copies + c) * p.dim);
    }
  });
}

void gather_rows(ThreadPool& pool, const GatherRowsParams& p) {
  const auto width = static_cast<size_t>(p.width);
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t i = p.index[r];
      DSV4_CHECK(i >= 0 && i < p.in_rows, "gather_rows: row {} reads row {} of {}", r, i, p.in_rows);
      std::memcpy(static_cast<std::byte*>(p.out) + static_cast<size_t>(r) * width,
                  static_cast<const std::byte*>(p.in) + static_cast<size_t>(i) * width, width);
    }
  });
}

namespace {

// A list entry's page: itself, or through the map (−1 stays −1).
int32_t mapped_page(const BlockPageMap& m, int32_t entry) {
  if (!m.pages || entry < 0) return entry;
  const int64_t b = int64_t{entry} - m.first_block;
  DSV4_CHECK(b >= 0 && b < m.blocks, "paged_slots: block {} is outside the map's blocks [{}, {})", entry, m.first_block,
             int64_t{m.first_block} + m.blocks);
  return m.pages[b * m.layers + m.layer];
}

}  // namespace

void paged_slots(ThreadPool& pool, const PagedSlotsParams& p) {
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t list = p.list[r], count = p.count[r], first = p.first ? p.first[r] : 0;
      DSV4_CHECK(list >= 0 && list < p.lists, "paged_slots: row {} reads page list {} of {}", r, list, p.lists);
      const int64_t base = p.base ? p.base[list] : 0;
      DSV4_CHECK(count >= 0 && count <= p.width && first >= base && base % p.per_page == 0 &&
                     first + int64_t{count} <= base + int64_t{p.page_stride} * p.per_page,
                 "paged_slots: row {} lists items [{}, {}), outside width {} or its list's pages [{}, {})", r, first,
                 first + int64_t{count}, p.width, base, base + int64_t{p.page_stride} * p.per_page);
      const int32_t row = p.list_row ? p.list_row[list] : list;
      DSV4_CHECK(!p.list_row || (row >= 0 && row < p.page_rows), "paged_slots: list {} reads row {} of {}", list, row,
                 p.page_rows);
      const int32_t* pages = p.pages + int64_t{row} * p.page_stride;
      int32_t* out = p.out + r * p.width;
      for (int32_t j = 0; j < p.width; ++j) {
        const int64_t i = int64_t{first} + j;
        const int32_t page = j < count ? mapped_page(p.map, pages[(i - base) / p.per_page]) : -1;
        out[j] = page < 0 ? -1 : static_cast<int32_t>(int64_t{page} * p.per_page + i % p.per_page);
      }
    }
  });
}

void argmax(ThreadPool& pool, const ArgmaxParams& p) {
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = p.x + r * p.cols;
      int64_t best = 0;
      for (int64_t i = 1; i < p.limit; ++i)
        if (x[i] > x[best] || (std::isnan(x[best]) && !std::isnan(x[i]))) best = i;
      p.out[r] = static_cast<int32_t>(best);
    }
  });
}

}  // namespace dsv4::cpu
