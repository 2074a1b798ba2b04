#include "model/model.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>

#include "backend/rope.h"
#include "core/env.h"
#include "core/error.h"
#include "core/number_formats.h"
#include "core/thread_pool.h"
#include "model/model_layer.h"
#include "model/scratch.h"
#include "model/step_graphs.h"
#include "model/step_index.h"
#include "model/weight_shard.h"

namespace dsv4 {
namespace {

Weight to_weight(const LinearWeight& w) {
  switch (w.format) {
    case WeightFormat::kFp8:
      return Weight::fp8(w.fp8());
    case WeightFormat::kFp4:
      return Weight::fp4(w.fp4());
    case WeightFormat::kBf16:
      return Weight::bf16(w.bf16(), w.out, w.in);
  }
  return {};
}

Weight bf16_weight(const uint16_t* p, int64_t rows, int64_t cols) { return Weight::bf16(p, rows, cols); }

// On a GPU, an FP8 checkpoint's wo_a also as uploaded FP8 blocks beside its bf16 form: few-row calls read
// those, half the bytes, for the same sums (backend/weight.h's twin). Shapes in whole 128-blocks only;
// empty arrays where not made.
std::pair<DeviceArray<uint8_t>, DeviceArray<uint8_t>> fp8_twin(const LinearWeight& w, Device& dev) {
  if (dev.host_memory() || w.format != WeightFormat::kFp8 || w.out % 128 != 0 || w.in % 128 != 0) return {};
  const auto bytes = static_cast<size_t>(w.out * w.in), scale_bytes = bytes / (128 * 128);
  DeviceArray<uint8_t> data(dev, bytes), scale(dev, scale_bytes);  // straight from the host views
  dev.to_device(data.data(), w.data, bytes);
  dev.to_device(scale.data(), w.scale, scale_bytes);
  return {std::move(data), std::move(scale)};
}

// wo_a runs as a bf16 GEMM (MODEL.md §5.7): FP8 storage dequantizes exactly to bf16. On all cores:
// V4-Flash has 1.4 G wo_a values, a large part of a server's start when done on one.
std::vector<uint16_t> dequant_bf16(const LinearWeight& w, ThreadPool& pool) {
  std::vector<uint16_t> out(static_cast<size_t>(w.out * w.in));
  if (w.format == WeightFormat::kBf16) {
    std::copy(w.bf16(), w.bf16() + out.size(), out.begin());
    return out;
  }
  DSV4_CHECK(w.format == WeightFormat::kFp8, "wo_a must be FP8 or bf16");
  pool.parallel_for(w.out, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(w.in));
    for (int64_t r = r0; r < r1; ++r) {
      w.fp8().dequant_row(r, row);
      for (int64_t c = 0; c < w.in; ++c)
        out[static_cast<size_t>(r * w.in + c)] = float_to_bf16(row[static_cast<size_t>(c)]);
    }
  });
  return out;
}

// Work on the device's side queue for one scope (Device::begin_side), ended on every path.
class SideBranch {
 public:
  SideBranch(Device& dev, bool on) : dev_(dev), on_(on) {
    if (on_) dev_.begin_side();
  }
  ~SideBranch() {
    if (!on_) return;
    try {
      dev_.end_side();
    } catch (const std::exception&) {  // the step has failed already; the device is back on its main queue
    }
  }
  SideBranch(const SideBranch&) = delete;
  SideBranch& operator=(const SideBranch&) = delete;

 private:
  Device& dev_;
  bool on_;
};

}  // namespace

Model::Model(const ModelConfig& cfg, const ModelWeights& weights, Ops& ops, Device& dev)
    : Model(cfg, weights, ops, dev, ModelShard{plan_parallel(cfg, {})}) {}

