// Indexer top-k on the GPU against the CPU ops: identical indices and slots, with Q4(Hadamard) keys in a
// paged table (fp4, fp8 and bf16 entries), at golden and V4-Flash dims, with mass score ties, and rows
// long enough that the selection spans many compaction CTAs (with and without wide histograms).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/indexer.h"
#include "core/kv_entry.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using gputest::device_table;
using gputest::random_bf16;

constexpr int kDim = 128;

struct Token {
  int32_t seq, pos;
};

struct Spec {
  int heads, topk;
  KvEntryFormat format;
  std::vector<int32_t> key_count;  // per sequence
  int32_t stride;
  std::vector<Token> tokens;
  int distinct = 0;  // > 0: only this many distinct key vectors (mass ties)
};

// Q4(Hadamard(x)) rows, as the model makes index queries and keys.
std::vector<uint16_t> index_vectors(CpuOps& cpu, int64_t rows, uint32_t seed) {
  auto v = random_bf16(static_cast<size_t>(rows * kDim), seed, 1.0f);
  cpu.hadamard({v.data(), rows, kDim});
  cpu.quant_sim({v.data(), rows, kDim, kDim, QuantSim::kFp4, 32});
  return v;
}

struct Inputs {
  Spec spec;
  std::vector<uint8_t> mem;  // the key table, paged (24 keys a page, a 40-byte gap), poisoned
  EntryTable keys;
  std::vector<uint16_t> q, w;
  std::vector<int32_t> pos, seq, key_slots, key_count, slot_map;
  float weight_scale;

  Inputs(const Spec& s, uint32_t seed) : spec(s), key_count(s.key_count) {
    CpuOps cpu(2);
    const int64_t seqs = static_cast<int64_t>(s.key_count.size());
    const int64_t total = std::accumulate(s.key_count.begin(), s.key_count.end(), int64_t{0});
    const int32_t eb = static_cast<int32_t>(kv_entry_bytes(s.format, {kDim, 0}));
    const int64_t pages = (total + 3 + 23) / 24, page = 24 * int64_t{eb} + 40;
    mem.assign(static_cast<size_t>(pages * page), 0xAB);
    keys = {mem.data(), page, 24, eb, s.format, pages * 24};
    // Key j of sequence s at a scattered slot; values from `distinct` vectors when asked.
    std::mt19937 rng(seed);
    std::vector<int32_t> perm(static_cast<size_t>(keys.capacity));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const auto base = index_vectors(cpu, s.distinct ? s.distinct : total, seed + 1);
    std::vector<uint16_t> x;
    std::vector<int32_t> store_slots;
    key_slots.assign(static_cast<size_t>(seqs * s.stride), -1);
    slot_map.assign(key_slots.size(), -1);
    int64_t n = 0;
    for (int64_t sq = 0; sq < seqs; ++sq) {
      for (int32_t j = 0; j < s.key_count[static_cast<size_t>(sq)]; ++j, ++n) {
        const int64_t src = s.distinct ? n % s.distinct : n;
        x.insert(x.end(), base.begin() + src * kDim, base.begin() + (src + 1) * kDim);
        store_slots.push_back(perm[static_cast<size_t>(n)]);
        key_slots[static_cast<size_t>(sq * s.stride + j)] = perm[static_cast<size_t>(n)];
        slot_map[static_cast<size_t>(sq * s.stride + j)] = static_cast<int32_t>(100000 * sq + 3 * j + 1);
      }
    }
    cpu.store_entries({x.data(), total, {kDim, 0}, keys, store_slots.data()});
    const int64_t t = static_cast<int64_t>(s.tokens.size());
    q = index_vectors(cpu, t * s.heads, seed + 2);
    w = random_bf16(static_cast<size_t>(t * s.heads), seed + 3, 1.0f);
    for (const Token& tk : s.tokens) {
      seq.push_back(tk.seq);
      pos.push_back(tk.pos);
    }
    weight_scale = static_cast<float>(std::pow(double{kDim}, -0.5) * std::pow(double(s.heads), -0.5));
  }

  int64_t tokens() const { return static_cast<int64_t>(pos.size()); }

