// Entry storing and sparse attention on the GPU against the CPU ops, on a paged table with
// scattered slots and -1 holes, at V4-Flash and golden dims: the generic kernel bit for bit, the V4
// fast path within a tolerance.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_support.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/rope.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using gputest::device_table;
using gputest::random_bf16;

struct Case {
  int heads, d, r, window, compressed;
  int64_t tokens, entries;
  KvEntryFormat format = KvEntryFormat::kAttnFp8;
  bool rope = false;   // positions set: the output's inverse RoPE
  bool holes = false;  // fast path: a run of masked elements over whole blocks, and a fully masked last token
  int q_offset = 0;    // q starts this many bf16 past an allocation (an unaligned q)
  // q as wq_b made it (SparseAttentionParams::q_unnormed): the CPU's head_rms_norm makes the q the checks
  // use, and the GPU taking the raw q (the fast path normalising it in its query load, the generic one
  // in place first) must give the bits it gives on that q.
  bool unnormed = false;
};

constexpr float kQNormEps = 1e-6f;

// A paged table: pages of 64 entries with a gap between pages (page_bytes > 64 entries).
EntryTable host_table(std::vector<uint8_t>& mem, int64_t entries, KvEntryDims dims, KvEntryFormat format) {
  const int32_t eb = static_cast<int32_t>(kv_entry_bytes(format, dims));
  const int64_t page = 64 * int64_t{eb} + 256, pages = (entries + 63) / 64;
  mem.assign(static_cast<size_t>(pages * page), 0xAB);
  return {mem.data(), page, 64, eb, format, pages * 64};
}

// Whether some score q·k of the case changes its bits when summed sequentially instead of in the CPU's
// 8 lanes: the inputs must make the order visible, or an exactness check could not fail.
bool order_shows(const Case& c, const std::vector<uint16_t>& q, const std::vector<uint16_t>& vals) {
  std::vector<float> a(static_cast<size_t>(c.d)), b(a.size());
  for (int i = 0; i < 64; ++i) {
    cpu::bf16_to_f32(q.data() + static_cast<size_t>(i % (c.tokens * c.heads)) * c.d, a.data(), c.d);
    cpu::bf16_to_f32(vals.data() + static_cast<size_t>(i % c.entries) * c.d, b.data(), c.d);
    float seq = 0;
    for (int k = 0; k < c.d; ++k) seq += a[static_cast<size_t>(k)] * b[static_cast<size_t>(k)];
    if (seq != cpu::dot(a.data(), b.data(), c.d)) return true;
  }
  return false;
}