Model::Model(const ModelConfig& cfg, const ModelWeights& weights, Ops& ops, Device& dev, ModelShard shard)
    : cfg_(cfg),
      shard_(std::move(shard)),
      host_(shard_weights(weights, cfg, shard_.layout, shard_.rank)),
      placed_(host_, cfg, dev),
      w_(placed_.get()),
      ops_(ops),
      dev_(dev) {
  cfg_.validate();
  layers_.resize(static_cast<size_t>(cfg.n_layers));
  ThreadPool pool;
  for (int i = 0; i < cfg.n_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    const BlockWeights& host = host_.layers[static_cast<size_t>(i)];  // for host-side preparation
    const BlockWeights& b = w_.layers[static_cast<size_t>(i)];
    L.index = i;
    L.ratio = b.ratio;
    L.w = &b;
    L.rope = rope_config(cfg, b.ratio);
    L.wq_a = to_weight(b.attn.wq_a);
    L.wq_b = to_weight(b.attn.wq_b);
    L.heads = static_cast<int>(b.attn.wq_b.out / cfg.head_dim);
    L.wkv = to_weight(b.attn.wkv);
    L.wo_b = to_weight(b.attn.wo_b);
    L.wo_a_bf16 = DeviceArray<uint16_t>(dev, dequant_bf16(host.attn.wo_a, pool));
    L.wo_a = bf16_weight(L.wo_a_bf16.data(), b.attn.wo_a.out, b.attn.wo_a.in);
    std::tie(L.wo_a_fp8, L.wo_a_fp8_scale) = fp8_twin(host.attn.wo_a, dev);
    L.wo_a.fp8_twin = L.wo_a_fp8.data();
    L.wo_a.fp8_twin_scale = L.wo_a_fp8_scale.data();
    if (b.attn.compressor) {
      const auto& c = *b.attn.compressor;
      const int64_t width = (c.ratio == 4 ? 2 : 1) * c.head_dim;
      L.c_wkv = bf16_weight(c.wkv, width, cfg.dim);
      L.c_wgate = bf16_weight(c.wgate, width, cfg.dim);
    }
    if (b.attn.indexer) {
      const auto& ix = *b.attn.indexer;
      L.ix_wq_b = to_weight(ix.wq_b);
      L.ix_proj = bf16_weight(ix.weights_proj, cfg.index_n_heads, cfg.dim);
      L.ixc_wkv = bf16_weight(ix.compressor.wkv, 2 * ix.compressor.head_dim, cfg.dim);
      L.ixc_wgate = bf16_weight(ix.compressor.wgate, 2 * ix.compressor.head_dim, cfg.dim);
    }
    L.gate = bf16_weight(b.ffn.gate_weight, cfg.n_routed_experts, cfg.dim);
    if (host.ffn.tid2eid) {
      std::vector<int32_t> t(static_cast<size_t>(cfg.vocab_size * cfg.n_activated_experts));
      for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<int32_t>(host.ffn.tid2eid[k]);
      L.tid2eid = DeviceArray<int32_t>(dev, t);
    }
    for (const auto& e : b.ffn.experts) {
      L.w1.push_back(to_weight(e.w1));
      L.w2.push_back(to_weight(e.w2));
      L.w3.push_back(to_weight(e.w3));
    }
    L.s1 = to_weight(b.ffn.shared.w1);
    L.s2 = to_weight(b.ffn.shared.w2);
    L.s3 = to_weight(b.ffn.shared.w3);
  }
  // Recorded steps and the indexer's side queue are the default where the device can record (their GPU
  // suites pass; docs/perf.md); DSV4_CUDA_GRAPHS=0 (or --enforce-eager) runs eagerly.
  // A step that meets its peers in collectives is eager (ModelShard::meets_peers).
  const bool graphs = dev.can_record() && !shard_.meets_peers() && env_switch("DSV4_CUDA_GRAPHS") != "0";
  overlap_ = graphs;
  shared_overlap_ = env_switch("DSV4_MOE_SIDE") != "0";
  set_step_mode(graphs ? StepMode::kGraphs : StepMode::kEager);
  if (dev.can_record())
    spdlog::info("model: decode steps {}", graphs ? "recorded once per batch shape and replayed (CUDA graphs), the "
                                                    "indexer (or the window KV and compressor) on a side stream"
                                                  : "run eagerly (DSV4_CUDA_GRAPHS=0)");
}

Model::~Model() = default;

void Model::set_step_mode(StepMode mode) {
  mode_ = mode;
  if (mode_ != StepMode::kEager && !graphs_) graphs_ = std::make_unique<StepGraphs>(dev_, ops_, cfg_);
}

StepGraphStats Model::graph_stats() const { return graphs_ ? graphs_->stats() : StepGraphStats{}; }