  std::pair<std::vector<int32_t>, std::vector<int32_t>> cpu_run() const {
    std::vector<int32_t> out(static_cast<size_t>(tokens() * spec.topk)), slots(out.size());
    CpuOps cpu(2);
    cpu.indexer_topk({.q = q.data(),
                      .weights = w.data(),
                      .weight_scale = weight_scale,
                      .tokens = tokens(),
                      .heads = spec.heads,
                      .head_dim = kDim,
                      .positions = pos.data(),
                      .ratio = 4,
                      .token_seq = seq.data(),
                      .sequences = static_cast<int64_t>(key_count.size()),
                      .keys = keys,
                      .key_slots = key_slots.data(),
                      .key_stride = spec.stride,
                      .key_count = key_count.data(),
                      .topk = spec.topk,
                      .out_index = out.data(),
                      .slot_map = slot_map.data(),
                      .out_slots = slots.data()});
    return {out, slots};
  }
};

// Device copies; run() writes into poisoned outputs and returns them (index, slots, error code).
struct DeviceRun {
  const Inputs& in;
  Dev<uint8_t> mem;
  Dev<uint16_t> q, w;
  Dev<int32_t> pos, seq, key_slots, key_count, slot_map;

  explicit DeviceRun(const Inputs& i)
      : in(i),
        mem(i.mem),
        q(i.q),
        w(i.w),
        pos(i.pos),
        seq(i.seq),
        key_slots(i.key_slots),
        key_count(i.key_count),
        slot_map(i.slot_map) {}

  struct Result {
    std::vector<int32_t> index, slots;
    int32_t err;
    double ms;
  };

  IndexerTopkParams params(int32_t* out, int32_t* out_slots) const {
    IndexerTopkParams a;
    a.q = q.p;
    a.weights = w.p;
    a.weight_scale = in.weight_scale;
    a.tokens = in.tokens();
    a.heads = in.spec.heads;
    a.head_dim = kDim;
    a.positions = pos.p;
    a.ratio = 4;
    a.token_seq = seq.p;
    a.sequences = static_cast<int64_t>(in.key_count.size());
    a.keys = device_table(in.keys, mem.p);
    a.key_slots = key_slots.p;
    a.key_stride = in.spec.stride;
    a.key_count = key_count.p;
    a.topk = in.spec.topk;
    a.out_index = out;
    a.slot_map = slot_map.p;
    a.out_slots = out_slots;
    return a;
  }

  // split: through cuda::IndexerSplit, score() once and then select() twice, the outputs poisoned between.
  // dots: where the scoring's dots run (kCudaCores: the exact tier's kernel).
  Result run(int32_t max_keys = 0, bool split = false, cuda::IndexerDots dots = cuda::IndexerDots::kCudaCores) {
    const size_t n = static_cast<size_t>(in.tokens() * in.spec.topk);
    Dev<int32_t> out(std::vector<int32_t>(n, 0x7eadbeef)), out_slots(std::vector<int32_t>(n, 0x7eadbeef));
    Dev<int32_t> err(std::vector<int32_t>{0});
    const IndexerTopkParams a = params(out.p, out_slots.p);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    if (split) {
      cuda::IndexerSplit phases(a, err.p, dots, nullptr, max_keys);
      phases.score();
      phases.select();
      // Poisoned again: the second select() must write every output itself (its counters cleared).
      DSV4_CUDA_CHECK(cudaMemset(out.p, 0x7e, n * sizeof(int32_t)));
      DSV4_CUDA_CHECK(cudaMemset(out_slots.p, 0x7e, n * sizeof(int32_t)));
      phases.select();
    } else {
      cuda::indexer_topk(a, err.p, dots, nullptr, max_keys);
    }
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return {out.get(), out_slots.get(), err.get()[0], ms};
  }
};

// The first (token, rank) where two index lists differ, as text ("" when equal).
std::string first_diff(const std::vector<int32_t>& got, const std::vector<int32_t>& want, int topk) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i])
      return "token " + std::to_string(i / topk) + " rank " + std::to_string(i % topk) + ": got " +
             std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  }
  return "";
}

