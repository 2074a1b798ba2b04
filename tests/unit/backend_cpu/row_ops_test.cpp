#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "backend/rope.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::OwnedTable;
using testing::random_bf16;

TEST(QuantSim, Fp8OnTheNopePartOnlyEqualsQ8) {
  std::mt19937 rng(41);
  CpuOps ops(2);
  const int64_t rows = 5, d = 512, nope = 448;
  const auto x = random_bf16(static_cast<size_t>(rows * d), rng, 3.0f);
  auto y = x;
  ops.quant_sim({.x = y.data(), .rows = rows, .cols = nope, .row_stride = d, .kind = QuantSim::kFp8, .block = 64});
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> v(static_cast<size_t>(nope));
    for (int64_t i = 0; i < nope; ++i) v[static_cast<size_t>(i)] = bf(x[static_cast<size_t>(r * d + i)]);
    fake_quant_e4m3(v, 64);
    for (int64_t i = 0; i < nope; ++i)
      ASSERT_EQ(y[static_cast<size_t>(r * d + i)], float_to_bf16(v[static_cast<size_t>(i)]));
    for (int64_t i = nope; i < d; ++i) ASSERT_EQ(y[static_cast<size_t>(r * d + i)], x[static_cast<size_t>(r * d + i)]);
  }
  auto z = y;  // idempotent
  ops.quant_sim({.x = z.data(), .rows = rows, .cols = nope, .row_stride = d, .kind = QuantSim::kFp8, .block = 64});
  EXPECT_EQ(z, y);
}

TEST(QuantSim, Fp4EqualsQ4AndLandsOnTheGrid) {
  std::mt19937 rng(42);
  CpuOps ops(1);
  const auto x = random_bf16(4 * 128, rng);
  auto y = x;
  ops.quant_sim({.x = y.data(), .rows = 4, .cols = 128, .kind = QuantSim::kFp4});
  std::vector<float> v = testing::to_f32(x);
  fake_quant_e2m1(v);
  EXPECT_EQ(y, testing::to_bf16(v));
  EXPECT_NE(y, x);
}

TEST(StoreEntries, WritesThroughTheCodecAndSkipsMinusOne) {
  std::mt19937 rng(43);
  CpuOps ops(2);
  const KvEntryDims dims{128, 64};
  OwnedTable t(10, KvEntryFormat::kAttnFp8, dims, 3);
  auto x = random_bf16(3 * 128, rng);
  ops.quant_sim({.x = x.data(), .rows = 3, .cols = 64, .row_stride = 128, .kind = QuantSim::kFp8, .block = 64});
  const std::vector<int32_t> slots = {7, -1, 2};
  ops.store_entries({.x = x.data(), .rows = 3, .dims = dims, .table = t.table, .slots = slots.data()});
  for (int r : {0, 2}) {
    std::vector<float> back(128);
    decode_kv_entry(t.table.format, dims,
                    {t.table.entry(slots[static_cast<size_t>(r)]), static_cast<size_t>(t.table.entry_bytes)}, back);
    for (int i = 0; i < 128; ++i)
      ASSERT_EQ(back[static_cast<size_t>(i)], bf(x[static_cast<size_t>(r * 128 + i)])) << r << " " << i;
  }
  EXPECT_EQ(t.table.entry(0)[0], 0xAB);  // untouched slot
  const std::vector<int32_t> bad = {12};
  EXPECT_THROW(ops.store_entries({.x = x.data(), .rows = 1, .dims = dims, .table = t.table, .slots = bad.data()}),
               Error);
  EntryTable wrong = t.table;
  wrong.entry_bytes = 256;
  EXPECT_THROW(ops.store_entries({.x = x.data(), .rows = 1, .dims = dims, .table = wrong, .slots = slots.data()}),
               Error);
}

TEST(Embed, CopiesRowsToEveryStreamAndChecksIds) {
  std::mt19937 rng(44);
  CpuOps ops(2);
  const int64_t vocab = 50, dim = 24;
  const auto table = random_bf16(static_cast<size_t>(vocab * dim), rng);
  const std::vector<int32_t> ids = {3, 49, 0, 3};
  std::vector<uint16_t> out(4 * 4 * dim);
  ops.embed({.ids = ids.data(),
             .tokens = 4,
             .table = table.data(),
             .vocab = vocab,
             .dim = dim,
             .copies = 4,
             .out = out.data()});
  for (int t = 0; t < 4; ++t)
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < dim; ++i)
        ASSERT_EQ(out[static_cast<size_t>((t * 4 + c) * dim + i)],
                  table[static_cast<size_t>(ids[static_cast<size_t>(t)] * dim + i)]);
  const std::vector<int32_t> bad = {50};
  EXPECT_THROW(
      ops.embed({.ids = bad.data(), .tokens = 1, .table = table.data(), .vocab = vocab, .dim = dim, .out = out.data()}),
      Error);
}