DeviceArray<uint16_t> Model::embed(const ForwardBatch& batch) {
  DeviceArray<int32_t> ids(dev_, batch.token_ids);
  return embed(ids.data(), batch.tokens());
}

DeviceArray<uint16_t> Model::embed(const int32_t* ids, int64_t tokens) {
  auto h = scratch<uint16_t>(dev_, tokens * cfg_.hc_mult * cfg_.dim);
  ops_.embed({ids, tokens, w_.embed, cfg_.vocab_size, cfg_.dim, cfg_.hc_mult, h.data()});
  return h;
}

void Model::run_block(int layer, const ForwardBatch& batch, KvAccess& kv, uint16_t* h) {
  DSV4_CHECK(layer >= 0 && layer < cfg_.n_layers, "run_block: layer {} out of range", layer);
  StepIndex s(dev_, cfg_, batch, kv);
  HcCarry c = hc_carry(s.tokens);
  run_block(layers_[static_cast<size_t>(layer)], s, kv, h, c);
  flush_hc_post(c);
}

void Model::run_step(StepIndex& s, KvAccess& kv, float* logits, const ForwardBatch* scored,
                     std::vector<TokenScore>* scores) {
  auto h = embed(s.token_ids.data(), s.tokens);
  HcCarry c = hc_carry(s.tokens);
  for (const Layer& L : layers_) run_block(L, s, kv, h.data(), c);
  flush_hc_post(c);
  head(s.logit_rows, s.tokens, h.data(), logits);
  if (scored && scores) score(*scored, h.data(), *scores);
}

// Rows of logits a scoring pass holds at once: [64, vocab] fp32 is 33 MB at V4's vocabulary.
constexpr int64_t kScoreRows = 64;

void Model::score(const ForwardBatch& batch, const uint16_t* h, std::vector<TokenScore>& out) {
  const int64_t limit = batch.score_limit > 0 ? batch.score_limit : cfg_.vocab_size, HD = cfg_.hc_mult * cfg_.dim;
  for (const SequenceSlice& sl : batch.seqs) {
    if (sl.score_top < 0) continue;
    const int32_t top = sl.score_top;
    const int64_t n = sl.count - (sl.score_next < 0 ? 1 : 0);  // rows whose successor is known
    for (int64_t a = 0; a < n; a += kScoreRows) {
      const int64_t B = std::min(kScoreRows, n - a);
      std::vector<int64_t> rows(static_cast<size_t>(B));
      std::iota(rows.begin(), rows.end(), int64_t{0});
      auto logits = scratch<float>(dev_, B * cfg_.vocab_size);
      head(rows, B, h + (sl.offset + a) * HD, logits.data());
      SampleInputs in;
      for (int64_t i = 0; i < B; ++i) {
        const int64_t next = sl.offset + a + i + 1;  // the successor's row in the batch
        in.rows.push_back(
            {.logprobs = top,
             .force_id = a + i + 1 < sl.count ? batch.token_ids[static_cast<size_t>(next)] : sl.score_next});
      }
      StepLogits l;
      l.data = logits.data();
      l.rows = B;
      const SampleResult r = sample(l, limit, in, /*ranks=*/true);
      const auto w = static_cast<size_t>(r.top_width);
      for (size_t i = 0; i < static_cast<size_t>(B); ++i) {
        TokenScore t;
        t.seq = sl.seq;
        t.position = sl.start + a + static_cast<int64_t>(i) + 1;
        t.token = r.token[i];
        t.logprob = r.logprob[i];
        t.rank = r.rank[i];
        t.top_id.assign(r.top_id.begin() + i * w, r.top_id.begin() + (i + 1) * w);
        t.top_logprob.assign(r.top_logprob.begin() + i * w, r.top_logprob.begin() + (i + 1) * w);
        out.push_back(std::move(t));
      }
    }
  }
}

StepLogits Model::step(const ForwardBatch& batch, KvAccess& kv) {
  StepLogits out;
  if (graphs_ && mode_ != StepMode::kEager && !batch.scores())
    if (const auto shape = decode_shape(cfg_, batch)) {
      out.rows = static_cast<int64_t>(batch.seqs.size());  // the shadows' rows follow the real ones
      out.data = graphs_->run(*shape, pad_batch(batch, *shape), kv, mode_ == StepMode::kGraphs,
                              [&](StepIndex& s, float* logits) { run_step(s, kv, logits); });
      return out;
    }
  StepIndex s(dev_, cfg_, batch, kv);
  out.rows = static_cast<int64_t>(s.logit_rows.size());
  out.owned = scratch<float>(dev_, out.rows * cfg_.vocab_size);
  out.data = out.owned.data();
  run_step(s, kv, out.owned.data(), batch.scores() ? &batch : nullptr, &out.scores);
  return out;
}

