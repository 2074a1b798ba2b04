// The CUDA kernels at V4-Flash dims, one row per case, timed with device events (warm-up, median of
// repetitions, inputs rotated among copies so that no row runs from L2). Prints one JSON object per
// row with the bytes and FLOPs it is judged by; bench/peer_torch.py prints PyTorch's rows under the
// same names and bench/gpu_table.py joins both with the ceilings into one table.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_imma_skinny.h"
#include "backend/cuda/hyper_connection.h"
#include "backend/cuda/indexer.h"
#include "backend/rope.h"
#include "core/kv_entry.h"
#include "core/model_config.h"
#include "core/number_formats.h"

namespace dsv4 {
namespace {

constexpr double kRotateBytes = 256e6;  // rotate inputs until a row's working set exceeds L2 (50 MB) well

cuda::CudaDevice* g_dev = nullptr;

// Device buffers filled by tiling a random host block (distinct per kind): fast for GB-sized inputs.
enum class Fill { kBf16, kE4m3, kE2m1, kScale, kF32, kZero };

class Buffers {
 public:
  ~Buffers() {
    for (void* p : owned_) g_dev->release(p);
  }
  template <typename T>
  T* make(size_t count, Fill fill) {
    const size_t bytes = std::max<size_t>(count * sizeof(T), 16);
    void* p = g_dev->allocate(bytes);
    owned_.push_back(p);
    const std::vector<uint8_t>& block = pattern(fill);
    for (size_t at = 0; at < bytes; at += block.size())
      g_dev->to_device(static_cast<uint8_t*>(p) + at, block.data(), std::min(block.size(), bytes - at));
    return static_cast<T*>(p);
  }
  // Weights [n][k] of random codes (FP8, FP4 with per-32 scales) or values (bf16) in these buffers.
  Weight fp8(int64_t n, int64_t k) {
    return {WeightType::kFp8Block, make<uint8_t>(static_cast<size_t>(n * k), Fill::kE4m3),
            make<uint8_t>(static_cast<size_t>((n / 128) * (k / 128)), Fill::kScale), n, k};
  }
  Weight fp4(int64_t n, int64_t k) {
    return {WeightType::kFp4Block, make<uint8_t>(static_cast<size_t>(n * k / 2), Fill::kE2m1),
            make<uint8_t>(static_cast<size_t>(n * k / 32), Fill::kScale), n, k};
  }
  Weight bf16(int64_t n, int64_t k) {
    return Weight::bf16(make<uint16_t>(static_cast<size_t>(n * k), Fill::kBf16), n, k);
  }
  // A bf16 weight with an FP8 twin beside it (wo_a's form; random codes, not the bf16 values').
  Weight bf16_twin(int64_t n, int64_t k) {
    Weight w = bf16(n, k);
    w.fp8_twin = make<uint8_t>(static_cast<size_t>(n * k), Fill::kE4m3);
    w.fp8_twin_scale = make<uint8_t>(static_cast<size_t>((n / 128) * (k / 128)), Fill::kScale);
    return w;
  }
  template <typename T>
  T* upload(const std::vector<T>& v) {
    T* p = make<T>(v.size(), Fill::kZero);
    g_dev->to_device(p, v.data(), v.size() * sizeof(T));
    return p;
  }

 private:
  static const std::vector<uint8_t>& pattern(Fill f) {
    static std::vector<uint8_t> blocks[6];
    auto& b = blocks[static_cast<int>(f)];
    if (!b.empty()) return b;
    constexpr size_t kBlock = size_t{16} << 20;
    b.resize(kBlock);
    std::mt19937 rng(static_cast<uint32_t>(f) + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < kBlock; i += 4) {
      const uint32_t r = rng();
      for (size_t j = 0; j < 4; ++j) {
        uint8_t v = static_cast<uint8_t>(r >> (8 * j));
        if (f == Fill::kE4m3 && (v & 0x7f) == 0x7f) v ^= 1;  // no NaN codes
        if (f == Fill::kScale) v = static_cast<uint8_t>(120 + v % 8);
        if (f == Fill::kZero) v = 0;
        b[i + j] = v;
      }
      if (f == Fill::kBf16) {
        const uint16_t lo = float_to_bf16(normal(rng)), hi = float_to_bf16(normal(rng));
        std::memcpy(&b[i], &lo, 2);
        std::memcpy(&b[i + 2], &hi, 2);
      } else if (f == Fill::kF32) {
        const float v = normal(rng);
        std::memcpy(&b[i], &v, 4);
      }
    }
    return b;
  }
  std::vector<void*> owned_;
};

// Median ms of `variants` run round-robin (each uses its own inputs), after a warm-up.
// A call's cost inside a chain of back-to-back launches, as a decode step issues them (each launch
// overlapping the previous one's tail, as the model's dependent launches do): the median over reps of
// the mean over `chain` launches cycling through the variants.
double time_chain_ms(const std::vector<std::function<void()>>& variants, int chain = 16, int reps = 10) {
  cudaStream_t s = g_dev->stream();
  for (size_t i = 0; i < std::max<size_t>(3, variants.size()); ++i) variants[i % variants.size()]();
  g_dev->synchronize();
  cudaEvent_t a, b;
  DSV4_CUDA_CHECK(cudaEventCreate(&a));
  DSV4_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    DSV4_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < chain; ++i) variants[static_cast<size_t>(i) % variants.size()]();
    DSV4_CUDA_CHECK(cudaEventRecord(b, s));
    DSV4_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / chain);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One launch at a time from an idle stream (its launch latency included): the median over reps.
double time_ms(const std::vector<std::function<void()>>& variants, int reps = 20) {
  return time_chain_ms(variants, 1, reps);
}

void emit(const std::string& row, double ms, double bytes, double flops) {
  std::printf(
      "%s\n",
      nlohmann::json{{"row", row}, {"side", "dsv4"}, {"ms", ms}, {"bytes", bytes}, {"flops", flops}}.dump().c_str());
  std::fflush(stdout);
}

int copies_for(double bytes) { return static_cast<int>(std::clamp(std::ceil(kRotateBytes / bytes), 1.0, 16.0)); }

EntryTable table_of(uint8_t* base, int64_t entries, KvEntryFormat f, KvEntryDims dims) {
  return contiguous_table(base, entries, f, dims);
}

std::vector<int32_t> random_slots(size_t n, int64_t range, std::mt19937& rng) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(range));
  return v;
}