// Rows of any width come out in the index's order, repeats and all; an index outside the input is refused.
TEST(GatherRows, CopiesTheIndexedRowsAsTheyAre) {
  CpuOps ops(2);
  std::mt19937 rng(std::random_device{}());
  const int64_t in_rows = 9, width = 13;  // bytes: no alignment to lean on
  std::vector<uint8_t> in(static_cast<size_t>(in_rows * width));
  for (auto& b : in) b = static_cast<uint8_t>(rng());
  std::vector<int32_t> index(20);
  for (auto& i : index) i = static_cast<int32_t>(rng() % in_rows);
  std::vector<uint8_t> out(index.size() * width, 0xee);
  ops.gather_rows({in.data(), in_rows, index.data(), static_cast<int64_t>(index.size()), width, out.data()});
  for (size_t r = 0; r < index.size(); ++r)
    for (int64_t c = 0; c < width; ++c)
      ASSERT_EQ(out[r * width + static_cast<size_t>(c)], in[static_cast<size_t>(index[r] * width + c)]) << r;
  index[3] = static_cast<int32_t>(in_rows);
  EXPECT_THROW(
      ops.gather_rows({in.data(), in_rows, index.data(), static_cast<int64_t>(index.size()), width, out.data()}),
      Error);
}

TEST(QuantSim, RejectsBadParameters) {
  CpuOps ops(1);
  std::vector<uint16_t> x(128);
  EXPECT_THROW(ops.quant_sim({.x = x.data(), .rows = 1, .cols = 100, .kind = QuantSim::kFp4}), Error);
  EXPECT_THROW(ops.quant_sim({.x = x.data(), .rows = 1, .cols = 128, .kind = QuantSim::kFp8, .block = 0}), Error);
  EXPECT_THROW(ops.quant_sim({.x = x.data(), .rows = 1, .cols = 128, .row_stride = 64}), Error);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

TEST(PagedSlots, ExpandsPageListsRowByRow) {
  CpuOps ops(2);
  // Two lists of pages (per_page 4); rows read them with different counts, padded with -1.
  const std::vector<int32_t> pages = {7, 2, -1, 5,  //
                                      0, 9, 3,  1};
  const std::vector<int32_t> list = {0, 1, 0}, count = {10, 3, 16};
  std::vector<int32_t> out(3 * 16, 1234);
  ops.paged_slots(
      {3, 16, list.data(), nullptr, count.data(), pages.data(), nullptr, 2, 4, 4, out.data(), {}, nullptr, 0});
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 16; ++j) {
      const int32_t page =
          j < count[static_cast<size_t>(r)] ? pages[static_cast<size_t>(list[static_cast<size_t>(r)] * 4 + j / 4)] : -1;
      EXPECT_EQ(out[static_cast<size_t>(r * 16 + j)], page < 0 ? -1 : page * 4 + j % 4) << r << " " << j;
    }
  EXPECT_EQ(out[0], 28);       // page 7, entry 0
  EXPECT_EQ(out[9], -1);       // page -1: not resident
  EXPECT_EQ(out[16 + 3], -1);  // past the row's count
}

TEST(PagedSlots, RefusesRowsBeyondTheirLists) {
  CpuOps ops(1);
  const std::vector<int32_t> pages = {1, 2}, list = {1}, count = {3};
  std::vector<int32_t> out(4);
  EXPECT_THROW(
      ops.paged_slots(
          {1, 4, list.data(), nullptr, count.data(), pages.data(), nullptr, 1, 2, 1, out.data(), {}, nullptr, 0}),
      Error);
  const std::vector<int32_t> list0 = {0}, too_many = {3};
  EXPECT_THROW(
      ops.paged_slots(
          {1, 4, list0.data(), nullptr, too_many.data(), pages.data(), nullptr, 1, 2, 1, out.data(), {}, nullptr, 0}),
      Error);
  const std::vector<int32_t> before_base = {3}, base = {4}, one = {1};  // item 3 precedes the list's pages
  EXPECT_THROW(ops.paged_slots({1,
                                4,
                                list0.data(),
                                before_base.data(),
                                one.data(),
                                pages.data(),
                                base.data(),
                                1,
                                2,
                                2,
                                out.data(),
                                {},
                                nullptr,
                                0}),
               Error);
}

