#include <gtest/gtest.h>

#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/rotary.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::OwnedTable;
using testing::random_bf16;

// One compressor (weights, ape, norm) of ratio m and entry width dc over model dim D.
struct Compressor {
  int ratio, dc, rope = 64;
  int64_t dim;
  bool indexer;
  int c() const { return ratio == 4 ? 2 : 1; }
  int64_t cd() const { return int64_t{c()} * dc; }
  std::vector<uint16_t> wkv, wgate, norm;
  std::vector<float> ape;
  RopeConfig rope_cfg;

  Compressor(int m, int d_c, int64_t d, bool idx, std::mt19937& rng) : ratio(m), dc(d_c), dim(d), indexer(idx) {
    wkv = random_bf16(static_cast<size_t>(cd() * dim), rng, 0.06f);
    wgate = random_bf16(static_cast<size_t>(cd() * dim), rng, 0.06f);
    norm = random_bf16(static_cast<size_t>(dc), rng, 0.1f);
    for (auto& v : norm) v = float_to_bf16(1 + bf(v));
    ape = testing::random_f32(static_cast<size_t>(ratio * cd()), rng, 0.5f);
    rope_cfg = rope_config(v4_flash_config(), ratio);
  }

  KvEntryDims state_dims() const { return {static_cast<int>(2 * cd()), 0}; }
  KvEntryFormat out_format() const { return indexer ? KvEntryFormat::kIndexFp4 : KvEntryFormat::kAttnFp8; }
  KvEntryDims out_dims() const { return {dc, indexer ? 0 : rope}; }

  void step(Ops& ops, const uint16_t* x, int64_t tokens, const int32_t* pos, const EntryTable& state,
            const int32_t* slots) const {
    ops.compressor_step({.x = x,
                         .tokens = tokens,
                         .dim = dim,
                         .positions = pos,
                         .wkv = Weight::bf16(wkv.data(), cd(), dim),
                         .wgate = Weight::bf16(wgate.data(), cd(), dim),
                         .ape = ape.data(),
                         .ratio = ratio,
                         .head_dim = dc,
                         .state = state,
                         .state_slots = slots});
  }

  CompressorEmitParams emit_params(int64_t n, const int32_t* blocks, const int32_t* rows, const EntryTable& state,
                                   const EntryTable& out, const int32_t* out_slots) const {
    return {.entries = n,
            .block_index = blocks,
            .rows = rows,
            .state = state,
            .ratio = ratio,
            .head_dim = dc,
            .rope_dim = rope,
            .norm_weight = norm.data(),
            .norm_eps = 1e-6f,
            .rope = rope_cfg,
            .indexer = indexer,
            .out = out,
            .out_slots = out_slots};
  }
};

std::vector<float> read_row(const EntryTable& t, int64_t slot, KvEntryDims dims) {
  std::vector<float> v(static_cast<size_t>(dims.dim));
  decode_kv_entry(t.format, dims, {t.entry(slot), static_cast<size_t>(t.entry_bytes)}, v);
  return v;
}

std::vector<uint8_t> entry_bytes(const EntryTable& t, int64_t slot) {
  return {t.entry(slot), t.entry(slot) + t.entry_bytes};
}

// §5.5 written out: pool (candidates in order, previous block first), bf16, norm, RoPE, simulation.
std::vector<float> emulate_entry(const Compressor& cp, const EntryTable& state, const std::vector<int32_t>& rows,
                                 int32_t block) {
  const int dc = cp.dc, c = cp.c();
  const int64_t cd = cp.cd();
  std::vector<float> e(static_cast<size_t>(dc));
  for (int ch = 0; ch < dc; ++ch) {
    std::vector<float> a, g;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] < 0) continue;
      const auto row = read_row(state, rows[r], cp.state_dims());
      const int64_t off = (c == 2 && r < static_cast<size_t>(cp.ratio)) ? 0 : int64_t{c - 1} * dc;
      a.push_back(row[static_cast<size_t>(off + ch)]);
      g.push_back(row[static_cast<size_t>(cd + off + ch)]);
    }
    const float mx = *std::max_element(g.begin(), g.end());
    float sum = 0;
    for (auto& x : g) sum += (x = std::exp(x - mx));
    float acc = 0;
    for (size_t i = 0; i < g.size(); ++i) acc += g[i] / sum * a[i];
    e[static_cast<size_t>(ch)] = round_bf16(acc);
  }
  std::vector<float> w = testing::to_f32(cp.norm);
  cpu::rms_norm_row(e.data(), w.data(), dc, 1e-6f, e.data());
  for (auto& x : e) x = round_bf16(x);
  const auto f = rope_frequencies(cp.rope_cfg);
  std::vector<float> cs(32), sn(32);
  cpu::rope_angles(f.data(), 32, block * cp.ratio, cs.data(), sn.data());
  cpu::rope_rotate(e.data() + dc - 64, cs.data(), sn.data(), 32, false);
  for (auto& x : e) x = round_bf16(x);
  if (cp.indexer) {
    cpu::hadamard_row(e.data(), dc);
    for (auto& x : e) x = round_bf16(x);
    fake_quant_e2m1(e);
  } else {
    fake_quant_e4m3(std::span<float>(e).first(static_cast<size_t>(dc - 64)), 64);
  }
  return e;
}