// Sparse attention at V4-Flash dims (64 heads of 512, 64 rope dims, the window's 128) over `pool` random
// attn-fp8 entries in `buf`: `tokens` queries, each with random window slots and n_cmp compressed ones.
constexpr int kAttnHeads = 64, kAttnDim = 512, kAttnRope = 64, kAttnWindow = 128;
SparseAttentionParams attention_case(Buffers& buf, int64_t tokens, int64_t pool, int64_t n_cmp, std::mt19937& rng) {
  const KvEntryDims dims{kAttnDim, kAttnRope};
  uint8_t* mem =
      buf.make<uint8_t>(static_cast<size_t>(pool * kv_entry_bytes(KvEntryFormat::kAttnFp8, dims)), Fill::kE4m3);
  SparseAttentionParams p;
  p.q = buf.make<uint16_t>(static_cast<size_t>(tokens * kAttnHeads * kAttnDim), Fill::kBf16);
  p.out = buf.make<uint16_t>(static_cast<size_t>(tokens * kAttnHeads * kAttnDim), Fill::kZero);
  p.tokens = tokens;
  p.heads = kAttnHeads;
  p.head_dim = kAttnDim;
  p.rope_dim = kAttnRope;
  p.sink = buf.make<float>(static_cast<size_t>(kAttnHeads), Fill::kF32);
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kAttnDim));
  p.window = p.compressed = table_of(mem, pool, KvEntryFormat::kAttnFp8, dims);
  p.window_slots = buf.upload(random_slots(static_cast<size_t>(tokens * kAttnWindow), pool, rng));
  p.window_width = kAttnWindow;
  p.compressed_slots = buf.upload(random_slots(static_cast<size_t>(tokens * n_cmp), pool, rng));
  p.compressed_width = static_cast<int32_t>(n_cmp);
  return p;
}

// (a') a prefill chunk's attention: `tokens` queries at the end of an 8K prompt, every list full (CSA: the
// window and the indexer's 512; HCA: the window and the prompt's 64 entries), slots drawn from the prompt's
// pool of entries (L2-resident, as the chunk's own keys and the prompt's compressed entries are).
// `table_slots` > 0: the tables claim that many slots, as a serving pool's do (the entries the lists name
// stay the same): what a call costs that grows with the pool, not the step.
// `lists`: random slots (the default), the prompt's own sliding windows (token i's window the 128 entries
// up to 8192 - tokens + i, as a chunk at the prompt's end names them; compressed slots random), or one list
// every token names (its rows hot in L1 and L2: a block's cost without the rows' copy from L2).
enum class AttnLists { kRandom, kWindows, kShared };
void set_attention_lists(Buffers& buf, SparseAttentionParams& p, int64_t ctx, AttnLists lists) {
  if (lists == AttnLists::kRandom) return;
  std::vector<int32_t> win(static_cast<size_t>(p.tokens * kAttnWindow));
  std::vector<int32_t> cmp(static_cast<size_t>(p.tokens * p.compressed_width));
  std::mt19937 rng(3);
  const auto first = random_slots(static_cast<size_t>(kAttnWindow + p.compressed_width), ctx, rng);
  for (int64_t i = 0; i < p.tokens; ++i) {
    for (int64_t g = 0; g < kAttnWindow; ++g) {
      const int64_t at = ctx - p.tokens + i - (kAttnWindow - 1) + g;  // before the prompt's start: a hole
      win[static_cast<size_t>(i * kAttnWindow + g)] =
          lists == AttnLists::kShared ? first[static_cast<size_t>(g)] : static_cast<int32_t>(std::max<int64_t>(-1, at));
    }
    for (int64_t g = 0; g < p.compressed_width; ++g)
      cmp[static_cast<size_t>(i * p.compressed_width + g)] =
          lists == AttnLists::kShared ? first[static_cast<size_t>(kAttnWindow + g)]
                                      : static_cast<int32_t>(ctx + rng() % static_cast<uint32_t>(ctx / 4));
  }
  p.window_slots = buf.upload(win);
  p.compressed_slots = buf.upload(cmp);
}
void attention_prefill_rows(Ops& ops, const std::string& suffix = "", int64_t table_slots = 0,
                            AttnLists lists = AttnLists::kRandom) {
  const int64_t ctx = 8192, pool = ctx + ctx / 4;
  const int64_t eb = kv_entry_bytes(KvEntryFormat::kAttnFp8, {kAttnDim, kAttnRope});
  std::mt19937 rng(2);
  for (const char* kind : {"csa", "hca"}) {
    const int64_t n_cmp = kind[0] == 'c' ? 512 : ctx / 128;
    for (const int64_t t : {512, 2048, 8192}) {
      Buffers buf;
      SparseAttentionParams p = attention_case(buf, t, pool, n_cmp, rng);
      set_attention_lists(buf, p, ctx, lists);
      if (table_slots > 0) p.window.capacity = p.compressed.capacity = table_slots;
      const double bytes = static_cast<double>(pool * eb + t * 2 * kAttnHeads * kAttnDim * 2);
      const double flops = 4.0 * static_cast<double>(t * kAttnHeads * kAttnDim * (kAttnWindow + n_cmp));
      emit(std::string("attn ") + kind + " prefill t" + std::to_string(t) + suffix,
           time_ms({[&ops, p] { ops.sparse_attention(p); }}), bytes, flops);
    }
  }
}

// (a) decode attention: window 128 + compressed (CSA: the indexer's 512, HCA: context/128).
void attention_rows(Ops& ops) {
  attention_prefill_rows(ops);
  const int heads = kAttnHeads, d = kAttnDim, window = kAttnWindow, topk = 512;
  const int64_t eb = kv_entry_bytes(KvEntryFormat::kAttnFp8, {kAttnDim, kAttnRope});
  std::mt19937 rng(1);
  for (const char* kind : {"csa", "hca"}) {
    const bool csa = kind[0] == 'c';
    for (const int64_t ctx : {8192, 131072, 1048576}) {
      for (const int64_t b : {1, 8, 32}) {
        const int64_t n_cmp = csa ? std::min<int64_t>(topk, ctx / 4) : ctx / 128;
        const int64_t pool = b * (window + (csa ? ctx / 4 : ctx / 128));
        if (static_cast<double>(pool * eb) > 40e9) continue;
        Buffers buf;
        const int copies = copies_for(static_cast<double>(pool * eb));
        std::vector<std::function<void()>> variants;
        for (int c = 0; c < copies; ++c) {
          const SparseAttentionParams p = attention_case(buf, b, pool, n_cmp, rng);
          variants.push_back([&ops, p] { ops.sparse_attention(p); });
        }
        const double bytes = static_cast<double>(b * ((window + n_cmp) * eb + 2 * heads * d * 2));
        const double flops = 4.0 * static_cast<double>(b * heads * d * (window + n_cmp));
        emit(std::string("attn ") + kind + " b" + std::to_string(b) + " ctx" + std::to_string(ctx), time_ms(variants),
             bytes, flops);
      }
    }
  }
}