std::vector<float> Model::forward(const ForwardBatch& batch, KvAccess& kv) {
  const StepLogits l = step(batch, kv);
  std::vector<float> out(static_cast<size_t>(l.rows * cfg_.vocab_size));
  if (!out.empty()) dev_.to_host(out.data(), l.data, out.size() * sizeof(float));
  return out;
}

std::vector<int32_t> Model::forward_greedy(const ForwardBatch& batch, KvAccess& kv, int64_t limit) {
  const StepLogits l = step(batch, kv);
  if (l.rows == 0) return {};
  DeviceArray<int32_t> ids(dev_, static_cast<size_t>(l.rows));
  ops_.argmax({l.data, l.rows, cfg_.vocab_size, limit, ids.data()});
  return ids.to_host();  // one id per row instead of a row of logits
}

SampleResult Model::sample(const StepLogits& l, int64_t limit, const SampleInputs& in, bool ranks) {
  const std::vector<SampleRow>& rows = in.rows;
  const int64_t n = l.rows;
  DSV4_CHECK(n == static_cast<int64_t>(rows.size()), "sample: {} sample rows for {} slices with logits", rows.size(),
             n);
  SampleResult out;
  if (n == 0) return out;
  bool logprobs = false;
  for (const SampleRow& r : rows) {
    logprobs = logprobs || r.logprobs >= 0;
    out.top_width = std::max(out.top_width, r.logprobs);
  }
  DeviceArray<int32_t> token(dev_, static_cast<size_t>(n)), top_id = scratch<int32_t>(dev_, n * out.top_width);
  DeviceArray<double> logprob = scratch<double>(dev_, logprobs ? n : 0),
                      top_logprob = scratch<double>(dev_, n * out.top_width);
  DeviceArray<int64_t> rank = scratch<int64_t>(dev_, ranks ? n : 0);
  SampleParams p;
  p.x = l.data;
  p.rows = n;
  p.cols = cfg_.vocab_size;
  p.limit = limit;
  p.row = rows.data();
  p.edits = in.edits.data();
  p.edit_count = static_cast<int64_t>(in.edits.size());
  p.allow = in.allow.data();
  p.allow_rows = static_cast<int64_t>(in.allow.size());
  p.token = token.data();
  p.logprob = logprobs ? logprob.data() : nullptr;
  p.top_width = out.top_width;
  p.top_id = top_id.data();
  p.top_logprob = top_logprob.data();
  p.rank = ranks ? rank.data() : nullptr;
  ops_.sample(p);
  out.token = token.to_host();
  if (ranks) out.rank = rank.to_host();
  if (logprobs) out.logprob = logprob.to_host();
  if (out.top_width > 0) {
    out.top_id = top_id.to_host();
    out.top_logprob = top_logprob.to_host();
  }
  return out;
}

Model::HcCarry Model::hc_carry(int64_t tokens) {
  const int64_t D = cfg_.dim, hc = cfg_.hc_mult;
  return {scratch<uint16_t>(dev_, tokens * D), scratch<uint16_t>(dev_, tokens * D), scratch<float>(dev_, tokens * hc),
          scratch<float>(dev_, tokens * hc * hc), std::nullopt};
}

void Model::flush_hc_post(HcCarry& c) {
  if (c.pending) ops_.hc_post(*c.pending);
  c.pending.reset();
}