TEST(PagedSlots, RowsStartAnywhereInsideListsThatStartLate) {
  CpuOps ops(1);
  // One list whose pages cover items 8..19 (per_page 4, base 8): pages 3, 6, 1.
  const std::vector<int32_t> pages = {3, 6, 1}, base = {8}, list = {0, 0}, first = {9, 15}, count = {5, 5};
  std::vector<int32_t> out(2 * 6, 77);
  ops.paged_slots(
      {2, 6, list.data(), first.data(), count.data(), pages.data(), base.data(), 1, 3, 4, out.data(), {}, nullptr, 0});
  // Row 0: items 9..13 -> page 3 entries 1..3, then page 6 entries 0..1; row 1: items 15..19.
  EXPECT_EQ(out, (std::vector<int32_t>{13, 14, 15, 24, 25, -1, 27, 4, 5, 6, 7, -1}));
}

// Lists of block ids read through a map equal the same lists with each block's page written in, for
// every layer of the map, on random lists, rows and maps.
TEST(PagedSlots, BlockListsThroughAMapEqualTheirPages) {
  CpuOps ops(2);
  std::mt19937 rng(7);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 50; ++trial) {
    const int layers = uniform(1, 5), blocks = uniform(1, 40), first_block = uniform(0, 100);
    const int per_page = uniform(1, 8), lists = uniform(1, 4), stride = uniform(1, 6), width = uniform(1, 40);
    std::vector<int32_t> map(static_cast<size_t>(blocks * layers));
    for (auto& m : map) m = uniform(-1, 1000);
    std::vector<int32_t> block_ids(static_cast<size_t>(lists * stride)), base(static_cast<size_t>(lists));
    for (auto& b : block_ids) b = uniform(0, 9) == 0 ? -1 : first_block + uniform(0, blocks - 1);
    for (auto& b : base) b = uniform(0, 3) * per_page;
    const int rows = uniform(1, 6);
    std::vector<int32_t> list(static_cast<size_t>(rows)), first(list.size()), count(list.size());
    for (size_t r = 0; r < list.size(); ++r) {
      list[r] = uniform(0, lists - 1);
      const int span = stride * per_page;
      first[r] = base[static_cast<size_t>(list[r])] + uniform(0, span - 1);
      count[r] = uniform(0, std::min(width, base[static_cast<size_t>(list[r])] + span - first[r]));
    }
    for (int layer = 0; layer < layers; ++layer) {
      const BlockPageMap m{map.data(), first_block, blocks, layers, layer};
      std::vector<int32_t> pages(block_ids.size());
      for (size_t i = 0; i < pages.size(); ++i)
        pages[i] = block_ids[i] < 0 ? -1 : map[static_cast<size_t>((block_ids[i] - first_block) * layers + layer)];
      std::vector<int32_t> mapped(static_cast<size_t>(rows * width), 5), direct(mapped.size(), 6);
      ops.paged_slots({rows, width, list.data(), first.data(), count.data(), block_ids.data(), base.data(), lists,
                       stride, per_page, mapped.data(), m, nullptr, 0});
      ops.paged_slots({rows,
                       width,
                       list.data(),
                       first.data(),
                       count.data(),
                       pages.data(),
                       base.data(),
                       lists,
                       stride,
                       per_page,
                       direct.data(),
                       {},
                       nullptr,
                       0});
      ASSERT_EQ(mapped, direct) << "trial " << trial << " layer " << layer;
    }
  }
}

// Lists kept as rows of a table on the device read their rows, as if copied out one after another.
TEST(PagedSlots, ListsReadTheirRowsOfATable) {
  CpuOps ops(1);
  const std::vector<int32_t> table = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};  // [4 rows, stride 3]
  const std::vector<int32_t> rows = {3, 1}, list = {0, 1, 0}, first = {0, 2, 5}, count = {6, 4, 1};
  std::vector<int32_t> via_rows(3 * 6), copied(3 * 6);
  auto params = [&](const int32_t* pages, const int32_t* row_of, int64_t page_rows, int32_t* out) {
    return PagedSlotsParams{3, 6, list.data(), first.data(), count.data(), pages,  nullptr,
                            2, 3, 2,           out,          {},           row_of, page_rows};
  };
  ops.paged_slots(params(table.data(), rows.data(), 4, via_rows.data()));
  const std::vector<int32_t> pages = {30, 31, 32, 10, 11, 12};  // rows 3 and 1
  ops.paged_slots(params(pages.data(), nullptr, 0, copied.data()));
  EXPECT_EQ(via_rows, copied);
  const std::vector<int32_t> outside = {4, 1};
  EXPECT_THROW(ops.paged_slots(params(table.data(), outside.data(), 4, via_rows.data())), Error);
}