// (b) indexer scoring + top-512 over FP4 keys.
// FP4 key entries [64 B e2m1][4 ue8m0] with random codes and scale bytes 120..127 (2^-7 .. 1), as the
// compressor's quantisation makes them. Random scale bytes (`wild`: up to 2^128 and NaN) put some product
// q·k out of the normal range in every tile, so every tile takes the exact mul + add fallback and most
// scores are ±inf (mass ties): the "wild-scales" row tracks that path, the others what real keys take.
uint8_t* fp4_keys(Buffers& buf, int64_t entries, int64_t eb, bool wild, uint32_t seed) {
  if (wild) return buf.make<uint8_t>(static_cast<size_t>(entries * eb), Fill::kE2m1);
  std::mt19937 rng(seed);
  std::vector<uint8_t> block(static_cast<size_t>(std::min<int64_t>(entries, 65536) * eb));
  for (size_t i = 0; i < block.size(); ++i) {
    const bool scale = static_cast<int64_t>(i % static_cast<size_t>(eb)) >= eb - 4;
    block[i] = static_cast<uint8_t>(scale ? 120 + rng() % 8 : rng());
  }
  uint8_t* p = buf.make<uint8_t>(static_cast<size_t>(entries * eb), Fill::kZero);
  const size_t bytes = static_cast<size_t>(entries * eb);
  for (size_t at = 0; at < bytes; at += block.size())
    g_dev->to_device(p + at, block.data(), std::min(block.size(), bytes - at));
  return p;
}

// Rows per (batch, context): "indexer bB ctxC" the whole op; "... scores" its scoring kernel alone (with
// the score histograms, and the memset that clears them); "... select" its selection alone (cut,
// compaction, sorted output) on scores made once beforehand, through cuda::IndexerSplit, which runs the
// same kernels as the op. Whole op ≈ scores + select + the scratch allocation. `dots`: where the ops'
// scoring runs (the split runs the same kernel as the op); its rows carry the suffix.
void indexer_rows(Ops& ops, cuda::IndexerDots dots, const std::string& suffix) {
  const int heads = 64, d = 128, topk = 512;
  const KvEntryDims dims{d, 0};
  const int64_t eb = kv_entry_bytes(KvEntryFormat::kIndexFp4, dims);
  struct Case {
    int64_t ctx, b;
    bool wild;
  };
  const Case cases[] = {{131072, 1, false},  {131072, 8, false},  {131072, 32, false},
                        {1048576, 1, false}, {1048576, 8, false}, {1048576, 1, true}};
  for (const Case& cs : cases) {
    const int64_t ctx = cs.ctx, b = cs.b, n = ctx / 4;
    Buffers buf;
    const int copies = copies_for(static_cast<double>(b * n * eb));
    std::vector<std::function<void()>> variants, score_variants, select_variants;
    std::vector<std::unique_ptr<cuda::IndexerSplit>> splits;
    std::vector<int32_t> key_slots(static_cast<size_t>(b * n)), seq(static_cast<size_t>(b)),
        pos(static_cast<size_t>(b), static_cast<int32_t>(ctx - 1)),
        count(static_cast<size_t>(b), static_cast<int32_t>(n));
    for (int64_t i = 0; i < b * n; ++i) key_slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    for (int64_t s = 0; s < b; ++s) seq[static_cast<size_t>(s)] = static_cast<int32_t>(s);
    for (int c = 0; c < copies; ++c) {
      uint8_t* mem = fp4_keys(buf, b * n, eb, cs.wild, static_cast<uint32_t>(c + 1));
      IndexerTopkParams p;
      p.q = buf.make<uint16_t>(static_cast<size_t>(b * heads * d), Fill::kBf16);
      p.weights = buf.make<uint16_t>(static_cast<size_t>(b * heads), Fill::kBf16);
      p.weight_scale = 1.0f / std::sqrt(static_cast<float>(d * heads));
      p.tokens = b;
      p.heads = heads;
      p.head_dim = d;
      p.positions = buf.upload(pos);
      p.ratio = 4;
      p.token_seq = buf.upload(seq);
      p.sequences = b;
      p.keys = table_of(mem, b * n, KvEntryFormat::kIndexFp4, dims);
      p.key_slots = buf.upload(key_slots);
      p.key_stride = static_cast<int32_t>(n);
      p.key_count = buf.upload(count);
      p.topk = topk;
      p.out_index = buf.make<int32_t>(static_cast<size_t>(b * topk), Fill::kZero);
      variants.push_back([&ops, p] { ops.indexer_topk(p); });
      if (cs.wild) continue;
      splits.push_back(std::make_unique<cuda::IndexerSplit>(p, g_dev->error_flag(), dots, g_dev->stream()));
      cuda::IndexerSplit* split = splits.back().get();
      split->score();  // select() reads these scores
      score_variants.push_back([split] { split->score(); });
      select_variants.push_back([split] { split->select(); });
    }
    const std::string row = "indexer b" + std::to_string(b) + " ctx" + std::to_string(ctx) + suffix;
    const double bytes = static_cast<double>(b * n * eb), flops = 2.0 * static_cast<double>(b * heads * n * d);
    emit(cs.wild ? row + " wild-scales" : row, time_ms(variants), bytes, flops);
    if (cs.wild) continue;
    emit(row + " scores", time_ms(score_variants), bytes, flops);
    emit(row + " select", time_ms(select_variants), static_cast<double>(b * n * 4), 0.0);
  }
}