// hc_pre -> norm -> sublayer -> hc_post, twice (MODEL.md §3); each hc_pre runs with the hc_post before it.
void Model::run_block(const Layer& L, StepIndex& s, KvAccess& kv, uint16_t* h, HcCarry& c) {
  const int64_t T = s.tokens, D = cfg_.dim;
  const int hc = cfg_.hc_mult;
  const float eps = static_cast<float>(cfg_.norm_eps), hc_eps = static_cast<float>(cfg_.hc_eps);
  auto sublayer = [&](const HcWeights& hw, const NormWeight& norm, auto&& body) {
    const HcPreParams pre{h,
                          T,
                          hc,
                          D,
                          hw.fn,
                          hw.scale,
                          hw.base,
                          eps,
                          hc_eps,
                          cfg_.hc_sinkhorn_iters,
                          c.x.data(),
                          c.post.data(),
                          c.comb.data(),
                          norm.weight,
                          eps};  // the sublayer's norm too
    if (c.pending) {
      ops_.hc_post_pre({*c.pending, pre});
    } else {
      ops_.hc_pre(pre);
    }
    body(c.x.data(), c.y.data());
    c.pending = HcPostParams{c.y.data(), h, c.post.data(), c.comb.data(), h, T, hc, D};
  };
  sublayer(L.w->hc_attn, L.w->attn_norm, [&](const uint16_t* in, uint16_t* out) { attention(L, s, kv, in, out); });
  s.release_expanded(L.index);  // only attention reads them
  sublayer(L.w->hc_ffn, L.w->ffn_norm, [&](const uint16_t* in, uint16_t* out) { moe(L, s, in, out); });
}

// The shared K=V head (norm, RoPE, FP8 simulation of the nope dims) into the window, one fused op;
// then the layer's compressed entries (ratio 4 and 128).
void Model::window_and_compressed_kv(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* x) {
  const AttentionWeights& a = L.w->attn;
  const int64_t T = s.tokens;
  const int d = cfg_.head_dim, r = cfg_.rope_head_dim;
  auto kvx = scratch<uint16_t>(dev_, T * d);
  ops_.linear({x, T, L.wkv, kvx.data()});
  ops_.kv_insert({kvx.data(), T, KvEntryDims{d, r}, a.kv_norm.weight, static_cast<float>(cfg_.norm_eps),
                  s.positions.data(), L.rope, kv.table(L.index, KvKind::kWindow),
                  s.layers[static_cast<size_t>(L.index)].window_write.data()});
  if (L.ratio != 0) compress(L, s, kv, x, /*for_indexer=*/false);
}

// MODEL.md §5: queries, the window KV, the compressor and indexer, sparse attention with sink,
// inverse RoPE, grouped output projection.
void Model::attention(const Layer& L, StepIndex& s, KvAccess& kv, const uint16_t* x, uint16_t* out) {
  const AttentionWeights& a = L.w->attn;
  const int64_t T = s.tokens;
  const int H = L.heads, d = cfg_.head_dim, r = cfg_.rope_head_dim;
  const float eps = static_cast<float>(cfg_.norm_eps);

  // The window KV and the compressor need only x. Without an indexer (whose branch the side queue
  // carries in ratio-4 layers) they go on the side queue first, beside the query path, and the queues
  // meet before sparse attention reads the cache they write.
  // The layer's long lists (page lists expanded to slots, read by sparse attention and the indexer's
  // selection) are made first on the side queue where one runs: off the query path.
  const bool kv_side = overlap_ && L.ratio != 4;
  if (kv_side) {
    const SideBranch side(dev_, true);
    s.expand(ops_, L.index);
    window_and_compressed_kv(L, s, kv, x);
  } else if (L.ratio != 4) {
    s.expand(ops_, L.index);
  }
  // The indexer's keys and weights need only x too: on the side queue beside wq_a and the query norm;
  // its selection follows there once the query latent is made.
  DeviceArray<int32_t> selected;
  DeviceArray<uint16_t> index_w;
  if (L.ratio == 4) {
    selected = scratch<int32_t>(dev_, T * cfg_.index_topk);
    index_w = scratch<uint16_t>(dev_, T * cfg_.index_n_heads);
    const SideBranch side(dev_, overlap_);
    s.expand(ops_, L.index);
    indexer_keys(L, s, kv, x, index_w.data());
  }

  auto qr = scratch<uint16_t>(dev_, T * cfg_.q_lora_rank);
  ops_.linear({x, T, L.wq_a, qr.data()});
  ops_.rms_norm({qr.data(), qr.data(), a.q_norm.weight, T, cfg_.q_lora_rank, eps});

  // The indexer's selection needs the query latent: on the side queue it runs beside wq_b, the window
  // KV and the main compressor, and the queues meet before sparse attention reads its choice.
  if (L.ratio == 4) {
    const SideBranch side(dev_, overlap_);
    indexer_select(L, s, kv, qr.data(), index_w.data(), selected.data());
  }

  auto q = scratch<uint16_t>(dev_, T * H * d);
  ops_.linear({qr.data(), T, L.wq_b, q.data()});  // its Q-norm and RoPE: in sparse attention (below)

  if (!kv_side) window_and_compressed_kv(L, s, kv, x);
  if (overlap_ && (kv_side || L.ratio == 4)) dev_.join_side();

  SparseAttentionParams p;
  if (L.ratio != 0) {
    const LayerIndex& ri = s.layers[static_cast<size_t>(L.index)];
    p.compressed = kv.table(L.index, KvKind::kCompressed);
    if (L.ratio == 4) {
      p.compressed_slots = selected.data();
      p.compressed_width = cfg_.index_topk;
    } else {
      p.compressed_slots = ri.compressed_slots.data();
      p.compressed_width = ri.compressed_width;
    }
  }
  auto o = scratch<uint16_t>(dev_, T * H * d);
  p.q_unnormed = q.data();
  p.q_norm_eps = eps;
  p.out = o.data();
  p.tokens = T;
  p.heads = H;
  p.head_dim = d;
  p.rope_dim = r;
  p.sink = a.attn_sink;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.window = kv.table(L.index, KvKind::kWindow);
  p.window_slots = s.layers[static_cast<size_t>(L.index)].window_read.data();
  p.window_width = s.window_width;
  p.positions = s.positions.data();  // inverse RoPE of the output, fused
  p.rope = L.rope;
  ops_.sparse_attention(p);
  output_projection(L, T, o.data(), out);
}

