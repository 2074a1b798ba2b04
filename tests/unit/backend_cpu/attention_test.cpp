#include <gtest/gtest.h>

#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"

namespace dsv4 {
namespace {

using testing::bf;
using testing::OwnedTable;
using testing::random_bf16;

constexpr float kInf = std::numeric_limits<float>::infinity();

// A problem: entries in a window and a compressed table (same format), queries, index lists.
struct Problem {
  int heads, d, r;
  int64_t tokens;
  KvEntryFormat format;
  OwnedTable window, compressed;
  std::vector<std::vector<float>> window_values, compressed_values;  // decoded entries
  std::vector<uint16_t> q;
  std::vector<float> sink;
  std::vector<int32_t> wslots, cslots;
  int32_t ww, cw;

  Problem(int h, int dim, int rope, int64_t t, KvEntryFormat f, int64_t n_window, int64_t n_compressed, int32_t ww_,
          int32_t cw_)
      : heads(h),
        d(dim),
        r(rope),
        tokens(t),
        format(f),
        window(n_window, f, {dim, rope}, 5),
        compressed(n_compressed, f, {dim, rope}, 7),
        ww(ww_),
        cw(cw_) {}

  void fill_entry(OwnedTable& t, std::vector<std::vector<float>>& store, int64_t slot, const std::vector<float>& v) {
    encode_kv_entry(format, {d, r}, v, {t.table.entry(slot), static_cast<size_t>(t.table.entry_bytes)});
    std::vector<float> back(static_cast<size_t>(d));
    decode_kv_entry(format, {d, r}, {t.table.entry(slot), static_cast<size_t>(t.table.entry_bytes)}, back);
    if (store.size() <= static_cast<size_t>(slot)) store.resize(static_cast<size_t>(slot) + 1);
    store[static_cast<size_t>(slot)] = back;
  }

  const std::vector<float>& value(int64_t t, int64_t i) const {
    return i < ww ? window_values[static_cast<size_t>(wslots[static_cast<size_t>(t * ww + i)])]
                  : compressed_values[static_cast<size_t>(cslots[static_cast<size_t>(t * cw + i - ww)])];
  }
  int32_t slot(int64_t t, int64_t i) const {
    return i < ww ? wslots[static_cast<size_t>(t * ww + i)] : cslots[static_cast<size_t>(t * cw + i - ww)];
  }

  SparseAttentionParams params(uint16_t* out) const {
    return {.q = q.data(),
            .out = out,
            .tokens = tokens,
            .heads = heads,
            .head_dim = d,
            .rope_dim = r,
            .sink = sink.data(),
            .softmax_scale = static_cast<float>(std::pow(double(d), -0.5)),
            .window = window.table,
            .window_slots = wslots.data(),
            .window_width = ww,
            .compressed = compressed.table,
            .compressed_slots = cslots.empty() ? nullptr : cslots.data(),
            .compressed_width = cw};
  }

  std::vector<uint16_t> run(Ops& ops) const {
    std::vector<uint16_t> out(static_cast<size_t>(tokens * heads * d), 0x7777);
    ops.sparse_attention(params(out.data()));
    return out;
  }
};

// Random lists: each slot valid with probability p_valid, else −1.
void random_lists(Problem& pb, std::mt19937& rng, double p_valid) {
  std::bernoulli_distribution keep(p_valid);
  std::uniform_int_distribution<int32_t> wpick(0, static_cast<int32_t>(pb.window_values.size()) - 1);
  std::uniform_int_distribution<int32_t> cpick(
      0, std::max<int32_t>(0, static_cast<int32_t>(pb.compressed_values.size()) - 1));
  pb.wslots.resize(static_cast<size_t>(pb.tokens * pb.ww));
  pb.cslots.resize(static_cast<size_t>(pb.tokens * pb.cw));
  for (auto& s : pb.wslots) s = keep(rng) ? wpick(rng) : -1;
  for (auto& s : pb.cslots) s = keep(rng) ? cpick(rng) : -1;
  pb.wslots[0] = 0;  // every query sees at least one entry
  for (int64_t t = 0; t < pb.tokens; ++t)
    pb.wslots[static_cast<size_t>(t * pb.ww)] = static_cast<int32_t>(t % pb.window_values.size());
}

// The contract of ops.h written out: positional 64-blocks, online softmax, bf16 P, list-order sums.
std::vector<uint16_t> emulate(const Problem& pb) {
  std::vector<uint16_t> out(static_cast<size_t>(pb.tokens * pb.heads * pb.d));
  const int64_t width = int64_t{pb.ww} + pb.cw;
  const float scale = static_cast<float>(std::pow(double(pb.d), -0.5));
  for (int64_t t = 0; t < pb.tokens; ++t) {
    for (int h = 0; h < pb.heads; ++h) {
      const uint16_t* q = pb.q.data() + (t * pb.heads + h) * pb.d;
      float m = -kInf, l = 0;
      std::vector<float> acc(static_cast<size_t>(pb.d), 0.0f);
      for (int64_t b0 = 0; b0 < width; b0 += 64) {
        std::vector<float> s;
        std::vector<const std::vector<float>*> vs;
        for (int64_t i = b0; i < std::min(width, b0 + 64); ++i) {
          if (pb.slot(t, i) < 0) continue;
          const auto& v = pb.value(t, i);
          float dotv = 0;  // exact: integer-valued inputs in the exact test
          for (int k = 0; k < pb.d; ++k) dotv += bf(q[k]) * v[static_cast<size_t>(k)];
          s.push_back(dotv * scale);
          vs.push_back(&v);
        }
        if (s.empty()) continue;
        const float m_new = std::max(m, *std::max_element(s.begin(), s.end()));
        const float alpha = std::exp(m - m_new);
        float sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - m_new));
        l = l * alpha + sum;
        for (auto& a : acc) a *= alpha;
        for (size_t i = 0; i < s.size(); ++i)
          for (int k = 0; k < pb.d; ++k)
            acc[static_cast<size_t>(k)] += round_bf16(s[i]) * (*vs[i])[static_cast<size_t>(k)];
        m = m_new;
      }
      const float lt = l + std::exp(pb.sink[static_cast<size_t>(h)] - m);
      for (int k = 0; k < pb.d; ++k)
        out[static_cast<size_t>((t * pb.heads + h) * pb.d + k)] =
            m == -kInf ? 0 : float_to_bf16(acc[static_cast<size_t>(k)] / lt);
    }
  }
  return out;
}