// (c) the fused compressor of a CSA layer at a block boundary: step (fp32 GEMMs + state) and emit.
void compressor_rows(Ops& ops, const std::string& suffix = "", std::initializer_list<int64_t> batches = {1, 32}) {
  const int64_t dim = 4096;
  const int dc = 512, ratio = 4, c = 2;
  const int64_t cd = c * dc;
  const KvEntryDims sdims{static_cast<int>(2 * cd), 0}, odims{dc, 64};
  const ModelConfig flash = v4_flash_config();
  for (const int64_t b : batches) {
    Buffers buf;
    std::vector<int32_t> pos(static_cast<size_t>(b)), state_slots(static_cast<size_t>(b)),
        blocks(static_cast<size_t>(b)), rows(static_cast<size_t>(b * c * ratio)), out_slots(static_cast<size_t>(b));
    for (int64_t t = 0; t < b; ++t) {
      pos[static_cast<size_t>(t)] = static_cast<int32_t>(4 * t + 3);
      state_slots[static_cast<size_t>(t)] = static_cast<int32_t>(t * c * ratio + c * ratio - 1);
      blocks[static_cast<size_t>(t)] = static_cast<int32_t>(t);
      for (int r = 0; r < c * ratio; ++r)
        rows[static_cast<size_t>(t * c * ratio + r)] = static_cast<int32_t>(t * c * ratio + r);
      out_slots[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    }
    uint8_t* state =
        buf.make<uint8_t>(static_cast<size_t>(b * c * ratio * kv_entry_bytes(KvEntryFormat::kF32, sdims)), Fill::kZero);
    uint8_t* out =
        buf.make<uint8_t>(static_cast<size_t>(b * kv_entry_bytes(KvEntryFormat::kAttnFp8, odims)), Fill::kZero);
    CompressorStepParams st;
    st.x = buf.make<uint16_t>(static_cast<size_t>(b * dim), Fill::kBf16);
    st.tokens = b;
    st.dim = dim;
    st.positions = buf.upload(pos);
    st.wkv = buf.bf16(cd, dim);
    st.wgate = buf.bf16(cd, dim);
    st.ape = buf.make<float>(static_cast<size_t>(ratio * cd), Fill::kF32);
    st.ratio = ratio;
    st.head_dim = dc;
    st.state = table_of(state, b * c * ratio, KvEntryFormat::kF32, sdims);
    st.state_slots = buf.upload(state_slots);
    CompressorEmitParams em;
    em.entries = b;
    em.block_index = buf.upload(blocks);
    em.rows = buf.upload(rows);
    em.state = st.state;
    em.ratio = ratio;
    em.head_dim = dc;
    em.rope_dim = 64;
    em.norm_weight = buf.make<uint16_t>(static_cast<size_t>(dc), Fill::kBf16);
    em.rope = rope_config(flash, 4);
    em.out = table_of(out, b, KvEntryFormat::kAttnFp8, odims);
    em.out_slots = buf.upload(out_slots);
    const double bytes = 2.0 * cd * dim * 2 + static_cast<double>(b * c * ratio * 2 * cd * 4);
    emit("compressor" + suffix + " b" + std::to_string(b), time_ms({[&] {
           ops.compressor_step(st);
           ops.compressor_emit(em);
         }}),
         bytes, 2.0 * static_cast<double>(b * 2 * cd * dim));
  }
}

// (d) FP8 GEMMs at the V4-Flash shapes, timed in chains of launches (time_chain_ms) over weight
// copies that together exceed L2.
// suffix names the FP8 GEMM mode of ops ("" for the default exact kernel); ms the row counts.
// `only`: those weights (by name), else all.
void gemm_rows(Ops& ops, const std::string& suffix, std::initializer_list<int64_t> ms = {1, 32, 256, 8192},
               std::initializer_list<std::string_view> only = {}) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> shapes[] = {
      {"wq_a", {1024, 4096}}, {"wq_b", {32768, 1024}},     {"wkv", {512, 4096}},
      {"wo_b", {4096, 8192}}, {"shared_w1", {2048, 4096}}, {"shared_w2", {4096, 2048}}};
  for (const auto& [name, nk] : shapes) {
    if (only.size() > 0 && std::find(only.begin(), only.end(), name) == only.end()) continue;
    const auto [n, k] = nk;
    for (const int64_t m : ms) {
      Buffers buf;
      const double wbytes = static_cast<double>(n * k + (n / 128) * (k / 128));
      std::vector<std::function<void()>> variants;
      for (int c = 0; c < copies_for(wbytes + static_cast<double>(m * k * 2)); ++c) {
        LinearParams p;
        p.x = buf.make<uint16_t>(static_cast<size_t>(m * k), Fill::kBf16);
        p.rows = m;
        p.w = buf.fp8(n, k);
        p.y = buf.make<uint16_t>(static_cast<size_t>(m * n), Fill::kZero);
        variants.push_back([&ops, p] { ops.linear(p); });
      }
      emit(std::string("gemm ") + name + suffix + " m" + std::to_string(m), time_chain_ms(variants),
           wbytes + static_cast<double>(m * k * 2 + m * n * 2), 2.0 * static_cast<double>(m * n * k));
      // The op's first pass alone where it is a launch of its own (the rows cuBLASLt takes): the peer's
      // _scaled_mm is handed codes, so the op less this row is the part to compare with it.
      if (m >= 256) {
        auto* codes = buf.make<uint8_t>(static_cast<size_t>(m * k), Fill::kZero);
        auto* scales = buf.make<float>(static_cast<size_t>(m * (k / 128)), Fill::kZero);
        const uint16_t* x = buf.make<uint16_t>(static_cast<size_t>(m * k), Fill::kBf16);
        emit(std::string("gemm ") + name + suffix + " m" + std::to_string(m) + " quantize",
             time_chain_ms({[=] { cuda::quantize_act(x, m, k, 0, codes, scales, m, g_dev->stream()); }}),
             static_cast<double>(m * k * 3 + m * (k / 128) * 4), 0);
      }
    }
  }
}

// wo_a at V4-Flash dims (8 groups of 1024 x 4096, bf16 with its FP8 twin, or without it), in chains over
// copies; judged by the bytes read (the twin's, or the bf16 weight's).
void wo_a_rows(Ops& ops, const std::string& suffix, std::initializer_list<int64_t> ms, bool twin) {
  const int64_t n = 8192, kg = 4096, groups = 8;
  const double bytes = twin ? static_cast<double>(n * kg + (n / 128) * (kg / 128)) : 2.0 * static_cast<double>(n * kg);
  for (const int64_t m : ms) {
    Buffers buf;
    std::vector<std::function<void()>> variants;
    for (int c = 0; c < copies_for(bytes); ++c) {
      LinearParams p;
      p.x = buf.make<uint16_t>(static_cast<size_t>(m * kg * groups), Fill::kBf16);
      p.rows = m;
      p.groups = static_cast<int>(groups);
      p.w = twin ? buf.bf16_twin(n, kg) : buf.bf16(n, kg);
      p.y = buf.make<uint16_t>(static_cast<size_t>(m * n), Fill::kZero);
      variants.push_back([&ops, p] { ops.linear(p); });
    }
    emit("wo_a" + suffix + " m" + std::to_string(m), time_chain_ms(variants), bytes,
         2.0 * static_cast<double>(m * n * kg));
  }
}