// Rows of entry i when state slot = token position: previous block (−1 for entry 0), current block.
std::vector<int32_t> prefill_rows(const Compressor& cp, int32_t i) {
  std::vector<int32_t> rows;
  if (cp.c() == 2)
    for (int r = 0; r < cp.ratio; ++r) rows.push_back(i == 0 ? -1 : (i - 1) * cp.ratio + r);
  for (int r = 0; r < cp.ratio; ++r) rows.push_back(i * cp.ratio + r);
  return rows;
}

TEST(CompressorStep, StoresFp32ProjectionsAndApe) {
  std::mt19937 rng(61);
  CpuOps ops(2);
  const Compressor cp(4, 128, 256, false, rng);
  const int64_t T = 6;
  const auto x = random_bf16(static_cast<size_t>(T * 256), rng);
  const std::vector<int32_t> pos = {5, 6, 7, 8, 9, 10}, slots = {0, 1, -1, 3, 4, 9};
  OwnedTable state(10, KvEntryFormat::kF32, cp.state_dims(), 3);
  cp.step(ops, x.data(), T, pos.data(), state.table, slots.data());
  std::vector<float> a(static_cast<size_t>(T * cp.cd())), g(a.size());
  ops.linear({.x = x.data(),
              .rows = T,
              .w = Weight::bf16(cp.wkv.data(), cp.cd(), 256),
              .y = a.data(),
              .y_type = ActType::kF32});
  ops.linear({.x = x.data(),
              .rows = T,
              .w = Weight::bf16(cp.wgate.data(), cp.cd(), 256),
              .y = g.data(),
              .y_type = ActType::kF32});
  for (int64_t t = 0; t < T; ++t) {
    if (slots[static_cast<size_t>(t)] < 0) continue;
    const auto row = read_row(state.table, slots[static_cast<size_t>(t)], cp.state_dims());
    for (int64_t i = 0; i < cp.cd(); ++i) {
      ASSERT_EQ(row[static_cast<size_t>(i)], a[static_cast<size_t>(t * cp.cd() + i)]);
      ASSERT_EQ(row[static_cast<size_t>(cp.cd() + i)],
                g[static_cast<size_t>(t * cp.cd() + i)] +
                    cp.ape[static_cast<size_t>((pos[static_cast<size_t>(t)] % 4) * cp.cd() + i)]);
    }
    double ref = 0;  // one element against double, as a sanity check of the true-fp32 GEMM
    for (int64_t k = 0; k < 256; ++k)
      ref += double{bf(x[static_cast<size_t>(t * 256 + k)])} * bf(cp.wkv[static_cast<size_t>(5 * 256 + k)]);
    EXPECT_NEAR(row[5], ref, 1e-5);
  }
  EXPECT_EQ(state.table.entry(2)[0], 0xAB);  // the −1 token stored nothing
}

class CompressorEmit : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(CompressorEmit, MatchesTheSpecStepsAndDecodeEqualsPrefill) {
  const auto [ratio, dc, indexer] = GetParam();
  std::mt19937 rng(62 + ratio + dc);
  CpuOps ops(2);
  const Compressor cp(ratio, dc, 256, indexer, rng);
  const int32_t S = ratio == 4 ? 23 : 300;  // 5 / 2 complete blocks plus a remainder
  const int32_t blocks = S / ratio;
  const auto x = random_bf16(static_cast<size_t>(S) * 256, rng);
  std::vector<int32_t> pos(static_cast<size_t>(S));
  for (int32_t p = 0; p < S; ++p) pos[static_cast<size_t>(p)] = p;