// `edit` changes the inputs (both backends see the change) before the runs.
void run_case(const Spec& s, uint32_t seed, int32_t max_keys = 0, const std::function<void(Inputs&)>& edit = {}) {
  SCOPED_TRACE(testing::Message() << "heads " << s.heads << " topk " << s.topk << " format "
                                  << kv_entry_format_name(s.format) << " tokens " << s.tokens.size() << " seed "
                                  << seed);
  Inputs in(s, seed);
  if (edit) edit(in);
  const auto [want, want_slots] = in.cpu_run();
  DeviceRun dev(in);
  const auto got = dev.run(max_keys);
  EXPECT_EQ(first_diff(got.index, want, s.topk), "");
  EXPECT_EQ(first_diff(got.slots, want_slots, s.topk), "");
  EXPECT_EQ(got.err, 0);
  const auto again = dev.run(max_keys);
  EXPECT_EQ(again.index, got.index) << "not reproducible run to run";
  EXPECT_EQ(again.slots, got.slots);
  std::printf("[indexer] heads %d topk %d tokens %zu: %.3f ms (second run)\n", s.heads, s.topk, s.tokens.size(),
              again.ms);
}

// Two sequences of 40 and 13 keys; prefill positions (some before the first key, some past the count)
// and decode positions, interleaved.
Spec tiny_spec(KvEntryFormat f) {
  return {4,
          8,
          f,
          {40, 13},
          48,
          {{0, 0},
           {0, 1},
           {0, 2},
           {0, 3},
           {1, 51},
           {0, 4},
           {0, 7},
           {0, 30},
           {0, 63},
           {1, 20},
           {0, 100},
           {0, 159},
           {0, 170},
           {1, 3},
           {1, 200}}};
}

TEST(CudaIndexer, MatchesCpuAtGoldenDims) {
  run_case(tiny_spec(KvEntryFormat::kIndexFp4), 1);
  run_case(tiny_spec(KvEntryFormat::kIndexFp4), 2, 40);  // with the caller's bound on eligible keys
}

TEST(CudaIndexer, MatchesCpuWithFp8AndBf16Keys) {
  run_case(tiny_spec(KvEntryFormat::kIndexFp8), 3);
  run_case(tiny_spec(KvEntryFormat::kBf16), 4);
}

// Three distinct keys: nearly every score ties, so the lower index must win everywhere.
TEST(CudaIndexer, BreaksTiesTowardTheLowerIndex) {
  Spec s = tiny_spec(KvEntryFormat::kIndexFp4);
  s.distinct = 3;
  run_case(s, 5);
  run_case({64, 512, KvEntryFormat::kIndexFp4, {4096}, 4096, {{0, 16383}, {0, 9000}, {0, 3000}}, 7}, 6);
}

// V4-Flash: 64 heads, top-512; one decode token at 128K context, four prefill tokens at 8K, and shorter ones.
TEST(CudaIndexer, MatchesCpuAtFlashDims) {
  run_case({64,
            512,
            KvEntryFormat::kIndexFp4,
            {32768, 2048},
            32768,
            {{0, 131071}, {1, 8188}, {1, 8189}, {1, 8190}, {1, 8191}, {1, 2100}, {1, 1000}, {0, 50}}},
           7);
}

// A key stride so wide that the scores are computed in several token groups.
TEST(CudaIndexer, MatchesCpuAcrossTokenGroups) {
  Spec s{4, 8, KvEntryFormat::kIndexFp4, {300}, 1 << 22, {}};
  for (int i = 0; i < 40; ++i) s.tokens.push_back({0, 37 * i});
  run_case(s, 8);
}

// One sequence of `keys` keys (stride `stride`, not a multiple of a 64-key tile or a 2048-score chunk);
// tokens whose eligible counts straddle topk and the chunk size, one with no key, and full rows.
Spec long_spec(int heads, int topk, KvEntryFormat f, int32_t keys, int32_t stride, int distinct) {
  Spec s{heads, topk, f, {keys}, stride, {}, distinct};
  for (const int32_t e : {keys, keys - 1, 4 * keys / 5, 4097, 2049, topk + 1, topk, topk - 1, 100, 0})
    s.tokens.push_back({0, 4 * e + 2});  // (pos + 1) / 4 = e
  return s;
}