// (e) the FP4 MoE (256 experts, top-6, shared expert) at batch 1/32/256 (and more, if given); fewer
// experts as in the flash-attn preset (32) put more rows on each.
void moe_rows(Ops& ops, const std::string& suffix, std::initializer_list<int64_t> batches = {1, 32, 256},
              int experts = 256, bool fp8_experts = false) {
  const int topk = 6;
  const int64_t dim = 4096, inter = 2048;
  Buffers buf;
  // fp8_experts: the routed experts as FP8 blocks (what the wgmma kernel reaches without FP4's widening).
  auto expert = [&](int64_t rows, int64_t cols) { return fp8_experts ? buf.fp8(rows, cols) : buf.fp4(rows, cols); };
  std::vector<Weight> w1, w2, w3;
  for (int e = 0; e < experts; ++e) {
    w1.push_back(expert(inter, dim));
    w3.push_back(expert(inter, dim));
    w2.push_back(expert(dim, inter));
  }
  const Weight s1 = buf.fp8(inter, dim), s3 = buf.fp8(inter, dim), s2 = buf.fp8(dim, inter);
  const double per_expert =
      3.0 * static_cast<double>(fp8_experts ? inter * dim + inter * dim / 16384 : inter * dim / 2 + inter * dim / 32);
  std::mt19937 rng(5);
  for (const int64_t b : batches) {
    std::vector<int32_t> idx;
    for (int64_t t = 0; t < b; ++t) {
      std::vector<int32_t> all(experts);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      idx.insert(idx.end(), all.begin(), all.begin() + topk);
    }
    MoeExpertsParams p;
    p.x = buf.make<uint16_t>(static_cast<size_t>(b * dim), Fill::kBf16);
    p.tokens = b;
    p.dim = dim;
    p.inter_dim = inter;
    p.indices = buf.upload(idx);
    p.weights = buf.make<float>(static_cast<size_t>(b * topk), Fill::kF32);
    p.topk = topk;
    p.experts = experts;
    p.w1 = w1.data();
    p.w3 = w3.data();
    p.w2 = w2.data();
    p.shared_w1 = s1;
    p.shared_w3 = s3;
    p.shared_w2 = s2;
    p.swiglu_limit = 10.0f;
    p.y = buf.make<uint16_t>(static_cast<size_t>(b * dim), Fill::kZero);
    const double touched = static_cast<double>(std::min<int64_t>(experts, b * topk));
    emit("moe" + suffix + " b" + std::to_string(b), time_chain_ms({[&] { ops.moe_experts(p); }}, 4),
         touched * per_expert + 3.0 * static_cast<double>(inter * dim),
         2.0 * static_cast<double>(b * (topk + 1) * 3 * inter * dim));
  }
}

// (f) A layer's GEMMs at V4-Flash dims (M2.1), one CUDA graph a row: attention's projections (wq_a, wq_b,
// wkv, wo_a from its FP8 twin, wo_b), the compressor's bf16 pair (ratio 4: 1024 wide; ratio 128: 512, as
// two calls), the indexer's (CSA only: its wq_b 8192 x 1024 FP8, weights_proj 64 x 4096 bf16, its
// compressor's 256-wide pair), the MoE gate and the experts (256 FP4 experts, top-6, routing and SwiGLU
// included, the FP8 shared expert). Recorded once after an eager run, then replayed: the sequence's time
// against its bytes (weights touched and activations) and FLOPs, at decode and prefill token counts.
void layer_gemm_rows(Ops& ops, std::initializer_list<int64_t> token_counts) {
  const int64_t D = 4096, Q = 1024, HD = 512, QW = 64 * 512, O = 8 * 1024, I = 2048, IQ = 64 * 128;
  const int E = 256, topk = 6;
  Buffers buf;
  double dense_bytes[2] = {0, 0}, dense_flops_per_token[2] = {0, 0};  // [CSA, HCA]
  const Weight wq_a = buf.fp8(Q, D), wq_b = buf.fp8(QW, Q), wkv = buf.fp8(HD, D), wo_b = buf.fp8(D, O);
  const Weight wo_a = buf.bf16_twin(O, QW / 8);
  const Weight comp4[2] = {buf.bf16(2 * HD, D), buf.bf16(2 * HD, D)}, comp128[2] = {buf.bf16(HD, D), buf.bf16(HD, D)};
  const Weight idx_wq_b = buf.fp8(IQ, Q), idx_wp = buf.bf16(64, D), idx_comp[2] = {buf.bf16(256, D), buf.bf16(256, D)};
  const Weight gate = buf.bf16(E, D), s1 = buf.fp8(I, D), s3 = buf.fp8(I, D), s2 = buf.fp8(D, I);
  std::vector<Weight> w1, w3, w2;
  for (int e = 0; e < E; ++e) {
    w1.push_back(buf.fp4(I, D));
    w3.push_back(buf.fp4(I, D));
    w2.push_back(buf.fp4(D, I));
  }
  // The dense calls' weight bytes and FLOPs a token, per layer kind.
  auto count = [&](const Weight& w, int kind_mask) {
    const double n = static_cast<double>(w.rows), k = static_cast<double>(w.cols);
    const double bytes = w.type == WeightType::kFp8Block ? n * k : w.fp8_twin ? n * k : 2.0 * n * k;
    for (int kind = 0; kind < 2; ++kind) {
      if (!(kind_mask >> kind & 1)) continue;
      dense_bytes[kind] += bytes;
      dense_flops_per_token[kind] += 2.0 * n * k;
    }
  };
  for (const Weight* w : {&wq_a, &wq_b, &wkv, &wo_b, &wo_a, &gate}) count(*w, 3);
  for (const Weight& w : comp4) count(w, 1);
  for (const Weight& w : comp128) count(w, 2);
  for (const Weight* w : {&idx_wq_b, &idx_wp, &idx_comp[0], &idx_comp[1]}) count(*w, 1);
  const double expert_bytes = 3.0 * static_cast<double>(I * D / 2 + I * D / 32), shared_bytes = 3.0 * I * D;
  for (const int64_t T : token_counts) {
    Buffers act;
    const auto rows16 = [&](int64_t cols) { return act.make<uint16_t>(static_cast<size_t>(T * cols), Fill::kBf16); };
    const auto rows32 = [&](int64_t cols) { return act.make<float>(static_cast<size_t>(T * cols), Fill::kZero); };
    uint16_t *x = rows16(D), *qa = rows16(Q), *q = rows16(QW), *kv = rows16(HD), *o = rows16(QW), *oa = rows16(O),
             *y = rows16(D), *iq = rows16(IQ), *iw = rows16(64), *moe_y = rows16(D);
    float *ca = rows32(2 * HD), *cb = rows32(2 * HD);
    auto* indices = act.make<int32_t>(static_cast<size_t>(T * topk), Fill::kZero);
    auto* weights = act.make<float>(static_cast<size_t>(T * topk), Fill::kZero);
    auto linear = [&](const uint16_t* in, const Weight& w, void* out, ActType t = ActType::kBF16, int groups = 1) {
      LinearParams p;
      p.x = in, p.rows = T, p.w = w, p.y = out, p.y_type = t, p.groups = groups;
      ops.linear(p);
    };
    MoeGateParams g;
    g.x = x, g.tokens = T, g.dim = D, g.weight = gate, g.experts = E, g.topk = topk, g.route_scale = 1.5f;
    g.indices = indices, g.weights = weights;
    MoeExpertsParams m;
    m.x = x, m.tokens = T, m.dim = D, m.inter_dim = I, m.indices = indices, m.weights = weights, m.topk = topk;
    m.experts = E, m.w1 = w1.data(), m.w3 = w3.data(), m.w2 = w2.data();
    m.shared_w1 = s1, m.shared_w3 = s3, m.shared_w2 = s2, m.swiglu_limit = 10.0f, m.y = moe_y;
    for (const bool csa : {true, false}) {
      const std::function<void()> body = [&] {
        linear(x, wq_a, qa);
        linear(qa, wq_b, q);
        linear(x, wkv, kv);
        const Weight* comp = csa ? comp4 : comp128;
        linear(x, comp[0], ca, ActType::kF32);
        linear(x, comp[1], cb, ActType::kF32);
        if (csa) {
          linear(qa, idx_wq_b, iq);
          linear(x, idx_wp, iw);
          linear(x, idx_comp[0], ca, ActType::kF32);
          linear(x, idx_comp[1], cb, ActType::kF32);
        }
        linear(o, wo_a, oa, ActType::kBF16, 8);
        linear(oa, wo_b, y);
        ops.moe_gate(g);
        ops.moe_experts(m);
      };
      body();  // sizes the ops' scratch before the recording
      g_dev->synchronize();
      g_dev->begin_recording();
      body();
      const std::unique_ptr<Device::Recording> graph = g_dev->end_recording();
      const double touched = static_cast<double>(std::min<int64_t>(E, T * topk));
      const double bytes = dense_bytes[csa ? 0 : 1] + touched * expert_bytes + shared_bytes +
                           static_cast<double>(T) * 2.0 * static_cast<double>(2 * D + Q + QW + O);
      const double flops = static_cast<double>(T) *
                           (dense_flops_per_token[csa ? 0 : 1] + 2.0 * (topk + 1) * 3.0 * static_cast<double>(I * D));
      emit(std::string("layer gemms ") + (csa ? "csa" : "hca") + " t" + std::to_string(T),
           time_ms({[&] { g_dev->replay(*graph); }}), bytes, flops);
    }
  }
}