// wo_a over groups of heads, then wo_b (§5.7). Sharded, each output's rows are computed whole on one
// rank and gathered; wo_a's input is this rank's heads, or all heads gathered when a rank's wo_a rows
// need heads of other ranks (its slice inside a group, or wo_a whole).
void Model::output_projection(const Layer& L, int64_t T, const uint16_t* o, uint16_t* out) {
  const ParallelLayout& lay = shard_.layout;
  const int64_t R = cfg_.o_lora_rank, HD = int64_t{cfg_.n_heads} * cfg_.head_dim, GR = cfg_.o_groups * R;
  DeviceArray<uint16_t> heads_all;
  if (!lay.wo_a_local) {
    heads_all = scratch<uint16_t>(dev_, T * HD);
    exchange_.gather_columns(o, T, static_cast<size_t>(L.heads) * cfg_.head_dim * 2, heads_all.data());
    o = heads_all.data();
  }
  const int64_t rows = L.wo_a.rows;
  auto u = scratch<uint16_t>(dev_, T * rows);
  LinearParams wo_a{o, T, L.wo_a, u.data()};
  wo_a.groups = static_cast<int>(rows / R);   // whole groups: this rank's heads (local), or all of them
  if (!lay.wo_a_local && lay.wo_a.split()) {  // a slice inside group g reads that group's heads
    const int64_t g = lay.wo_a.range(exchange_.tp_rank()).begin / R;
    wo_a.x = o + g * (HD / cfg_.o_groups);
    wo_a.x_stride = HD;
    wo_a.groups = 1;
  }
  ops_.linear(wo_a);
  DeviceArray<uint16_t> u_all;
  if (lay.wo_a.split()) {
    u_all = scratch<uint16_t>(dev_, T * GR);
    exchange_.gather_columns(u.data(), T, static_cast<size_t>(rows) * 2, u_all.data());
  }
  const uint16_t* wo_b_in = lay.wo_a.split() ? u_all.data() : u.data();
  if (!lay.wo_b.split()) return ops_.linear({wo_b_in, T, L.wo_b, out});
  auto y = scratch<uint16_t>(dev_, T * L.wo_b.rows);
  ops_.linear({wo_b_in, T, L.wo_b, y.data()});
  exchange_.gather_columns(y.data(), T, static_cast<size_t>(L.wo_b.rows) * 2, out);
}