// Rows of 37001 keys (wide histograms) and 20001 (cut by a pass over the row), top-2048 and top-512.
// With 5 or 1 distinct key vectors the tie at the cut spans many chunks and holds more indices than
// one chunk; with all keys distinct, bf16 scores still tie at the cut.
TEST(CudaIndexer, SelectsAcrossChunksWithMassTies) {
  for (const int32_t keys : {37001, 20001}) {
    run_case(long_spec(8, 2048, KvEntryFormat::kIndexFp4, keys, keys + 3, 5), 20 + keys);
    run_case(long_spec(8, 2048, KvEntryFormat::kIndexFp4, keys, keys + 3, 1), 21 + keys);
    run_case(long_spec(8, 512, KvEntryFormat::kIndexFp4, keys, keys, 0), 22 + keys);
    run_case(long_spec(4, 2048, KvEntryFormat::kIndexFp4, keys, keys, 0), 23 + keys);
  }
}

// Rows of one 2048-score chunk (decode at up to 8K tokens of context), selected in one CTA's shared
// memory: all keys distinct, five distinct vectors (mass ties at the cut), and the V4-Flash heads; with the
// cut taken in the selection's CTAs (plans of one or two chunks).
TEST(CudaIndexer, SelectsWithinOneChunk) {
  run_case(long_spec(8, 512, KvEntryFormat::kIndexFp4, 2000, 2048, 0), 34);
  run_case(long_spec(8, 512, KvEntryFormat::kIndexFp4, 2048, 2048, 5), 35);
  run_case(long_spec(64, 512, KvEntryFormat::kIndexFp4, 2048, 2048, 1), 36);
  run_case(long_spec(4, 2048, KvEntryFormat::kIndexFp4, 2047, 2047, 0), 37);
  // Key lists padded past one chunk (a recorded decode step's), rows of one chunk and of two in one plan.
  run_case(long_spec(64, 512, KvEntryFormat::kIndexFp4, 2048, 2112, 0), 38);
  run_case(long_spec(8, 512, KvEntryFormat::kIndexFp4, 4000, 4000, 5), 39);
}

// Decode's few tokens over long rows: a token's wide histogram in several copies (eight at one token, two
// at four), added up at the cut; keys all distinct, and five distinct vectors (mass ties at the cut).
TEST(CudaIndexer, WideHistogramCopiesAddUp) {
  for (const int distinct : {0, 5}) {
    for (const int tokens : {1, 2, 4}) {
      Spec s{8, 512, KvEntryFormat::kIndexFp4, {40000}, 40000, {}, distinct};
      for (int i = 0; i < tokens; ++i) s.tokens.push_back({0, 4 * (40000 - 1001 * i) + 2});
      run_case(s, static_cast<uint32_t>(40 + 10 * distinct + tokens));
    }
  }
}

// More than 64 tokens with long rows: a token group without wide histograms.
TEST(CudaIndexer, SelectsForManyTokensWithoutWideHistograms) {
  Spec s{4, 512, KvEntryFormat::kIndexFp4, {40000, 9000}, 40000, {}, 0};
  for (int i = 0; i < 70; ++i) s.tokens.push_back({i % 5 == 0 ? 1 : 0, 4 * (40000 - 577 * i) + 2});
  run_case(s, 30);
}

// Heads beyond one 64-head pass (padded), up to the 256 limit; fp8 and bf16 keys.
TEST(CudaIndexer, MatchesCpuWithManyHeads) {
  run_case(long_spec(100, 64, KvEntryFormat::kIndexFp8, 3001, 3001, 0), 31);
  run_case(long_spec(256, 128, KvEntryFormat::kBf16, 2500, 2600, 0), 32);
  run_case(long_spec(256, 128, KvEntryFormat::kIndexFp4, 2500, 2500, 40), 33);
}