// The generic kernel must match the CPU bit for bit; the fast path within the tolerance below, and with a
// shadow (attention_mqa.cu) the same bits as without.
void run_case(const Case& c, uint32_t seed, bool generic = false) {
  CpuOps cpu(2);
  const KvEntryDims dims{c.d, c.r};
  SparseAttentionParams shape;  // what the dispatch looks at
  shape.heads = c.heads;
  shape.head_dim = c.d;
  shape.rope_dim = c.r;
  shape.window.format = shape.compressed.format = c.format;
  shape.window.entry_bytes = shape.compressed.entry_bytes = static_cast<int32_t>(kv_entry_bytes(c.format, dims));
  shape.compressed_width = c.compressed;
  const bool exact = generic || !cuda::mqa_fast_path(shape);

  // Entries on the FP8 grid (or bf16), stored through the CPU codec and through the CUDA kernel. For the
  // exact checks the last (bf16) dim ramps with the entry id and the lists ascend below, so that the
  // running max rises block after block and the rescaling by alpha shows.
  auto vals = random_bf16(static_cast<size_t>(c.entries * c.d), seed, 3.0f);
  const float ramp = 8 * std::sqrt(static_cast<float>(c.d)) / 4;  // q's last dim is 4: scores rise by ~8
  for (int64_t e = 0; exact && e < c.entries; ++e)
    vals[static_cast<size_t>(e * c.d + c.d - 1)] =
        float_to_bf16(ramp * static_cast<float>(e) / static_cast<float>(c.entries));
  if (c.format == KvEntryFormat::kAttnFp8) cpu.quant_sim({vals.data(), c.entries, c.d - c.r, c.d, QuantSim::kFp8, 64});
  std::vector<uint8_t> mem;
  const EntryTable table = host_table(mem, c.entries, dims, c.format);
  std::vector<int32_t> store_slots(static_cast<size_t>(c.entries));
  std::iota(store_slots.begin(), store_slots.end(), 0);
  std::shuffle(store_slots.begin(), store_slots.end(), std::mt19937(seed + 1));
  auto dmem_init = mem;
  cpu.store_entries({vals.data(), c.entries, dims, table, store_slots.data()});
  Dev<uint8_t> dmem(dmem_init);
  Dev<uint16_t> dvals(vals);
  Dev<int32_t> dstore(store_slots);
  cuda::store_entries({dvals.p, c.entries, dims, device_table(table, dmem.p), dstore.p}, nullptr, nullptr);
  ASSERT_EQ(dmem.get(), mem) << "stored bytes differ";

  // Queries and index lists with holes (for the generic kernel also a whole masked block and a fully
  // masked last token); the sink in the denominator.
  auto q = random_bf16(static_cast<size_t>(c.tokens * c.heads * c.d), seed + 2, 1.0f);
  for (size_t i = c.d - 1; exact && i < q.size(); i += c.d) q[i] = float_to_bf16(4.0f);
  const auto sinkv = random_bf16(static_cast<size_t>(c.heads), seed + 3, 1.0f);
  std::vector<float> sink(sinkv.size());
  for (size_t i = 0; i < sink.size(); ++i) sink[i] = 3 + bf16_to_float(sinkv[i]);
  std::mt19937 rng(seed + 4);
  auto list = [&](int width) {
    std::vector<int32_t> l(static_cast<size_t>(c.tokens * width));
    for (auto& s : l) s = rng() % 7 == 0 ? -1 : static_cast<int32_t>(rng() % c.entries);
    if (c.holes) {
      for (int64_t t = 0; t < c.tokens; ++t)
        for (int i = 100; i < std::min(width, 300); ++i) l[static_cast<size_t>(t * width + i)] = -1;
      if (c.tokens > 1) std::fill(l.end() - width, l.end(), -1);
    }
    if (!exact) return l;
    for (int64_t t = 0; t < c.tokens; ++t) {  // ascending valid slots, the holes where they were
      std::vector<int32_t> valid;
      for (int i = 0; i < width; ++i)
        if (l[static_cast<size_t>(t * width + i)] >= 0) valid.push_back(l[static_cast<size_t>(t * width + i)]);
      std::sort(valid.begin(), valid.end());
      for (int i = 0, v = 0; i < width; ++i)
        if (l[static_cast<size_t>(t * width + i)] >= 0)
          l[static_cast<size_t>(t * width + i)] = valid[static_cast<size_t>(v++)];
    }
    for (int i = 0; i < std::min(width, 64); ++i) l[static_cast<size_t>(i)] = -1;
    if (c.tokens > 1) std::fill(l.end() - width, l.end(), -1);
    return l;
  };
  const auto win = list(c.window), comp = list(c.compressed);
  std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
  const RopeConfig rope = rope_config(v4_flash_config(), 4);
  std::vector<uint16_t> raw;  // un-normed: each head scaled by 1-5, so that the norm matters
  if (c.unnormed) {
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = float_to_bf16(bf16_to_float(q[i]) * static_cast<float>(1 + (i / c.d) % 5));
    raw = q;
    cpu.head_rms_norm({q.data(), c.tokens, c.heads, c.d, kQNormEps, c.rope ? pos.data() : nullptr, rope});
  }
  std::vector<uint16_t> want(q.size());
  SparseAttentionParams p;
  p.q = q.data();
  p.out = want.data();
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = c.d;
  p.rope_dim = c.r;
  p.sink = sink.data();
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  p.window = table;
  p.window_slots = win.data();
  p.window_width = c.window;
  p.compressed = table;
  p.compressed_slots = comp.data();
  p.compressed_width = c.compressed;
  if (c.rope) {
    p.positions = pos.data();
    p.rope = rope;
  }
  cpu.sparse_attention(p);

  std::vector<uint16_t> q_at(static_cast<size_t>(c.q_offset), 0x7fc0);
  q_at.insert(q_at.end(), q.begin(), q.end());
  Dev<uint16_t> dq(q_at), dout(std::vector<uint16_t>(q.size(), 0x7fc0));
  Dev<float> dsink(sink), dfreqs(rope_frequencies(rope));
  Dev<int32_t> dwin(win), dcomp(comp), dpos(pos);
  cuda::AttentionLaunch a;
  a.q = dq.p + c.q_offset;
  a.out = dout.p;
  a.tokens = c.tokens;
  a.heads = c.heads;
  a.head_dim = c.d;
  a.rope_dim = c.r;
  a.sink = dsink.p;
  a.softmax_scale = p.softmax_scale;
  a.window = device_table(table, dmem.p);
  a.window_slots = dwin.p;
  a.window_width = c.window;
  a.compressed = a.window;
  a.compressed_slots = dcomp.p;
  a.compressed_width = c.compressed;
  if (c.rope) {
    a.positions = dpos.p;
    a.rope = rope;
    a.freqs = dfreqs.p;
  }
  if (generic) {
    ASSERT_FALSE(c.rope) << "sparse_attention_generic leaves the inverse RoPE to its caller";
    cuda::sparse_attention_generic(a, nullptr);
  } else {
    cuda::sparse_attention(a, a.freqs, a.err, nullptr);
  }
  const auto got = dout.get();
  if (!exact) {  // the fast path with a shadow: all rows shadowed, and most past a shadow of 37 rows
    for (const int64_t rows : {cuda::kMqaShadowRows, int64_t{37}}) {
      Dev<uint16_t> shadowed(std::vector<uint16_t>(q.size(), 0x7fc0));
      cuda::AttentionLaunch b = a;
      b.out = shadowed.p;
      cuda::sparse_attention_mqa(b, nullptr, rows);
      EXPECT_TRUE(shadowed.get() == got) << "heads " << c.heads << ": a shadow of " << rows << " rows changes bits";
    }
  }
  if (c.unnormed) {  // the raw q (a fresh copy each run: the generic path normalises it in place)
    for (const int64_t rows : {int64_t{0}, cuda::kMqaShadowRows, int64_t{37}}) {
      if (exact && rows > 0) break;
      std::vector<uint16_t> raw_at(static_cast<size_t>(c.q_offset), 0x7fc0);
      raw_at.insert(raw_at.end(), raw.begin(), raw.end());
      Dev<uint16_t> draw(raw_at), dun(std::vector<uint16_t>(q.size(), 0x7fc0));
      cuda::AttentionLaunch b = a;
      b.q = nullptr;
      b.q_unnormed = draw.p + c.q_offset;
      b.q_norm_eps = kQNormEps;
      b.out = dun.p;
      if (exact || rows == 0) {
        cuda::sparse_attention(b, b.freqs, b.err, nullptr);
      } else {
        cuda::sparse_attention_mqa(b, nullptr, rows);
      }
      EXPECT_TRUE(dun.get() == got) << "heads " << c.heads << ": q un-normed (shadow rows " << rows << ") changes bits";
    }
  }
  if (exact) {
    ASSERT_TRUE(order_shows(c, q, vals)) << "inputs blind to the dot's summation order";
    EXPECT_EQ(got, want) << "heads " << c.heads << " d " << c.d;
    return;
  }
  // Split lists round P against each split's own running max, so outputs may move by an ulp or two
  // of their own magnitude (or of the rms, for small ones); a wrong entry moves them by far more.
  const auto near_want = [&](const std::vector<uint16_t>& y, const char* what) {
    double ss = 0, diff = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double g = bf16_to_float(y[i]), w = bf16_to_float(want[i]);
      ASSERT_FALSE(std::isnan(g)) << what << " " << i;
      ss += w * w;
      diff += (g - w) * (g - w);
    }
    const double rms = std::sqrt(ss / static_cast<double>(y.size()));
    double ulps = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double g = bf16_to_float(y[i]), w = bf16_to_float(want[i]);
      ulps = std::max(ulps, std::fabs(g - w) / (0x1p-7 * std::max(std::fabs(w), rms)));
    }
    EXPECT_LE(ulps, 3.0) << what << ": heads " << c.heads << " d " << c.d;
    EXPECT_LE(std::sqrt(diff / ss), 2e-3) << what << ": heads " << c.heads << " d " << c.d;
  };
  near_want(got, "as planned");
}

