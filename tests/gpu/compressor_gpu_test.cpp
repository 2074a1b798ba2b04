// Compressor store and emit on the GPU against the CPU ops: identical entry bytes on paged tables with
// gaps, at golden dims, V4-Flash attention dims and the indexer's dims, for every output format.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/cuda_check.h"
#include "backend/rope.h"
#include "core/kv_entry.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using gputest::device_table;
using gputest::random_bf16;
using gputest::random_f32;

// A paged host table (16 entries a page, a 40-byte gap between pages), every byte poisoned.
struct HostTable {
  std::vector<uint8_t> mem;
  EntryTable t;
  HostTable(int64_t entries, KvEntryFormat format, KvEntryDims dims) {
    const int32_t eb = static_cast<int32_t>(kv_entry_bytes(format, dims));
    const int64_t pages = (entries + 15) / 16, page = 16 * int64_t{eb} + 40;
    mem.assign(static_cast<size_t>(pages * page), 0xAB);
    t = {mem.data(), page, 16, eb, format, pages * 16};
  }
};

// Index of the first differing byte, or -1.
int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto m = std::mismatch(a.begin(), a.end(), b.begin());
  return m.first == a.end() ? -1 : m.first - a.begin();
}

int coff(int ratio) { return ratio == 4 ? 2 : 1; }

// "" when the table bytes agree; else the first differing entry, decoded, with its differing values.
std::string describe_diff(const std::vector<uint8_t>& got, const HostTable& want, KvEntryDims dims,
                          const std::vector<int32_t>& slots) {
  const int64_t d = first_diff(got, want.mem);
  if (d < 0) return "";
  const int64_t slot = d / want.t.page_bytes * want.t.entries_per_page + d % want.t.page_bytes / want.t.entry_bytes;
  std::ostringstream os;
  os << "byte " << d << ", slot " << slot << " (entry " << std::find(slots.begin(), slots.end(), slot) - slots.begin()
     << ")";
  const int64_t off = want.t.entry(slot) - want.mem.data();
  if (off + want.t.entry_bytes > static_cast<int64_t>(got.size())) return os.str();
  std::vector<float> g(static_cast<size_t>(dims.dim)), w(g.size());
  decode_kv_entry(want.t.format, dims, {got.data() + off, static_cast<size_t>(want.t.entry_bytes)}, g);
  decode_kv_entry(want.t.format, dims, {want.mem.data() + off, static_cast<size_t>(want.t.entry_bytes)}, w);
  int shown = 0;
  for (size_t i = 0; i < g.size() && shown < 8; ++i) {
    if (std::bit_cast<uint32_t>(g[i]) == std::bit_cast<uint32_t>(w[i])) continue;
    os << "\n  [" << i << "] got " << g[i] << " want " << w[i];
    ++shown;
  }
  return os.str();
}

// ---- compressor_store --------------------------------------------------------------------------------