std::vector<float> small_integers(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> v(-2, 2);
  std::vector<float> x(n);
  for (auto& e : x) e = static_cast<float>(v(rng));
  return x;
}

void fill_random(Problem& pb, std::mt19937& rng, int64_t nw, int64_t nc, bool integers) {
  for (int64_t s = 0; s < nw; ++s) {
    auto v = integers ? small_integers(static_cast<size_t>(pb.d), rng)
                      : testing::random_bf16_values(static_cast<size_t>(pb.d), rng);
    pb.fill_entry(pb.window, pb.window_values, s, v);
  }
  for (int64_t s = 0; s < nc; ++s) {
    auto v = integers ? small_integers(static_cast<size_t>(pb.d), rng)
                      : testing::random_bf16_values(static_cast<size_t>(pb.d), rng);
    pb.fill_entry(pb.compressed, pb.compressed_values, s, v);
  }
  pb.q = integers ? testing::to_bf16(small_integers(static_cast<size_t>(pb.tokens * pb.heads * pb.d), rng))
                  : random_bf16(static_cast<size_t>(pb.tokens * pb.heads * pb.d), rng, 2.0f);
  pb.sink = testing::random_f32(static_cast<size_t>(pb.heads), rng, 2.0f);
}

TEST(SparseAttention, MatchesTheBlockedContractBitForBit) {
  for (KvEntryFormat f : {KvEntryFormat::kBf16, KvEntryFormat::kAttnFp8}) {
    std::mt19937 rng(51);
    CpuOps ops(2);
    Problem pb(4, 128, 64, 6, f, 40, 30, 100, 50);  // blocks straddle the window/compressed seam
    fill_random(pb, rng, 40, 30, true);
    random_lists(pb, rng, 0.7);
    EXPECT_EQ(pb.run(ops), emulate(pb)) << kv_entry_format_name(f);
  }
}

TEST(SparseAttention, RandomValuesMatchDoubleSoftmaxWithSink) {
  std::mt19937 rng(52);
  CpuOps ops(2);
  Problem pb(8, 128, 64, 5, KvEntryFormat::kAttnFp8, 128, 40, 128, 24);
  fill_random(pb, rng, 128, 40, false);
  random_lists(pb, rng, 0.8);
  const auto out = pb.run(ops);
  const double scale = std::pow(128.0, -0.5);
  for (int64_t t = 0; t < pb.tokens; ++t) {
    for (int h = 0; h < pb.heads; ++h) {
      std::vector<double> s;
      std::vector<const std::vector<float>*> vs;
      for (int64_t i = 0; i < pb.ww + pb.cw; ++i) {
        if (pb.slot(t, i) < 0) continue;
        double dv = 0;
        for (int k = 0; k < pb.d; ++k)
          dv += double{bf(pb.q[static_cast<size_t>((t * pb.heads + h) * pb.d + k)])} *
                pb.value(t, i)[static_cast<size_t>(k)];
        s.push_back(dv * scale);
        vs.push_back(&pb.value(t, i));
      }
      const double m = *std::max_element(s.begin(), s.end());
      double den = std::exp(pb.sink[static_cast<size_t>(h)] - m);
      for (double x : s) den += std::exp(x - m);
      for (int k = 0; k < pb.d; ++k) {
        double num = 0;
        for (size_t i = 0; i < s.size(); ++i) num += std::exp(s[i] - m) * (*vs[i])[static_cast<size_t>(k)];
        ASSERT_NEAR(bf(out[static_cast<size_t>((t * pb.heads + h) * pb.d + k)]), num / den,
                    0.01 + std::fabs(num / den) / 64)
            << t << " " << h << " " << k;
      }
    }
  }
}