  // Prefill: one state row per position, every complete block emitted at once.
  OwnedTable state(S, KvEntryFormat::kF32, cp.state_dims(), 16);
  OwnedTable out(blocks, cp.out_format(), cp.out_dims(), 2);
  cp.step(ops, x.data(), S, pos.data(), state.table, pos.data());
  std::vector<int32_t> block_ids, rows, out_slots;
  for (int32_t i = 0; i < blocks; ++i) {
    block_ids.push_back(i);
    out_slots.push_back(i);
    const auto r = prefill_rows(cp, i);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  ops.compressor_emit(cp.emit_params(blocks, block_ids.data(), rows.data(), state.table, out.table, out_slots.data()));
  for (int32_t i = 0; i < blocks; ++i) {
    EXPECT_EQ(read_row(out.table, i, cp.out_dims()), emulate_entry(cp, state.table, prefill_rows(cp, i), i)) << i;
  }

  // Decode: a ring of c·ratio state rows, one token per call, emission when a block completes.
  const int ring = cp.c() * ratio;
  OwnedTable ring_state(ring, KvEntryFormat::kF32, cp.state_dims(), 8);
  OwnedTable out2(blocks, cp.out_format(), cp.out_dims(), 3);
  CpuOps ops3(3);
  for (int32_t p = 0; p < S; ++p) {
    const int32_t slot = p % ring;
    cp.step(ops3, x.data() + int64_t{p} * 256, 1, &p, ring_state.table, &slot);
    if ((p + 1) % ratio) continue;
    const int32_t i = p / ratio;
    std::vector<int32_t> r;
    for (int32_t q : prefill_rows(cp, i)) r.push_back(q < 0 ? -1 : q % ring);
    ops3.compressor_emit(cp.emit_params(1, &i, r.data(), ring_state.table, out2.table, &i));
  }
  for (int32_t i = 0; i < blocks; ++i) EXPECT_EQ(entry_bytes(out2.table, i), entry_bytes(out.table, i)) << i;
}

INSTANTIATE_TEST_SUITE_P(Kinds, CompressorEmit,
                         ::testing::Values(std::make_tuple(4, 128, false), std::make_tuple(4, 128, true),
                                           std::make_tuple(4, 512, false), std::make_tuple(128, 128, false)));

TEST(CompressorEmitEntryZero, AbsentPreviousRowsActAsMinusInfinityScores) {
  std::mt19937 rng(63);
  CpuOps ops(2);
  const Compressor cp(4, 128, 256, false, rng);
  const auto x = random_bf16(4 * 256, rng);
  const std::vector<int32_t> pos = {0, 1, 2, 3}, slots = {4, 5, 6, 7};
  OwnedTable state(8, KvEntryFormat::kF32, cp.state_dims(), 8);
  cp.step(ops, x.data(), 4, pos.data(), state.table, slots.data());
  // The reference's fresh state: previous rows with value 0 and score −inf.
  std::vector<float> fresh(static_cast<size_t>(2 * cp.cd()), 0.0f);
  std::fill(fresh.begin() + cp.cd(), fresh.end(), -std::numeric_limits<float>::infinity());
  for (int s = 0; s < 4; ++s)
    encode_kv_entry(KvEntryFormat::kF32, cp.state_dims(), fresh,
                    {state.table.entry(s), static_cast<size_t>(state.table.entry_bytes)});
  OwnedTable out(2, cp.out_format(), cp.out_dims());
  const int32_t block = 0;
  const std::vector<int32_t> absent = {-1, -1, -1, -1, 4, 5, 6, 7}, inf_rows = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int32_t> out_slots = {0, 1};
  ops.compressor_emit(cp.emit_params(1, &block, absent.data(), state.table, out.table, &out_slots[0]));
  ops.compressor_emit(cp.emit_params(1, &block, inf_rows.data(), state.table, out.table, &out_slots[1]));
  EXPECT_EQ(entry_bytes(out.table, 0), entry_bytes(out.table, 1));
  EXPECT_EQ(read_row(out.table, 0, cp.out_dims()), emulate_entry(cp, state.table, absent, 0));
}

TEST(CompressorEmitChecks, RejectsBadInput) {
  std::mt19937 rng(64);
  CpuOps ops(1);
  const Compressor cp(4, 128, 256, false, rng);
  OwnedTable state(8, KvEntryFormat::kF32, cp.state_dims());
  OwnedTable out(2, cp.out_format(), cp.out_dims());
  const int32_t block = 0, slot = 0;
  const std::vector<int32_t> missing_current = {-1, -1, -1, -1, 4, 5, -1, 7};
  EXPECT_THROW(ops.compressor_emit(cp.emit_params(1, &block, missing_current.data(), state.table, out.table, &slot)),
               Error);
  auto p = cp.emit_params(1, &block, missing_current.data(), state.table, out.table, &slot);
  p.rope_dim = 32;
  EXPECT_THROW(ops.compressor_emit(p), Error);
  p = cp.emit_params(1, &block, missing_current.data(), out.table, out.table, &slot);  // state not f32
  EXPECT_THROW(ops.compressor_emit(p), Error);
  const std::vector<int32_t> pos = {0}, slots = {0};
  const auto x = random_bf16(256, rng);
  auto sp = CompressorStepParams{.x = x.data(),
                                 .tokens = 1,
                                 .dim = 256,
                                 .positions = pos.data(),
                                 .wkv = Weight::bf16(cp.wkv.data(), 128, 256),
                                 .wgate = Weight::bf16(cp.wgate.data(), 256, 256),
                                 .ape = cp.ape.data(),
                                 .ratio = 4,
                                 .head_dim = 128,
                                 .state = state.table,
                                 .state_slots = slots.data()};
  EXPECT_THROW(ops.compressor_step(sp), Error);  // wkv has c·d_c = 256 rows for ratio 4
}

}  // namespace
}  // namespace dsv4