void store_case(int ratio, int dc, uint32_t seed) {
  CpuOps cpu(2);
  const int64_t tokens = 37, dim = 256, cd = int64_t{coff(ratio)} * dc;
  const auto x = random_bf16(static_cast<size_t>(tokens * dim), seed, 1.0f);
  const auto wkv = random_bf16(static_cast<size_t>(cd * dim), seed + 1, 0.06f);
  const auto wgate = random_bf16(static_cast<size_t>(cd * dim), seed + 2, 0.06f);
  const auto ape = random_f32(static_cast<size_t>(ratio * cd), seed + 3, 0.5f);
  std::mt19937 rng(seed + 4);
  std::vector<int32_t> pos(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
  std::iota(slots.begin(), slots.end(), 3);
  std::shuffle(slots.begin(), slots.end(), rng);
  for (size_t i = 0; i < slots.size(); i += 5) slots[i] = -1;
  HostTable state(tokens + 3, KvEntryFormat::kF32, {static_cast<int>(2 * cd), 0});
  Dev<uint8_t> dstate(state.mem);
  const CompressorStepParams p{.x = x.data(),
                               .tokens = tokens,
                               .dim = dim,
                               .positions = pos.data(),
                               .wkv = Weight::bf16(wkv.data(), cd, dim),
                               .wgate = Weight::bf16(wgate.data(), cd, dim),
                               .ape = ape.data(),
                               .ratio = ratio,
                               .head_dim = dc,
                               .state = state.t,
                               .state_slots = slots.data()};
  cpu.compressor_step(p);
  // The exact GEMMs are the caller's: take them from the CPU (what compressor_step computes inside).
  std::vector<float> a(static_cast<size_t>(tokens * cd)), g(a.size());
  cpu.linear(
      {.x = x.data(), .rows = tokens, .w = Weight::bf16(wkv.data(), cd, dim), .y = a.data(), .y_type = ActType::kF32});
  cpu.linear({.x = x.data(),
              .rows = tokens,
              .w = Weight::bf16(wgate.data(), cd, dim),
              .y = g.data(),
              .y_type = ActType::kF32});
  Dev<float> da(a), dg(g), dape(ape);
  Dev<int32_t> dpos(pos), dslots(slots), derr(std::vector<int32_t>{0});
  CompressorStepParams dp = p;  // the store reads no x or weights, only wkv's rows (cd)
  dp.positions = dpos.p;
  dp.ape = dape.p;
  dp.state = device_table(state.t, dstate.p);
  dp.state_slots = dslots.p;
  cuda::compressor_store(dp, da.p, dg.p, derr.p, nullptr);
  EXPECT_EQ(first_diff(dstate.get(), state.mem), -1) << "ratio " << ratio << " dc " << dc;
  EXPECT_EQ(derr.get()[0], 0);
}

TEST(CudaCompressor, StoreMatchesCpuBytes) {
  store_case(4, 128, 1);
  store_case(128, 128, 2);
  store_case(4, 512, 3);
}

TEST(CudaCompressor, StoreReportsSlotOutsideTable) {
  const int64_t tokens = 2, cd = 64;
  HostTable state(4, KvEntryFormat::kF32, {static_cast<int>(2 * cd), 0});
  Dev<uint8_t> dstate(state.mem);
  Dev<float> da(random_f32(tokens * cd, 5, 1)), dg(random_f32(tokens * cd, 6, 1)), dape(random_f32(4 * cd, 7, 1));
  Dev<int32_t> dpos(std::vector<int32_t>{0, 1}), dslots(std::vector<int32_t>{-1, 16}), derr(std::vector<int32_t>{0});
  const CompressorStepParams p{.tokens = tokens,
                               .positions = dpos.p,
                               .wkv = Weight{.rows = cd},  // the store reads its rows (cd) alone
                               .ape = dape.p,
                               .ratio = 4,
                               .state = device_table(state.t, dstate.p),
                               .state_slots = dslots.p};
  cuda::compressor_store(p, da.p, dg.p, derr.p, nullptr);
  EXPECT_EQ(derr.get()[0], static_cast<int32_t>(cuda::DeviceError::kCompressorSlot));
  EXPECT_EQ(dstate.get(), state.mem);
}

// ---- compressor_emit ---------------------------------------------------------------------------------

struct EmitCase {
  int ratio, dc;
  bool indexer;
  KvEntryFormat out;
  int64_t entries;
};

// Inputs of one emit call: a state table of random rows laid out as a prefill would (entry i pools
// positions [(i−1)·ratio, (i+1)·ratio) for ratio 4), rows scattered over the table.
struct EmitInputs {
  EmitCase c;
  HostTable state;
  std::vector<int32_t> block, rows, out_slots;
  std::vector<uint16_t> norm;
  RopeConfig rope;
  int64_t out_capacity;

  EmitInputs(const EmitCase& ec, uint32_t seed)
      : c(ec),
        state((ec.entries + 1) * ec.ratio, KvEntryFormat::kF32, {2 * coff(ec.ratio) * ec.dc, 0}),
        rope(rope_config(v4_flash_config(), ec.ratio)),
        out_capacity(ec.entries + 5) {
    const int n_rows = coff(c.ratio) * c.ratio, cd = coff(c.ratio) * c.dc;
    std::mt19937 rng(seed);
    // Position p of the prefill lives at slot perm[p]; values a ~ N(0, 1), scores g ~ N(0, 2).
    const int64_t positions = (c.entries + 1) * c.ratio;
    std::vector<int32_t> perm(static_cast<size_t>(state.t.capacity));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const auto av = random_f32(static_cast<size_t>(positions * cd), seed + 1, 1.0f);
    const auto gv = random_f32(static_cast<size_t>(positions * cd), seed + 2, 2.0f);
    for (int64_t p = 0; p < positions; ++p) {
      float* row = reinterpret_cast<float*>(state.t.entry(perm[static_cast<size_t>(p)]));
      std::copy_n(&av[static_cast<size_t>(p * cd)], cd, row);
      std::copy_n(&gv[static_cast<size_t>(p * cd)], cd, row + cd);
    }
    for (int64_t i = 0; i < c.entries; ++i) {
      const int64_t first = c.ratio == 4 ? i * c.ratio : (i + 1) * c.ratio;  // position of row 0
      for (int r = 0; r < n_rows; ++r) {
        const bool previous = coff(c.ratio) == 2 && r < c.ratio;
        // Previous rows go missing: all of them now and then (a fresh sequence), or one at random.
        const bool absent = previous && (i % 5 == 0 || (i % 3 == 1 && rng() % 4 == 0));
        rows.push_back(absent ? -1 : perm[static_cast<size_t>(first + r)]);
      }
      block.push_back(static_cast<int32_t>(rng() % ((1 << 20) / c.ratio)));
    }
    out_slots.resize(static_cast<size_t>(c.entries));
    std::iota(out_slots.begin(), out_slots.end(), 2);
    std::shuffle(out_slots.begin(), out_slots.end(), rng);
    for (size_t i = 3; i < out_slots.size(); i += 7) out_slots[i] = -1;  // computed, not stored
    norm = random_bf16(static_cast<size_t>(c.dc), seed + 3, 0.1f);
    for (auto& w : norm) w = float_to_bf16(1 + bf16_to_float(w));
  }

  KvEntryDims out_dims() const { return {c.dc, c.out == KvEntryFormat::kAttnFp8 ? 64 : 0}; }

  CompressorEmitParams cpu_params(const EntryTable& out) const {
    return {.entries = c.entries,
            .block_index = block.data(),
            .rows = rows.data(),
            .state = state.t,
            .ratio = c.ratio,
            .head_dim = c.dc,
            .rope_dim = 64,
            .norm_weight = norm.data(),
            .norm_eps = 1e-6f,
            .rope = rope,
            .indexer = c.indexer,
            .out = out,
            .out_slots = out_slots.data()};
  }
};

// Device copies of the inputs; run() emits into a fresh poisoned output table and returns its bytes.
struct DeviceEmit {
  const EmitInputs& in;
  Dev<uint8_t> state;
  Dev<int32_t> block, rows, out_slots, err;
  Dev<uint16_t> norm;
  Dev<float> freqs;

  explicit DeviceEmit(const EmitInputs& i)
      : in(i),
        state(i.state.mem),
        block(i.block),
        rows(i.rows),
        out_slots(i.out_slots),
        err(std::vector<int32_t>{0}),
        norm(i.norm),
        freqs(rope_frequencies(i.rope)) {}

  std::vector<uint8_t> run(const HostTable& poisoned) {
    Dev<uint8_t> out(poisoned.mem);
    CompressorEmitParams a;
    a.entries = in.c.entries;
    a.block_index = block.p;
    a.rows = rows.p;
    a.state = device_table(in.state.t, state.p);
    a.ratio = in.c.ratio;
    a.head_dim = in.c.dc;
    a.rope_dim = 64;
    a.norm_weight = norm.p;
    a.norm_eps = 1e-6f;
    a.rope = in.rope;
    a.indexer = in.c.indexer;
    a.out = device_table(poisoned.t, out.p);
    a.out_slots = out_slots.p;
    cuda::compressor_emit(a, freqs.p, err.p, nullptr);
    return out.get();
  }
};

void emit_case(const EmitCase& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "ratio " << c.ratio << " dc " << c.dc << " indexer " << c.indexer << " format "
                                  << kv_entry_format_name(c.out));
  const EmitInputs in(c, seed);
  const HostTable poisoned(in.out_capacity, c.out, in.out_dims());
  HostTable want = poisoned;
  want.t.base = want.mem.data();
  CpuOps cpu(2);
  cpu.compressor_emit(in.cpu_params(want.t));
  DeviceEmit dev(in);
  const auto got = dev.run(poisoned);
  EXPECT_EQ(describe_diff(got, want, in.out_dims(), in.out_slots), "");
  EXPECT_NE(want.mem, poisoned.mem) << "nothing was stored";
  EXPECT_EQ(dev.err.get()[0], 0);
  EXPECT_EQ(dev.run(poisoned), got) << "not reproducible run to run";
}