// A key with a NaN block scale scores NaN, which ranks last (−inf), and its tile of 64 keys takes the
// mul + add path (its products are not exact); the others must still match the CPU.
TEST(CudaIndexer, RanksNanKeysLastOnTheExactPath) {
  const auto nan_scales = [](Inputs& in) {
    for (const int32_t j : {0, 70, 1000, 36999}) {
      const int32_t slot = in.key_slots[static_cast<size_t>(j)];
      in.keys.entry(slot)[kDim / 2 + j % 4] = 0xff;
    }
  };
  run_case(long_spec(64, 512, KvEntryFormat::kIndexFp4, 37001, 37001, 0), 34, 0, nan_scales);
  run_case(long_spec(8, 2048, KvEntryFormat::kIndexFp4, 37001, 37001, 3), 35, 0, nan_scales);
}

// A key slot outside the table is reported and ranks last (score −inf).
TEST(CudaIndexer, ReportsSlotOutsideTable) {
  Inputs in(tiny_spec(KvEntryFormat::kIndexFp4), 9);
  in.key_slots[5] = static_cast<int32_t>(in.keys.capacity);  // sequence 0, key 5
  DeviceRun dev(in);
  const auto got = dev.run();
  EXPECT_EQ(got.err, static_cast<int32_t>(cuda::DeviceError::kIndexerSlot));
  for (size_t t = 0; t < in.pos.size(); ++t) {
    const int64_t eligible = std::min<int64_t>(in.key_count[static_cast<size_t>(in.seq[t])], (in.pos[t] + 1) / 4);
    if (in.seq[t] != 0 || eligible <= in.spec.topk) continue;
    const auto row = got.index.begin() + static_cast<int64_t>(t) * in.spec.topk;
    EXPECT_EQ(std::find(row, row + in.spec.topk, 5), row + in.spec.topk) << "token " << t;
  }
}

// The benchmarks' split entry point: score() then select() (run twice: the selection counters are
// cleared per run) gives the CPU's output, with and without wide histograms and at the mass-tie path.
TEST(CudaIndexer, SplitScoreThenSelectMatchesCpu) {
  const Spec specs[] = {long_spec(64, 512, KvEntryFormat::kIndexFp4, 40000, 40000, 0),
                        long_spec(64, 2048, KvEntryFormat::kIndexFp4, 9000, 9000, 0),
                        long_spec(8, 300, KvEntryFormat::kIndexFp8, 20000, 20000, 5)};
  uint32_t seed = 900;
  for (const Spec& s : specs) {
    SCOPED_TRACE(testing::Message() << "topk " << s.topk << " keys " << s.key_count[0]);
    Inputs in(s, ++seed);
    const auto [want, want_slots] = in.cpu_run();
    DeviceRun dev(in);
    const auto got = dev.run(0, true);
    EXPECT_EQ(first_diff(got.index, want, s.topk), "");
    EXPECT_EQ(first_diff(got.slots, want_slots, s.topk), "");
    EXPECT_EQ(got.err, 0);
  }
}

// ---- the fast tier ----
// Its scores may differ from the exact ones by the rounding of differently summed dots, so its selection
// is judged against scores in double: ref_j = Σ_h bf16(relu(bf16(q_h·K_j))·w_h) with exact dots, each
// with a bound on how far either tier's score may lie from it (an ulp of each head's bf16 dot through
// its weight, an ulp of each term, the fp32 head sum's rounding, the score's bf16 ulp; twice that). A
// selection is right when no unselected eligible key's score can exceed a selected one's:
// max over unselected (ref − bound) <= min over selected (ref + bound). Where the tiers' scores agree
// the outputs do too, so at most 2% of the outputs may differ from the exact tier's.
double ulp_bf16(double x) {
  const double m = std::fabs(x);
  return m < 0x1p-126 ? 0x1p-133 : std::ldexp(1.0, std::ilogb(m) - 7);
}

struct RefScores {
  std::vector<double> score, bound;  // per eligible key of one token
};