TEST(PagedSlots, RefusesBlocksOutsideTheMap) {
  CpuOps ops(1);
  const std::vector<int32_t> map = {4, 5, 6, 7}, list = {0}, count = {1};
  std::vector<int32_t> out(1);
  for (const int32_t block : {9, 12}) {  // the map holds blocks 10 and 11
    const std::vector<int32_t> blocks = {block};
    EXPECT_THROW(ops.paged_slots({1, 1, list.data(), nullptr, count.data(), blocks.data(), nullptr, 1, 1, 1, out.data(),
                                  BlockPageMap{map.data(), 10, 2, 2, 1}, nullptr, 0}),
                 Error);
  }
  const std::vector<int32_t> blocks = {11};
  ops.paged_slots({1, 1, list.data(), nullptr, count.data(), blocks.data(), nullptr, 1, 1, 1, out.data(),
                   BlockPageMap{map.data(), 10, 2, 2, 1}, nullptr, 0});
  EXPECT_EQ(out[0], 7);
  EXPECT_THROW(ops.paged_slots({1, 1, list.data(), nullptr, count.data(), blocks.data(), nullptr, 1, 1, 1, out.data(),
                                BlockPageMap{map.data(), 10, 2, 2, 2}, nullptr, 0}),
               Error);  // layer 2 of 2
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The fused window insert is exactly rms_norm, rope, Q8 and store_entries in turn; rows with slot −1
// leave their entries alone.
TEST(KvInsert, EqualsTheFourStepsInTurn) {
  CpuOps ops(2);
  std::mt19937 rng(41);
  const int64_t rows = 7;
  const KvEntryDims dims{512, 64};
  const RopeConfig rope = rope_config(v4_flash_config(), 4);
  auto x = random_bf16(static_cast<size_t>(rows * dims.dim), rng, 2.0f);
  auto w = random_bf16(static_cast<size_t>(dims.dim), rng, 0.3f);
  std::vector<int32_t> pos = {0, 5, 300, 4095, 70000, 1 << 20, 17}, slots = {3, -1, 0, 6, 2, 5, 1};
  OwnedTable fused(8, KvEntryFormat::kAttnFp8, dims), steps(8, KvEntryFormat::kAttnFp8, dims);
  ops.kv_insert({x.data(), rows, dims, w.data(), 1e-6f, pos.data(), rope, fused.table, slots.data()});
  std::vector<uint16_t> kv(x.size());
  ops.rms_norm({x.data(), kv.data(), w.data(), rows, dims.dim, 1e-6f});
  ops.rope({kv.data(), rows, 1, dims.dim, pos.data(), rope, false});
  ops.quant_sim({kv.data(), rows, dims.dim - dims.rope_dim, dims.dim, QuantSim::kFp8, 64});
  ops.store_entries({kv.data(), rows, dims, steps.table, slots.data()});
  EXPECT_EQ(fused.bytes, steps.bytes);
  EXPECT_NE(fused.bytes, std::vector<uint8_t>(fused.bytes.size(), 0xAB)) << "nothing was written";
  const std::vector<int32_t> bad = {8, -1, 0, 0, 0, 0, 0};
  EXPECT_THROW(ops.kv_insert({x.data(), rows, dims, w.data(), 1e-6f, pos.data(), rope, fused.table, bad.data()}),
               Error);
}

TEST(HeadRmsNorm, WithPositionsEqualsNormThenRope) {
  CpuOps ops(2);
  std::mt19937 rng(42);
  const int64_t rows = 3;
  const int heads = 4, d = 128;
  const RopeConfig rope = rope_config(v4_flash_config(), 0);
  auto q = random_bf16(static_cast<size_t>(rows * heads * d), rng, 3.0f);
  std::vector<int32_t> pos = {2, 999, 123456};
  auto fused = q, steps = q;
  ops.head_rms_norm({fused.data(), rows, heads, d, 1e-6f, pos.data(), rope});
  ops.head_rms_norm({steps.data(), rows, heads, d, 1e-6f});
  ops.rope({steps.data(), rows, heads, d, pos.data(), rope, false});
  EXPECT_EQ(fused, steps);
  EXPECT_NE(fused, q);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

TEST(Argmax, FirstMaximumBelowTheLimit) {
  CpuOps ops(2);
  const float nan = std::nanf("");
  const std::vector<float> x = {1,   5,   5,   2,   9,  //  9 sits at the limit: not eligible
                                nan, 3,   7,   7,   0,  // NaN never wins; tie to the lower index
                                nan, nan, nan, nan, nan};
  std::vector<int32_t> out(3, -7);
  ops.argmax({x.data(), 3, 5, 4, out.data()});
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 0}));
  EXPECT_THROW(ops.argmax({x.data(), 3, 5, 6, out.data()}), Error);
}

}  // namespace
}  // namespace dsv4