// The compressor of MODEL.md §5.5: fp32 state rows for every token, then the entries completed.
void Model::compress(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* x, bool for_indexer) {
  const LayerIndex& ri = s.layers[static_cast<size_t>(L.index)];
  const CompressorWeights& cw = for_indexer ? L.w->attn.indexer->compressor : *L.w->attn.compressor;
  const KvKind state = for_indexer ? KvKind::kIndexerState : KvKind::kCompressorState;
  const int ratio = for_indexer ? 4 : L.ratio;
  CompressorStepParams st;
  st.x = x;
  st.tokens = s.tokens;
  st.dim = cfg_.dim;
  st.positions = s.positions.data();
  st.wkv = for_indexer ? L.ixc_wkv : L.c_wkv;
  st.wgate = for_indexer ? L.ixc_wgate : L.c_wgate;
  st.ape = cw.ape;
  st.ratio = ratio;
  st.head_dim = static_cast<int>(cw.head_dim);
  st.state = kv.table(L.index, state);
  st.state_slots = (for_indexer ? ri.index_state_slots : ri.state_slots).data();
  ops_.compressor_step(st);

  const EmitList& e = for_indexer ? ri.index_emit : ri.emit;
  if (e.entries == 0) return;
  CompressorEmitParams em;
  em.entries = e.entries;
  em.block_index = e.block_index.data();
  em.rows = e.rows.data();
  em.state = st.state;
  em.ratio = ratio;
  em.head_dim = static_cast<int>(cw.head_dim);
  em.rope_dim = cfg_.rope_head_dim;
  em.norm_weight = cw.norm.weight;
  em.norm_eps = static_cast<float>(cfg_.norm_eps);
  em.rope = L.rope;
  em.indexer = for_indexer;
  em.out = kv.table(L.index, for_indexer ? KvKind::kIndexerKey : KvKind::kCompressed);
  em.out_slots = e.out_slots.data();
  ops_.compressor_emit(em);
}

// The lightning indexer (MODEL.md §5.6), which picks the compressed entries each query attends, in two
// parts. This one needs only x: its compressor's keys into the index cache, the head weights w [T, heads].
void Model::indexer_keys(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* x, uint16_t* w) {
  compress(L, s, kv, x, /*for_indexer=*/true);
  ops_.linear({x, s.tokens, L.ix_proj, w});
}

// The rest, from the query latent: the index queries (RoPE, Hadamard, FP4 simulation), then each
// token's top-k of the index keys, as compressed-entry slots.
void Model::indexer_select(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* qr, const uint16_t* w,
                           int32_t* out_slots) {
  const LayerIndex& ri = s.layers[static_cast<size_t>(L.index)];
  const int64_t T = s.tokens;
  const int ih = cfg_.index_n_heads, id = cfg_.index_head_dim;
  auto qi = scratch<uint16_t>(dev_, T * ih * id);
  ops_.linear({qr, T, L.ix_wq_b, qi.data()});
  RopeConfig rope = L.rope;
  ops_.rope({qi.data(), T, ih, id, s.positions.data(), rope, false});
  ops_.hadamard({qi.data(), T * ih, id, /*fp4_after=*/true});  // Q4(Had(qi)), one pass
  auto index = scratch<int32_t>(dev_, T * cfg_.index_topk);
  IndexerTopkParams p;
  p.q = qi.data();
  p.weights = w;
  p.weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(id) * ih));
  p.tokens = T;
  p.heads = ih;
  p.head_dim = id;
  p.positions = s.positions.data();
  p.ratio = 4;
  p.token_seq = s.token_slice.data();
  p.sequences = s.slices;
  p.keys = kv.table(L.index, KvKind::kIndexerKey);
  p.key_slots = ri.key_slots.data();
  p.key_stride = ri.key_stride;
  p.key_count = ri.key_count.data();
  p.topk = cfg_.index_topk;
  p.out_index = index.data();
  p.slot_map = ri.key_map.data();
  p.out_slots = out_slots;
  ops_.indexer_topk(p);
}