TEST(SparseAttention, SinkOnlyAddsToTheDenominator) {
  std::mt19937 rng(53);
  CpuOps ops(1);
  Problem pb(2, 128, 64, 1, KvEntryFormat::kBf16, 1, 0, 1, 0);
  fill_random(pb, rng, 1, 0, false);
  pb.wslots = {0};
  pb.sink = {1.5f, -kInf};
  const auto out = pb.run(ops);
  const auto& v = pb.window_values[0];
  for (int h = 0; h < 2; ++h) {
    // One entry: M = s, P = 1, l = 1 + exp(sink − s); a −inf sink leaves v itself.
    double s = 0;
    for (int k = 0; k < 128; ++k) s += double{bf(pb.q[static_cast<size_t>(h * 128 + k)])} * v[static_cast<size_t>(k)];
    s *= std::pow(128.0, -0.5);
    for (int k = 0; k < 128; ++k) {
      const float got = bf(out[static_cast<size_t>(h * 128 + k)]);
      if (h == 1) {
        ASSERT_EQ(got, v[static_cast<size_t>(k)]);
      } else {
        ASSERT_NEAR(got, v[static_cast<size_t>(k)] / (1 + std::exp(1.5 - s)),
                    std::fabs(v[static_cast<size_t>(k)]) / 128);
      }
    }
  }
}

TEST(SparseAttention, MinusOneEntriesAndEmptyBlocksChangeNothing) {
  std::mt19937 rng(54);
  CpuOps ops(2);
  Problem a(4, 128, 64, 1, KvEntryFormat::kAttnFp8, 200, 0, 192, 0);
  fill_random(a, rng, 200, 0, false);
  // Block 0 full, block 1 all −1, block 2 holds the rest ...
  a.wslots.assign(192, -1);
  for (int i = 0; i < 64; ++i) a.wslots[static_cast<size_t>(i)] = i;
  for (int i = 128; i < 150; ++i) a.wslots[static_cast<size_t>(i)] = i;
  // ... equals the same entries without the empty block, −1s moved within their block.
  Problem b = a;
  b.ww = 128;
  b.wslots.assign(128, -1);
  for (int i = 0; i < 64; ++i) b.wslots[static_cast<size_t>(i)] = i;
  for (int i = 128; i < 150; ++i) b.wslots[static_cast<size_t>(64 + (i - 128) * 2)] = i;
  EXPECT_EQ(a.run(ops), b.run(ops));
  // Window and compressed halves are one list: the same entries split differently agree.
  Problem c = b;
  c.ww = 64;
  c.cw = 64;
  c.compressed = c.window;
  c.compressed_values = c.window_values;
  c.cslots.assign(b.wslots.begin() + 64, b.wslots.end());
  c.wslots.resize(64);
  EXPECT_EQ(c.run(ops), b.run(ops));
  // No entry at all: zeros.
  Problem e = b;
  e.wslots.assign(128, -1);
  const auto z = e.run(ops);
  EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](uint16_t v) { return v == 0; }));
}

TEST(SparseAttention, BatchAndThreadInvariantAtV4FlashDims) {
  std::mt19937 rng(55);
  CpuOps one(1), three(3);
  Problem pb(64, 512, 64, 3, KvEntryFormat::kAttnFp8, 128, 64, 128, 64);
  fill_random(pb, rng, 128, 64, false);
  random_lists(pb, rng, 0.9);
  const auto all = pb.run(three);
  EXPECT_EQ(pb.run(one), all);
  Problem single = pb;
  single.tokens = 1;
  const int64_t t = 2;
  single.q.assign(pb.q.begin() + t * 64 * 512, pb.q.begin() + (t + 1) * 64 * 512);
  single.wslots.assign(pb.wslots.begin() + t * 128, pb.wslots.begin() + (t + 1) * 128);
  single.cslots.assign(pb.cslots.begin() + t * 64, pb.cslots.begin() + (t + 1) * 64);
  const auto alone = single.run(one);
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + t * 64 * 512));
}

TEST(SparseAttention, RejectsBadParameters) {
  std::mt19937 rng(56);
  CpuOps ops(1);
  Problem pb(2, 128, 64, 1, KvEntryFormat::kBf16, 4, 0, 4, 0);
  fill_random(pb, rng, 4, 0, false);
  pb.wslots = {0, 1, 2, 3};
  std::vector<uint16_t> out(256);
  auto p = pb.params(out.data());
  p.sink = nullptr;
  EXPECT_THROW(ops.sparse_attention(p), Error);
  p = pb.params(out.data());
  p.window.format = KvEntryFormat::kAttnFp8;  // entry_bytes no longer matches
  EXPECT_THROW(ops.sparse_attention(p), Error);
  p = pb.params(out.data());
  p.compressed_width = 3;  // no compressed slots given
  EXPECT_THROW(ops.sparse_attention(p), Error);
  pb.wslots = {0, 1, 2, 400};  // beyond the table
  EXPECT_THROW(ops.sparse_attention(pb.params(out.data())), Error);
}

}  // namespace
}  // namespace dsv4