RefScores reference_scores(const Inputs& in, size_t t) {
  const Spec& s = in.spec;
  const int32_t seq = in.seq[t];
  const int64_t eligible =
      std::max<int64_t>(0, std::min<int64_t>(in.key_count[static_cast<size_t>(seq)], (in.pos[t] + 1) / 4));
  std::vector<double> w(static_cast<size_t>(s.heads));
  for (int h = 0; h < s.heads; ++h)
    w[static_cast<size_t>(h)] =
        round_bf16(bf16_to_float(in.w[t * static_cast<size_t>(s.heads) + static_cast<size_t>(h)]) * in.weight_scale);
  RefScores r;
  std::vector<float> key(kDim);
  for (int64_t j = 0; j < eligible; ++j) {
    const int32_t slot = in.key_slots[static_cast<size_t>(seq * s.stride + j)];
    decode_kv_entry(s.format, {kDim, 0}, {in.keys.entry(slot), static_cast<size_t>(in.keys.entry_bytes)}, key);
    double total = 0, bound = 0, magnitude = 0;
    for (int h = 0; h < s.heads; ++h) {
      double dot = 0;
      for (int i = 0; i < kDim; ++i)
        dot += double{bf16_to_float(
                   in.q[(t * static_cast<size_t>(s.heads) + static_cast<size_t>(h)) * kDim + static_cast<size_t>(i)])} *
               key[static_cast<size_t>(i)];
      const double sh = round_bf16(static_cast<float>(dot)), wh = w[static_cast<size_t>(h)];
      const double term = round_bf16(static_cast<float>(std::max(sh, 0.0) * wh));
      total += term;
      magnitude += std::fabs(term);
      bound += ulp_bf16(sh) * std::fabs(wh) + ulp_bf16(term);
    }
    bound += s.heads * 0x1p-24 * magnitude + ulp_bf16(total);
    const bool finite = std::isfinite(total);
    r.score.push_back(finite ? total : -INFINITY);
    r.bound.push_back(finite ? 2 * bound : 0.0);
  }
  return r;
}

// One fast kernel's output against the CPU's (`want`) and, on the fast path, the reference scores.
void check_fast_kernel(const Inputs& in, DeviceRun& dev, bool split, cuda::IndexerDots dots,
                       const std::vector<int32_t>& want, const std::vector<RefScores>& refs) {
  SCOPED_TRACE(cuda::indexer_dots_name(dots));
  const Spec& s = in.spec;
  const auto got = dev.run(0, split, dots);
  EXPECT_EQ(got.err, 0);
  EXPECT_EQ(dev.run(0, split, dots).index, got.index) << "not reproducible run to run";
  if (refs.empty()) {
    EXPECT_EQ(first_diff(got.index, want, s.topk), "") << "the exact path's output, as the exact tier";
    return;
  }
  int64_t differ = 0;
  for (size_t t = 0; t < in.pos.size(); ++t) {
    SCOPED_TRACE(testing::Message() << "token " << t);
    const RefScores& ref = refs[t];
    const int64_t n = static_cast<int64_t>(ref.score.size()), k = std::min<int64_t>(n, s.topk);
    const int32_t* row = got.index.data() + t * static_cast<size_t>(s.topk);
    const int32_t* exact = want.data() + t * static_cast<size_t>(s.topk);
    std::vector<bool> chosen(static_cast<size_t>(n), false);
    double lowest_chosen = INFINITY;
    for (int64_t r = 0; r < s.topk; ++r) {
      const int32_t j = row[r];
      if (r >= k) {
        ASSERT_EQ(j, -1) << "rank " << r << " past the eligible keys";
        continue;
      }
      ASSERT_TRUE(j >= 0 && j < n && !chosen[static_cast<size_t>(j)]) << "rank " << r << ": index " << j;
      chosen[static_cast<size_t>(j)] = true;
      lowest_chosen = std::min(lowest_chosen, ref.score[static_cast<size_t>(j)] + ref.bound[static_cast<size_t>(j)]);
      differ += std::find(exact, exact + k, j) == exact + k;
    }
    for (int64_t j = 0; j < n; ++j) {
      if (chosen[static_cast<size_t>(j)]) continue;
      ASSERT_LE(ref.score[static_cast<size_t>(j)] - ref.bound[static_cast<size_t>(j)], lowest_chosen)
          << "key " << j << " left out above a chosen one";
    }
  }
  EXPECT_LE(differ, static_cast<int64_t>(0.02 * static_cast<double>(want.size())) + 1)
      << "outputs that differ from the exact tier's";
}