TEST(CudaAttention, MatchesCpuAtFlashDims) { run_case({64, 512, 64, 128, 512, 4, 3000}, 11); }
TEST(CudaAttention, GenericKernelMatchesCpuAtFlashDims) { run_case({64, 512, 64, 128, 512, 8, 3000}, 14, true); }
// Decode at long context: the fast path splits the list over CTAs and merges the partial states.
TEST(CudaAttention, FastPathSplitsLongListsAtFlashDims) { run_case({64, 512, 64, 128, 8192, 2, 20000}, 15); }
// Prefill-like: many tokens, one split each.
TEST(CudaAttention, FastPathManyTokensAtFlashDims) { run_case({64, 512, 64, 128, 64, 300, 4000}, 16); }
// Batch 32 at CSA widths (128 + 512): the list split in a few parts per token; inverse RoPE.
TEST(CudaAttention, FastPathBatch32AtFlashDims) {
  run_case({64, 512, 64, 128, 512, 32, 5000, KvEntryFormat::kAttnFp8, true}, 20);
}
// An HCA list at 1M context (128 + 8192): many splits, masked whole blocks, a fully masked token.
TEST(CudaAttention, FastPathLongListWithHolesAtFlashDims) {
  run_case({64, 512, 64, 128, 8192, 5, 20000, KvEntryFormat::kAttnFp8, false, true}, 21);
}
// 45 tokens x a few splits: a partial wave of CTAs; a q that is only 4-byte aligned.
TEST(CudaAttention, FastPathPartialWaveAtFlashDims) {
  run_case({64, 512, 64, 128, 512, 45, 5000, KvEntryFormat::kAttnFp8, false, false, 2}, 22);
}
// 80 heads: a group of 64 and one of 16 (the CTA's other rows idle); 32 heads: one partial group.
TEST(CudaAttention, FastPathPartialHeadGroups) {
  run_case({80, 512, 64, 128, 300, 3, 2000, KvEntryFormat::kAttnFp8, true, true}, 23);
  run_case({32, 512, 64, 64, 1000, 7, 3000}, 24);
}
// q as wq_b made it: the shadow kernel's query load applies the Q-norm and RoPE (many tokens, a 4-byte
// aligned q, a partial head group); decode with splits, and the generic kernel, take it after
// head_rms_norm in place. The same bits as the normed q.
TEST(CudaAttention, UnnormedQueriesGiveTheNormedBits) {
  run_case({64, 512, 64, 128, 8192, 2, 20000, KvEntryFormat::kAttnFp8, true, false, 0, true}, 25);
  run_case({64, 512, 64, 128, 512, 45, 5000, KvEntryFormat::kAttnFp8, true, false, 2, true}, 26);
  run_case({80, 512, 64, 128, 300, 3, 2000, KvEntryFormat::kAttnFp8, false, true, 0, true}, 27);
  run_case({4, 128, 64, 128, 40, 33, 700, KvEntryFormat::kAttnFp8, true, false, 0, true}, 28);
}
TEST(CudaAttention, FastPathAppliesOnlyToFlashShapes) {
  SparseAttentionParams a;
  a.head_dim = 512;
  a.rope_dim = 64;
  a.heads = 64;
  a.window.format = KvEntryFormat::kAttnFp8;
  a.window.entry_bytes = 584;
  EXPECT_TRUE(cuda::mqa_fast_path(a));
  a.heads = 8;
  EXPECT_FALSE(cuda::mqa_fast_path(a));
  a.heads = 64;
  a.window.format = KvEntryFormat::kBf16;
  EXPECT_FALSE(cuda::mqa_fast_path(a));
}
// Shapes the fast path declines run the generic kernel: bit-exact.
TEST(CudaAttention, MatchesCpuAtGoldenDims) { run_case({4, 128, 64, 128, 16, 33, 700}, 12); }
TEST(CudaAttention, MatchesCpuAtGoldenDimsWithRope) {
  run_case({4, 128, 64, 128, 40, 33, 700, KvEntryFormat::kAttnFp8, true}, 17);
}
TEST(CudaAttention, MatchesCpuWithWideNope) { run_case({8, 256, 64, 128, 70, 9, 500}, 13); }
// 13 heads: a full group of 8 and one of 5; bf16 entries.
TEST(CudaAttention, MatchesCpuWithPartialHeadGroup) {
  run_case({13, 512, 64, 128, 200, 6, 900, KvEntryFormat::kBf16, true}, 18);
}
TEST(CudaAttention, MatchesCpuAtWidestHeads) { run_case({3, 1024, 64, 64, 100, 3, 300}, 19); }

}  // namespace
}  // namespace dsv4
