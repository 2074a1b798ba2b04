#include "model/weight_shard.h"

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr int64_t kScaleBlock = 128;

void shard_expert(ExpertWeights& e, const ParallelLayout& l, int tp_rank) {
  e.w1 = weight_rows(e.w1, l.routed_inter.range(tp_rank));
  e.w3 = weight_rows(e.w3, l.routed_inter.range(tp_rank));
  e.w2 = weight_rows(e.w2, l.routed_out.range(tp_rank));
}

void shard_moe(MoeWeights& m, const ParallelLayout& l, int rank) {
  const int tp_rank = l.place(rank).tp_rank;
  const RowRange mine = l.experts_of(rank);
  for (size_t e = 0; e < m.experts.size(); ++e) {
    const auto id = static_cast<int64_t>(e);
    if (id < mine.begin || id >= mine.end)
      m.experts[e] = {};
    else
      shard_expert(m.experts[e], l, tp_rank);
  }
  m.shared.w1 = weight_rows(m.shared.w1, l.shared_inter.range(tp_rank));
  m.shared.w3 = weight_rows(m.shared.w3, l.shared_inter.range(tp_rank));
  m.shared.w2 = weight_rows(m.shared.w2, l.shared_out.range(tp_rank));
}

void shard_block(BlockWeights& b, const ModelConfig& c, const ParallelLayout& l, int rank) {
  const int tp_rank = l.place(rank).tp_rank;
  const RowRange heads = l.heads.range(tp_rank);
  AttentionWeights& a = b.attn;
  a.wq_b = weight_rows(a.wq_b, {heads.begin * c.head_dim, heads.end * c.head_dim});
  if (a.attn_sink) a.attn_sink += heads.begin;
  a.wo_a = weight_rows(a.wo_a, l.wo_a.range(tp_rank));
  a.wo_b = weight_rows(a.wo_b, l.wo_b.range(tp_rank));
  shard_moe(b.ffn, l, rank);
}

}  // namespace

LinearWeight weight_rows(const LinearWeight& w, RowRange r) {
  DSV4_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= w.out, "weight rows [{}, {}) outside {} rows", r.begin, r.end,
             w.out);
  if (r.begin == 0 && r.end == w.out) return w;
  LinearWeight s = w;
  s.out = r.size();
  switch (w.format) {
    case WeightFormat::kFp8:
      DSV4_CHECK(r.begin % kScaleBlock == 0 && (r.end % kScaleBlock == 0 || r.end == w.out),
                 "FP8 weight rows [{}, {}) cut a {}-row scale block", r.begin, r.end, kScaleBlock);
      s.data = w.data + r.begin * w.in;
      s.scale = w.scale + r.begin / kScaleBlock * ((w.in + kScaleBlock - 1) / kScaleBlock);
      break;
    case WeightFormat::kFp4:
      s.data = w.data + r.begin * (w.in / 2);
      s.scale = w.scale + r.begin * (w.in / 32);
      break;
    case WeightFormat::kBf16:
      s.data = w.data + r.begin * w.in * 2;
      break;
  }
  return s;
}

ModelWeights shard_weights(const ModelWeights& full, const ModelConfig& cfg, const ParallelLayout& l, int rank) {
  ModelWeights w = full;
  const RowRange vocab = l.vocab.range(l.place(rank).tp_rank);
  w.head = weight_rows(w.head, vocab);
  for (auto& b : w.layers) shard_block(b, cfg, l, rank);
  for (auto& m : w.mtp) shard_block(m.block, cfg, l, rank);
  return w;
}

}  // namespace dsv4