// The fast tier's output of both fast kernels (mma.sync and wgmma) for `in`: a valid top-k of scores within
// the bounds, reproducible, within 2% of the exact tier's (equal to it where the fast path does not apply:
// other key formats, over 64 heads). The CPU's output and the reference scores are made once.
void check_fast(const Inputs& in, DeviceRun& dev, bool split = false) {
  const Spec& s = in.spec;
  const std::vector<int32_t> want = in.cpu_run().first;
  const bool fast_path = s.format == KvEntryFormat::kIndexFp4 && s.heads <= 64;
  std::vector<RefScores> refs;
  for (size_t t = 0; fast_path && t < in.pos.size(); ++t) refs.push_back(reference_scores(in, t));
  for (const cuda::IndexerDots dots : {cuda::IndexerDots::kMmaSync, cuda::IndexerDots::kWgmma})
    check_fast_kernel(in, dev, split, dots, want, refs);
}

void run_fast_case(const Spec& s, uint32_t seed, const std::function<void(Inputs&)>& edit = {}) {
  SCOPED_TRACE(testing::Message() << "fast: heads " << s.heads << " topk " << s.topk << " format "
                                  << kv_entry_format_name(s.format) << " tokens " << s.tokens.size() << " seed "
                                  << seed);
  Inputs in(s, seed);
  if (edit) edit(in);
  DeviceRun dev(in);
  check_fast(in, dev);
}

TEST(CudaIndexerFast, SelectsWithinTheBoundAtGoldenAndFlashDims) {
  run_fast_case(tiny_spec(KvEntryFormat::kIndexFp4), 101);
  run_fast_case({64,
                 512,
                 KvEntryFormat::kIndexFp4,
                 {32768, 2048},
                 32768,
                 {{0, 131071}, {1, 8188}, {1, 8189}, {1, 8190}, {1, 8191}, {1, 2100}, {1, 1000}, {0, 50}}},
                102);
}

// Heads that leave a 16-row group part empty (40, 8) or whole groups empty (4); long rows with and
// without wide histograms; mass ties.
TEST(CudaIndexerFast, SelectsWithinTheBoundWithPaddedHeadsLongRowsAndTies) {
  run_fast_case(long_spec(40, 512, KvEntryFormat::kIndexFp4, 37001, 37001, 0), 103);
  run_fast_case(long_spec(8, 2048, KvEntryFormat::kIndexFp4, 20001, 20004, 5), 104);
  Spec s{4, 512, KvEntryFormat::kIndexFp4, {40000, 9000}, 40000, {}, 0};
  for (int i = 0; i < 70; ++i) s.tokens.push_back({i % 5 == 0 ? 1 : 0, 4 * (40000 - 577 * i) + 2});
  run_fast_case(s, 105);
}

// NaN block scales rank last; fp8 and bf16 keys and more than 64 heads keep the exact path.
TEST(CudaIndexerFast, RanksNanKeysLastAndKeepsTheExactPathElsewhere) {
  run_fast_case(long_spec(64, 512, KvEntryFormat::kIndexFp4, 9001, 9001, 0), 106, [](Inputs& in) {
    for (const int32_t j : {0, 70, 1000, 9000})
      in.keys.entry(in.key_slots[static_cast<size_t>(j)])[kDim / 2 + j % 4] = 0xff;
  });
  run_fast_case(tiny_spec(KvEntryFormat::kIndexFp8), 107);
  run_fast_case(tiny_spec(KvEntryFormat::kBf16), 108);
  run_fast_case(long_spec(100, 64, KvEntryFormat::kIndexFp4, 3001, 3001, 0), 109);
}

// The benchmarks' split entry point on the fast tier.
TEST(CudaIndexerFast, SplitScoreThenSelectIsWithinTheBound) {
  Inputs in(long_spec(64, 512, KvEntryFormat::kIndexFp4, 40000, 40000, 0), 110);
  DeviceRun dev(in);
  check_fast(in, dev, true);
}

}  // namespace
}  // namespace dsv4