// MODEL.md §6: gate (hash routing in the first n_hash_layers), routed experts, shared expert.
void Model::moe(const Layer& L, const StepIndex& s, const uint16_t* x, uint16_t* out) {
  if (shard_.layout.ep_size > 1) return moe_owned(L, s, x, out);
  if (shard_.layout.config.tp > 1) return moe_sliced(L, s, x, out);
  const int64_t T = s.tokens;
  // The shared expert needs only x: on the side queue it runs beside the gate and the routed experts,
  // and moe_experts joins it right before adding its output.
  const bool side_shared = overlap_ && shared_overlap_;
  DeviceArray<uint16_t> shared_y;
  if (side_shared) {
    shared_y = scratch<uint16_t>(dev_, T * cfg_.dim);
    const SideBranch side(dev_, true);
    ops_.shared_expert({x, T, cfg_.dim, cfg_.moe_inter_dim, L.s1, L.s3, L.s2, shared_y.data()});
  }
  const int k = cfg_.n_activated_experts;
  auto idx = scratch<int32_t>(dev_, T * k);
  auto wts = scratch<float>(dev_, T * k);
  gate(L, s, x, idx.data(), wts.data());
  MoeExpertsParams e;
  e.x = x;
  e.tokens = T;
  e.dim = cfg_.dim;
  e.inter_dim = cfg_.moe_inter_dim;
  e.indices = idx.data();
  e.weights = wts.data();
  e.topk = k;
  e.experts = cfg_.n_routed_experts;
  e.w1 = L.w1.data();
  e.w3 = L.w3.data();
  e.w2 = L.w2.data();
  e.shared_w1 = L.s1;
  e.shared_w3 = L.s3;
  e.shared_w2 = L.s2;
  e.swiglu_limit = static_cast<float>(cfg_.swiglu_limit);
  e.y = out;
  e.shared_y = side_shared ? shared_y.data() : nullptr;
  e.shared_on_side = side_shared;
  ops_.moe_experts(e);
}

void Model::gate(const Layer& L, const StepIndex& s, const uint16_t* x, int32_t* idx, float* wts) {
  MoeGateParams g;
  g.x = x;
  g.tokens = s.tokens;
  g.dim = cfg_.dim;
  g.weight = L.gate;
  g.bias = L.w->ffn.gate_bias;
  g.tid2eid = L.tid2eid.size() ? L.tid2eid.data() : nullptr;
  g.token_ids = s.token_ids.data();
  g.vocab = cfg_.vocab_size;
  g.experts = cfg_.n_routed_experts;
  g.topk = cfg_.n_activated_experts;
  g.score_func = cfg_.score_func;
  g.route_scale = static_cast<float>(cfg_.route_scale);
  g.indices = idx;
  g.weights = wts;
  ops_.moe_gate(g);
}

// hc_head -> final norm -> fp32 head GEMM, for the last token of every slice that wants logits.
void Model::head(const std::vector<int64_t>& rows, int64_t tokens, const uint16_t* h, float* logits) {
  const int64_t R = static_cast<int64_t>(rows.size()), D = cfg_.dim, HD = cfg_.hc_mult * D;
  if (R == 0) return;
  // Gather the rows' streams on the device (not needed when every token is a row, as in decode).
  bool all = R == tokens;
  for (int64_t i = 0; all && i < R; ++i) all = rows[static_cast<size_t>(i)] == i;
  DeviceArray<uint16_t> hs;
  if (!all) {
    hs = scratch<uint16_t>(dev_, R * HD);
    for (int64_t i = 0; i < R; ++i)
      dev_.copy(hs.data() + i * HD, h + rows[static_cast<size_t>(i)] * HD, static_cast<size_t>(HD) * 2);
  }
  auto y = scratch<uint16_t>(dev_, R * D);
  const float eps = static_cast<float>(cfg_.norm_eps);
  ops_.hc_head({all ? h : hs.data(), R, cfg_.hc_mult, D, w_.hc_head.fn, w_.hc_head.scale, w_.hc_head.base, eps,
                static_cast<float>(cfg_.hc_eps), y.data(), w_.norm.weight, eps});  // and the final norm
  const Weight w = bf16_weight(w_.head.bf16(), w_.head.out, D);
  if (!shard_.layout.vocab.split()) return ops_.linear({y.data(), R, w, logits, ActType::kF32});
  auto part = scratch<float>(dev_, R * w.rows);  // this rank's vocabulary rows, gathered
  ops_.linear({y.data(), R, w, part.data(), ActType::kF32});
  exchange_.gather_columns(part.data(), R, static_cast<size_t>(w.rows) * sizeof(float), logits);
}

}  // namespace dsv4