// hc_post at V4-Flash dims (hc 4, dim 4096), in place as the model runs it: memory-bound (x and the four
// streams read, the streams written).
void hc_post_rows(Ops& ops) {
  const int hc = 4;
  const int64_t dim = 4096;
  Buffers buf;
  for (const int64_t t : {1, 32, 2048, 8192}) {
    std::vector<std::function<void()>> variants;
    const double bytes = 2.0 * t * dim + 4.0 * t * hc * dim;
    for (int c = 0; c < copies_for(bytes); ++c) {
      uint16_t* h = buf.make<uint16_t>(static_cast<size_t>(t * hc * dim), Fill::kBf16);
      const HcPostParams p{buf.make<uint16_t>(static_cast<size_t>(t * dim), Fill::kBf16),
                           h,
                           buf.make<float>(static_cast<size_t>(t * hc), Fill::kF32),
                           buf.make<float>(static_cast<size_t>(t * hc * hc), Fill::kF32),
                           h,
                           t,
                           hc,
                           dim};
      variants.push_back([&ops, p] { ops.hc_post(p); });
    }
    emit("hc_post t" + std::to_string(t), time_ms(variants), bytes, 0.0);
  }
}

// hc_pre at V4-Flash dims (hc 4, dim 4096: 24 mix outputs over 16,384 columns), decode to prefill
// token counts. Judged by bytes (fn, h, x) and its true-fp32 mix FLOPs; few tokens are bound by the
// reference's sequential chain (16,384 dependent adds per output), not by either.
void hc_rows(Ops& ops, const std::string& suffix, bool out_norm = false,
             const std::vector<int64_t>& tokens = {1, 4, 32, 2048}) {
  const int hc = 4, mix = (2 + hc) * hc;
  const int64_t dim = 4096, width = hc * dim;
  Buffers buf;
  for (const int64_t t : tokens) {
    std::vector<std::function<void()>> variants;
    const double bytes = 4.0 * mix * width + 2.0 * t * width + 2.0 * t * dim;
    for (int c = 0; c < copies_for(bytes); ++c) {
      HcPreParams p;
      p.h = buf.make<uint16_t>(static_cast<size_t>(t * width), Fill::kBf16);
      p.tokens = t;
      p.hc = hc;
      p.dim = dim;
      p.fn = buf.make<float>(static_cast<size_t>(mix * width), Fill::kF32);
      p.scale = buf.make<float>(3, Fill::kF32);
      p.base = buf.make<float>(static_cast<size_t>(mix), Fill::kF32);
      p.x = buf.make<uint16_t>(static_cast<size_t>(t * dim), Fill::kZero);
      p.post = buf.make<float>(static_cast<size_t>(t * hc), Fill::kZero);
      p.comb = buf.make<float>(static_cast<size_t>(t * hc * hc), Fill::kZero);
      if (out_norm) p.out_norm = buf.make<uint16_t>(static_cast<size_t>(dim), Fill::kBf16);
      variants.push_back([&ops, p] { ops.hc_pre(p); });
    }
    emit("hc_pre" + suffix + " t" + std::to_string(t), time_ms(variants), bytes, 2.0 * t * mix * width);
  }
}

// (h) the KV host tier's restores: `bytes` of pinned host pages of one size, every other page (no two
// adjacent, as a prefix's layer pages lie), into device pages on the copy stream, from the call until
// landed() says so (host wall time, as the engine waits); Device::copy_many's kernel (page_copy.h)
// against one contiguous copy.
void kv_restore_rows() {
  constexpr size_t kBytes = size_t{16} << 20;
  for (const size_t page : {size_t{400}, size_t{4096}, size_t{17216}}) {
    const size_t n = kBytes / page;
    auto* host = static_cast<std::byte*>(g_dev->allocate_pinned(2 * n * page));
    auto* dev = static_cast<std::byte*>(g_dev->allocate(2 * n * page));
    std::memset(host, 1, 2 * n * page);
    std::vector<Device::Copy> pages(n);
    for (size_t i = 0; i < n; ++i) pages[i] = {dev + 2 * i * page, host + 2 * i * page, page};
    const Device::Copy whole{dev, host, n * page};
    const auto time = [&](auto&& issue) {
      std::vector<double> ms;
      for (int r = 0; r < 7; ++r) {
        g_dev->synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        g_dev->begin_background();
        issue();
        const uint64_t ticket = g_dev->end_background();
        while (!g_dev->landed(ticket)) {
        }
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    const std::string size = std::to_string(page) + " B pages";
    const auto bytes = static_cast<double>(n * page);
    emit("kv restore " + size + ", kernel", time([&] { g_dev->copy_many(pages); }), bytes, 0);
    emit("kv restore " + size + ", one contiguous copy", time([&] { g_dev->copy_many({&whole, 1}); }), bytes, 0);
    g_dev->synchronize();
    g_dev->release(dev);
    g_dev->release_pinned(host);
  }
}

}  // namespace
}  // namespace dsv4