TEST(CudaCompressor, EmitMatchesCpuAtGoldenDims) {
  emit_case({4, 128, false, KvEntryFormat::kAttnFp8, 40}, 11);
  emit_case({128, 128, false, KvEntryFormat::kAttnFp8, 9}, 12);
  emit_case({4, 128, false, KvEntryFormat::kF32, 9}, 19);  // the raw values, before any encoding
}

TEST(CudaCompressor, EmitMatchesCpuAtFlashAttentionDims) {
  emit_case({4, 512, false, KvEntryFormat::kAttnFp8, 24}, 13);
  emit_case({128, 512, false, KvEntryFormat::kAttnFp8, 6}, 14);
  emit_case({4, 512, false, KvEntryFormat::kBf16, 8}, 15);
}

TEST(CudaCompressor, EmitMatchesCpuForIndexerKeys) {
  emit_case({4, 128, true, KvEntryFormat::kIndexFp4, 40}, 16);
  emit_case({4, 128, true, KvEntryFormat::kIndexFp8, 40}, 17);
  emit_case({4, 128, true, KvEntryFormat::kBf16, 40}, 18);
}

// A missing current-block row and an output slot outside the table: reported, those entries skipped.
TEST(CudaCompressor, EmitReportsUnusableSlots) {
  const EmitCase c{4, 128, false, KvEntryFormat::kAttnFp8, 3};
  EmitInputs in(c, 21);
  const HostTable poisoned(in.out_capacity, c.out, in.out_dims());
  in.out_slots = {4, 1, static_cast<int32_t>(poisoned.t.capacity)};
  const int n_rows = 2 * c.ratio;
  in.rows[static_cast<size_t>(n_rows + n_rows - 1)] = -1;  // entry 1, last current row
  HostTable want = poisoned;
  want.t.base = want.mem.data();
  auto one = in.cpu_params(want.t);
  one.entries = 1;  // the CPU throws on the bad entries: emit only entry 0
  CpuOps cpu(2);
  cpu.compressor_emit(one);
  DeviceEmit dev(in);
  EXPECT_EQ(describe_diff(dev.run(poisoned), want, in.out_dims(), in.out_slots), "");
  EXPECT_EQ(dev.err.get()[0], static_cast<int32_t>(cuda::DeviceError::kCompressorSlot));
}

}  // namespace
}  // namespace dsv4