int main() {
  using namespace dsv4;
  cuda::CudaDevice dev(0);
  g_dev = &dev;
  cuda::CudaOps ops(dev, cuda::GemmPolicy::from_env(Numerics::kExact));
  cuda::CudaOps fast_ops(dev, cuda::GemmPolicy::from_env(Numerics::kFast));
  std::printf("%s\n", nlohmann::json{{"row", "device"}, {"side", "dsv4"}, {"name", dev.name()}}.dump().c_str());
  // DSV4_KERNELS (comma list of gemm, fast, attention, indexer, indexer-fast, compressor, moe, hc, hc-chain,
  // hc-ring, hc-fast, imma-decode, simt, wgmma, wgmma-few, gemv, gemv-parts, gemv-m32, wo-a, compressor-fast,
  // attention-prefill, moe-decode, layer-gemms, kv-restore): only those rows. "fast": the GEMM, MoE and hc_pre rows on
  // the fast tier (suffix " fast"); the others are the exact tier's. Unset: the M1.8 table's families (the defaults'
  // rows); the experiments' families only when named.
  const char* set = std::getenv("DSV4_KERNELS");
  const std::string only = "," + std::string(set ? set : "gemm,fast,attention,indexer,compressor,moe,hc") + ",";
  auto want = [&only](const char* family) { return only.find("," + std::string(family) + ",") != std::string::npos; };
  // Fast- and exact-tier variants, each on its own ops made with the policy's field changed.
  const auto ops_with = [&](Numerics tier, auto&& change) {
    cuda::GemmPolicy p = cuda::GemmPolicy::from_env(tier);
    change(p);
    return std::make_unique<cuda::CudaOps>(dev, p);
  };
  const auto fast_with = [&](auto&& change) { return ops_with(Numerics::kFast, change); };
  const auto exact_with = [&](auto&& change) { return ops_with(Numerics::kExact, change); };
  if (want("gemm")) gemm_rows(ops, "");
  if (want("fast")) {
    gemm_rows(fast_ops, " fast");
    moe_rows(fast_ops, " fast", {1, 8, 32, 256, 8192});
    moe_rows(fast_ops, " e32 fast", {8, 32, 8192}, 32);
    moe_rows(fast_ops, " e32 fp8 fast", {8192}, 32, true);
    // FP4 experts widened in shared memory by every CTA, against the default (above: widened once a
    // call from prewiden_min_rows rows an expert).
    const auto in_smem = fast_with([](cuda::GemmPolicy& p) { p.fp4_prewiden = false; });
    moe_rows(*in_smem, " fast in-smem", {8192});
    moe_rows(*in_smem, " e32 fast in-smem", {8192}, 32);
    hc_rows(fast_ops, " fast");
    // With the sublayer's norm: fused into the finishing kernel, and apart (finish, then rms_norm).
    for (const bool fused : {true, false}) {
      const auto norm_ops = fast_with([fused](cuda::GemmPolicy& p) { p.hc_fused_norm = fused; });
      hc_rows(*norm_ops, fused ? " fast norm" : " fast norm apart", true);
    }
    hc_post_rows(fast_ops);
    indexer_rows(fast_ops, cuda::GemmPolicy::from_env(Numerics::kFast).indexer_dots, " fast");
  }
  if (want("attention")) attention_rows(ops);
  if (want("attention-prefill")) {  // for Nsight: its first launches are CSA t512's
    attention_prefill_rows(ops);    // the shadow from the policy's tokens on
    attention_prefill_rows(*fast_with([](cuda::GemmPolicy& p) { p.attention_shadow_min_tokens = 0; }), " no-shadow");
    // A V4-Flash-shaped cache in ~95 GB of pools gives its c4.kv table ~141M slots (`dsv4 kv-plan`).
    attention_prefill_rows(ops, " 141M-slot tables", 141'000'000);
    // Whether the rows' copy bounds a block: real windows, and every token naming the same rows.
    attention_prefill_rows(ops, " windows", 0, AttnLists::kWindows);
    attention_prefill_rows(ops, " one list", 0, AttnLists::kShared);
  }
  if (want("hc-fast")) hc_rows(fast_ops, " fast", true, {1, 32, 2048, 8192});  // the fast tier's hc_pre alone
  if (want("gemv-m32")) gemm_rows(fast_ops, " gemv", {32}, {"wq_b", "wo_b"});  // for Nsight: a decode batch
  if (want("indexer")) indexer_rows(ops, cuda::IndexerDots::kCudaCores, "");
  if (want("indexer-fast")) {  // the fast tier's kernels side by side
    for (const cuda::IndexerDots dots : {cuda::IndexerDots::kMmaSync, cuda::IndexerDots::kWgmma}) {
      const auto dot_ops = fast_with([dots](cuda::GemmPolicy& p) { p.indexer_dots = dots; });
      indexer_rows(*dot_ops, dots, std::string(" fast ") + cuda::indexer_dots_name(dots));
    }
  }
  if (want("compressor")) compressor_rows(ops);
  if (want("moe")) moe_rows(ops, "", {1, 32, 256, 8192});
  const auto hc_paths = [&](bool first, bool chunks, const std::string& suffix) {
    const auto path_ops = exact_with([&](cuda::GemmPolicy& p) { p.hc_products = first, p.hc_ring = chunks; });
    hc_rows(*path_ops, suffix);
  };
  if (want("hc")) hc_paths(true, true, "");                // the default: products first, else the ring
  if (want("hc-chain")) hc_paths(false, false, " chain");  // DSV4_HC_PRODUCTS=0 DSV4_HC_RING=0
  if (want("hc-ring")) hc_paths(false, true, " ring");     // the ring at every token count
  if (want("imma-decode")) {  // decode-sized calls forced onto the tensor-core kernel (part-empty tiles)
    const auto decode = exact_with([](cuda::GemmPolicy& p) { p.imma_min_rows = 1; });
    gemm_rows(*decode, " imma", {8, 32});
    moe_rows(*decode, " imma", {32, 256});
  }
  if (want("wgmma")) {  // the wgmma kernel against its alternatives: cuBLASLt (dense), mma.sync (grouped)
    const auto no_lt = fast_with([](cuda::GemmPolicy& p) { p.cublaslt = false; });
    gemm_rows(*no_lt, " wgmma", {256, 1024, 8192});
    const auto mma = fast_with([](cuda::GemmPolicy& p) { p.wgmma_min_rows = int64_t{1} << 40; });
    moe_rows(*mma, " mma fast", {8192});
    moe_rows(*mma, " e32 mma fast", {8192}, 32);
  }
  if (want("gemv")) {  // the few-row kernel against the mma.sync kernel
    const auto mma = fast_with([](cuda::GemmPolicy& p) { p.gemv_max_rows = 0; });
    gemm_rows(fast_ops, " gemv", {1, 2, 4, 8});
    gemm_rows(*mma, " mma", {1, 8});
    moe_rows(fast_ops, " gemv", {1, 8, 32});
    moe_rows(*mma, " mma", {1, 8, 32});
    // Dense calls of 16 and 32 rows (a decode batch) on the few-row kernel (the default), a row tile of
    // 8 after another rereading the weight (from L2 where it fits), against the mma.sync kernel's.
    gemm_rows(fast_ops, " gemv", {16, 32});
    gemm_rows(*mma, " mma", {16, 32});
    moe_rows(fast_ops, " e32 gemv", {1, 8, 32}, 32);
    moe_rows(*mma, " e32 mma", {1, 8, 32}, 32);
  }
  if (want("wgmma-few")) {  // a decode batch of dense FP8 on the swapped wgmma kernel (the default) against
    // the kernels behind it (the few-row kernel to 32 rows, mma.sync past them)
    const auto behind = fast_with([](cuda::GemmPolicy& p) { p.wgmma_few_min_rows = 0; });
    gemm_rows(fast_ops, " few", {16, 32, 64});
    gemm_rows(*behind, " behind", {16, 32, 64});
  }
  if (want("gemv-parts")) {  // the few-row kernel's K runs a CTA forced, against the plan's occupancy rule
    for (int parts : {1, 2, 4, 8}) {
      const auto forced = fast_with([parts](cuda::GemmPolicy& p) { p.gemv_k_parts = parts; });
      const std::string name = " gemv kp" + std::to_string(parts);
      moe_rows(*forced, name, {1, 8});
      moe_rows(*forced, " e32" + name, {1, 8}, 32);
      gemm_rows(*forced, name, {1});
    }
  }
  if (want("wo-a")) {  // wo_a as the plan routes it, from its FP8 twin at every few-row count, from bf16 alone
    const auto twin8 = fast_with([](cuda::GemmPolicy& p) { p.twin_gemv_max_rows = 8; });
    wo_a_rows(fast_ops, " fast", {1, 2, 4, 8}, true);
    wo_a_rows(*twin8, " twin", {1, 2, 4, 8}, true);
    wo_a_rows(fast_ops, " bf16", {1, 2, 8}, false);
  }
  // The fast tier's compressor step (its bf16 pair: the few-row kernel to 8 rows, cuBLASLt past them).
  if (want("compressor-fast")) compressor_rows(fast_ops, " fast", {1, 8, 9, 16, 32, 64});
  if (want("moe-decode")) {  // the MoE at decode batches, 32 experts (the preset) and 256
    // b1 first and b32 next: Nsight's specs (run-gpu.sh DSV4_GPU_NCU_SPECS) count launches from here.
    moe_rows(fast_ops, " e32 fast", {1, 32, 8, 16, 64}, 32);
    moe_rows(fast_ops, " fast", {1, 8, 32});
    // Grouped calls past gemv_grouped_max_rows on the few-row kernel too, against the default (mma.sync).
    const auto all_gemv = fast_with([](cuda::GemmPolicy& p) { p.gemv_grouped_max_rows = int64_t{1} << 40; });
    moe_rows(*all_gemv, " e32 gemv all", {16, 32, 64}, 32);
    moe_rows(*all_gemv, " gemv all", {32});
  }
  if (want("moe-prefill")) {  // the MoE of a prefill chunk: a cuBLASLt matmul an expert (forced) against
    // the wgmma kernel with its FP4 weights widened in shared memory, at 96-384 rows an expert (serving's
    // chunks of ~1,000-2,000 tokens), and widened before the call from 768; 32 experts (the preset) and
    // 256 (V4-Flash)
    const auto lt_all = fast_with([](cuda::GemmPolicy& p) {
      p.lt_experts_min_rows = 1;
      p.lt_experts_resident = false;  // re-encoded each call (the kept rows below)
    });
    const auto in_smem = fast_with([](cuda::GemmPolicy& p) {
      p.lt_experts_min_rows = 0;
      p.fp4_prewiden = false;
    });
    const auto widened = fast_with([](cuda::GemmPolicy& p) {
      p.lt_experts_min_rows = 0;
      p.prewiden_min_rows = 1;
    });
    moe_rows(*lt_all, " e32 fast lt", {512, 768, 1024, 1365, 1536, 2048, 8192}, 32);
    moe_rows(*in_smem, " e32 fast wgmma in-smem", {512, 768, 1024, 1365, 1536, 2048}, 32);
    moe_rows(*widened, " e32 fast wgmma widened", {4096, 6144, 8192}, 32);
    moe_rows(*lt_all, " fast lt", {4096, 8192, 10923, 16384});
    moe_rows(*in_smem, " fast wgmma in-smem", {4096, 8192, 10923, 16384});
    // cuBLASLt from experts re-encoded once and kept (lt_experts_resident): no re-encoding in the calls
    // timed, so the route starts at lt_kept_min_rows (64 an expert: 342 tokens of 32 experts' top-6).
    const auto kept = fast_with([](cuda::GemmPolicy& p) {
      p.lt_experts_min_rows = 1;
      p.lt_experts_resident = true;
    });
    moe_rows(*kept, " e32 fast lt kept", {342, 427, 512, 768, 1024, 1365, 2048, 8192}, 32);
    moe_rows(*in_smem, " e32 fast wgmma in-smem", {342, 427}, 32);
    moe_rows(*kept, " fast lt kept", {4096, 8192, 16384});
  }
  if (want("layer-gemms")) layer_gemm_rows(fast_ops, {1, 32, 8192});
  if (want("kv-restore")) kv_restore_rows();
  if (want("simt")) {  // the SIMT exact kernels where the int8 tensor cores take the default rows
    const auto simt = exact_with([](cuda::GemmPolicy& p) { p.exact_imma = false; });
    gemm_rows(*simt, " simt", {256, 8192});
    moe_rows(*simt, " simt", {8192});
  }
  return 0;
}
