#include "backend/cuda/cuda_ops.h"

#include "backend/cuda/argmax.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/hyper_connection.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/paged_slots.h"
#include "backend/cuda/row_kernels.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/scratch_epoch.h"
#include "backend/rope.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

GemmWeight gemm_weight(const Weight& w) {
  GemmWeightKind kind = GemmWeightKind::kBf16;
  switch (w.type) {
    case WeightType::kFp8Block:
      kind = GemmWeightKind::kFp8;
      break;
    case WeightType::kFp4Block:
      kind = GemmWeightKind::kFp4;
      break;
    case WeightType::kBf16:
      kind = GemmWeightKind::kBf16;
      break;
    case WeightType::kF32:
      kind = GemmWeightKind::kF32;
      break;
  }
  return {kind, w.data, w.scale, w.rows, w.cols};
}

DeviceTable device_table(const EntryTable& t) {
  return {t.base, t.page_bytes, t.entries_per_page, t.entry_bytes, static_cast<EntryFormat>(t.format), t.capacity};
}

}  // namespace

CudaOps::CudaOps(CudaDevice& dev, const GemmPolicy& gemm)
    : dev_(dev),
      gemm_(std::make_unique<GemmRunner>(dev.main_stream(), gemm)),
      moe_(std::make_unique<MoeRunner>(*gemm_, dev.main_stream())) {
  DSV4_CHECK(dev.stream() == dev.main_stream(), "CudaOps: made inside a side branch");
}

CudaOps::~CudaOps() = default;

uint64_t CudaOps::scratch_epoch() const { return cuda::scratch_epoch(); }

GemmRunner& CudaOps::gemm() {
  if (dev_.stream() == dev_.main_stream()) return *gemm_;
  if (!side_gemm_) {
    scratch_moves(dev_.stream(), "a side-stream GEMM runner");
    side_gemm_ = std::make_unique<GemmRunner>(dev_.stream(), gemm_->policy());
  }
  return *side_gemm_;
}

const float* CudaOps::frequencies(const RopeConfig& r) {
  const auto key = std::make_tuple(r.rope_dim, r.theta, r.original_seq_len, r.factor, r.beta_fast, r.beta_slow);
  auto it = freqs_.find(key);
  if (it == freqs_.end()) {
    scratch_moves(dev_.stream(), "a RoPE frequency table");
    it = freqs_.emplace(key, DeviceArray<float>(dev_, rope_frequencies(r))).first;
    // Made on whichever stream asked first; the other stream may read it next.
    if (dev_.stream() != dev_.main_stream()) dev_.synchronize();
  }
  return it->second.data();
}

void CudaOps::do_linear(const LinearParams& p) {
  GemmArgs a;
  a.x = p.x;
  a.rows = p.rows;
  a.w = gemm_weight(p.w);
  a.y = p.y;
  a.out = p.y_type == ActType::kF32 ? GemmOut::kF32 : GemmOut::kBf16;
  a.groups = p.groups;
  a.x_stride = p.x_stride;
  a.y_stride = p.y_stride;
  gemm().run(a);
}

void CudaOps::do_rms_norm(const RmsNormParams& p) {
  cuda::rms_norm(p.x, p.y, p.weight, p.rows, p.dim, p.eps, dev_.stream());
}

void CudaOps::do_head_rms_norm(const HeadRmsNormParams& p) {
  head_rms_norm_rope(p.x, p.rows * p.heads, p.heads, p.head_dim, p.eps, p.positions,
                     p.positions ? frequencies(p.rope) : nullptr, p.rope.rope_dim, dev_.stream());
}

void CudaOps::do_rope(const RopeParams& p) {
  cuda::rope(p.x, p.rows, p.heads, p.head_dim, p.rope.rope_dim, p.positions, frequencies(p.rope), p.inverse,
             dev_.stream());
}

void CudaOps::do_hadamard(const HadamardParams& p) { cuda::hadamard(p.x, p.rows, p.dim, dev_.stream()); }

void CudaOps::do_quant_sim(const QuantSimParams& p) {
  const int64_t stride = p.row_stride ? p.row_stride : p.cols;
  if (p.kind == QuantSim::kFp8) {
    quant_sim_e4m3(p.x, p.rows, p.cols, stride, p.block, dev_.stream());
  } else {
    quant_sim_e2m1(p.x, p.rows, p.cols, stride, dev_.stream());
  }
}

void CudaOps::do_store_entries(const StoreEntriesParams& p) {
  cuda::store_entries(p.x, p.rows, p.dims.dim, p.dims.rope_dim, device_table(p.table), p.slots, dev_.error_flag(),
                      dev_.stream());
}

void CudaOps::do_kv_insert(const KvInsertParams& p) {
  KvInsertArgs a;
  a.x = p.x;
  a.rows = p.rows;
  a.dim = p.dims.dim;
  a.rope_dim = p.dims.rope_dim;
  a.norm_weight = p.norm_weight;
  a.eps = p.eps;
  a.positions = p.positions;
  a.freqs = frequencies(p.rope);
  a.table = device_table(p.table);
  a.slots = p.slots;
  a.err = dev_.error_flag();
  cuda::kv_insert(a, dev_.stream());
}

void CudaOps::do_sparse_attention(const SparseAttentionParams& p) {
  AttentionArgs a;
  a.q = p.q;
  a.out = p.out;
  a.tokens = p.tokens;
  a.heads = p.heads;
  a.head_dim = p.head_dim;
  a.rope_dim = p.rope_dim;
  a.sink = p.sink;
  a.softmax_scale = p.softmax_scale;
  a.window = device_table(p.window);
  a.window_slots = p.window_slots;
  a.window_width = p.window_width;
  a.compressed = device_table(p.compressed);
  a.compressed_slots = p.compressed_slots;
  a.compressed_width = p.compressed_width;
  a.err = dev_.error_flag();
  a.positions = p.positions;
  a.freqs = p.positions ? frequencies(p.rope) : nullptr;
  cuda::sparse_attention(a, dev_.stream());
}

void CudaOps::do_compressor_step(const CompressorStepParams& p) {
  if (p.tokens == 0) return;
  // a and g as true fp32 GEMMs through the exact kernel (the CPU's sums, so the pooled entries and the
  // indexer's choices made from them match the CPU backend), in one launch.
  const int64_t cd = p.wkv.rows;
  DeviceArray<float> ag(dev_, static_cast<size_t>(2 * p.tokens * cd));
  GemmArgs a;
  a.x = p.x;
  a.rows = p.tokens;
  a.w = gemm_weight(p.wkv);
  a.y = ag.data();
  a.out = GemmOut::kF32;
  a.exact = true;
  gemm().run_pair(a, gemm_weight(p.wgate), ag.data() + p.tokens * cd);
  compressor_store(ag.data(), ag.data() + p.tokens * cd, p.tokens, cd, p.positions, p.ape, p.ratio,
                   device_table(p.state), p.state_slots, dev_.error_flag(), dev_.stream());
}

void CudaOps::do_compressor_emit(const CompressorEmitParams& p) {
  CompressorEmitArgs a;
  a.entries = p.entries;
  a.block_index = p.block_index;
  a.rows = p.rows;
  a.state = device_table(p.state);
  a.ratio = p.ratio;
  a.head_dim = p.head_dim;
  a.rope_dim = p.rope_dim;
  a.norm_weight = p.norm_weight;
  a.norm_eps = p.norm_eps;
  a.freqs = frequencies(p.rope);
  a.indexer = p.indexer;
  a.out = device_table(p.out);
  a.out_slots = p.out_slots;
  a.err = dev_.error_flag();
  cuda::compressor_emit(a, dev_.stream());
}

IndexerArgs indexer_args(const IndexerTopkParams& p, int32_t* err) {
  IndexerArgs a;
  a.q = p.q;
  a.weights = p.weights;
  a.weight_scale = p.weight_scale;
  a.tokens = p.tokens;
  a.heads = p.heads;
  a.head_dim = p.head_dim;
  a.positions = p.positions;
  a.ratio = p.ratio;
  a.token_seq = p.token_seq;
  a.sequences = p.sequences;
  a.keys = device_table(p.keys);
  a.key_slots = p.key_slots;
  a.key_stride = p.key_stride;
  a.key_count = p.key_count;
  a.topk = p.topk;
  a.out_index = p.out_index;
  a.slot_map = p.slot_map;
  a.out_slots = p.out_slots;
  a.err = err;
  return a;
}

void CudaOps::do_indexer_topk(const IndexerTopkParams& p) {
  cuda::indexer_topk(indexer_args(p, dev_.error_flag()), dev_.stream());
}

void CudaOps::do_moe_gate(const MoeGateParams& p) {
  DSV4_CHECK(dev_.stream() == dev_.main_stream(), "CudaOps: moe_gate runs on the main stream only");
  MoeGateArgs a;
  a.x = p.x;
  a.tokens = p.tokens;
  a.dim = p.dim;
  a.weight = gemm_weight(p.weight);
  a.bias = p.bias;
  a.tid2eid = p.tid2eid;
  a.token_ids = p.token_ids;
  a.vocab = p.vocab;
  a.experts = p.experts;
  a.topk = p.topk;
  a.score = static_cast<MoeScore>(p.score_func);
  a.route_scale = p.route_scale;
  a.indices = p.indices;
  a.weights = p.weights;
  a.err = dev_.error_flag();
  moe_->gate(a);
}

const GemmWeight* CudaOps::gemm_weights(const Weight* w, int experts) {
  auto& views = expert_views_[w];
  if (views.size() != static_cast<size_t>(experts) || (experts > 0 && views[0].data != w[0].data)) {
    views.clear();
    for (int e = 0; e < experts; ++e) views.push_back(gemm_weight(w[e]));
  }
  return views.data();
}

void CudaOps::do_moe_experts(const MoeExpertsParams& p) {
  DSV4_CHECK(dev_.stream() == dev_.main_stream(), "CudaOps: moe_experts runs on the main stream only");
  MoeExpertsArgs a;
  a.x = p.x;
  a.tokens = p.tokens;
  a.dim = p.dim;
  a.inter_dim = p.inter_dim;
  a.indices = p.indices;
  a.weights = p.weights;
  a.topk = p.topk;
  a.experts = p.experts;
  a.w1 = gemm_weights(p.w1, p.experts);
  a.w3 = gemm_weights(p.w3, p.experts);
  a.w2 = gemm_weights(p.w2, p.experts);
  a.shared_w1 = gemm_weight(p.shared_w1);
  a.shared_w3 = gemm_weight(p.shared_w3);
  a.shared_w2 = gemm_weight(p.shared_w2);
  a.swiglu_limit = p.swiglu_limit;
  a.y = p.y;
  a.err = dev_.error_flag();
  a.shared_y = p.shared_y;
  if (p.shared_on_side) {
    moe_->experts(a, [this] { dev_.join_side(); });
  } else {
    moe_->experts(a);
  }
}

// On whichever stream is current (the model runs it on the side one, beside the routed experts).
void CudaOps::do_shared_expert(const SharedExpertParams& p) {
  if (p.tokens == 0) return;
  const auto n = static_cast<size_t>(p.tokens * p.inter_dim);
  DeviceArray<uint16_t> g(dev_, n), u(dev_, n);
  cuda::shared_expert(
      gemm(), {p.x, p.tokens, p.dim, p.inter_dim, gemm_weight(p.w1), gemm_weight(p.w3), gemm_weight(p.w2), false, p.y},
      g.data(), u.data(), dev_.stream());
}

void CudaOps::do_hc_pre(const HcPreParams& p) {
  const bool fast = gemm_->policy().numerics == Numerics::kFast;
  DeviceArray<float> scratch(dev_,
                             static_cast<size_t>(hc_scratch_floats(p.tokens, p.hc, p.dim, (2 + p.hc) * p.hc, fast)));
  cuda::hc_pre(p.h, p.tokens, p.hc, p.dim, p.fn, p.scale, p.base, p.norm_eps, p.hc_eps, p.sinkhorn_iters, p.x, p.post,
               p.comb, scratch.data(), fast, dev_.stream());
}

void CudaOps::do_hc_post(const HcPostParams& p) {
  cuda::hc_post(p.x, p.residual, p.post, p.comb, p.out, p.tokens, p.hc, p.dim, dev_.stream());
}

void CudaOps::do_hc_head(const HcHeadParams& p) {
  const bool fast = gemm_->policy().numerics == Numerics::kFast;
  DeviceArray<float> scratch(dev_, static_cast<size_t>(hc_scratch_floats(p.tokens, p.hc, p.dim, p.hc, fast)));
  cuda::hc_head(p.h, p.tokens, p.hc, p.dim, p.fn, p.scale, p.base, p.norm_eps, p.hc_eps, p.y, scratch.data(), fast,
                dev_.stream());
}

void CudaOps::do_embed(const EmbedParams& p) {
  cuda::embed(p.ids, p.tokens, p.table, p.vocab, p.dim, p.copies, p.out, dev_.error_flag(), dev_.stream());
}

void CudaOps::do_paged_slots(const PagedSlotsParams& p) {
  PagedSlotsArgs a;
  a.rows = p.rows;
  a.width = p.width;
  a.list = p.list;
  a.first = p.first;
  a.count = p.count;
  a.pages = p.pages;
  a.base = p.base;
  a.lists = p.lists;
  a.page_stride = p.page_stride;
  a.per_page = p.per_page;
  a.out = p.out;
  a.err = dev_.error_flag();
  cuda::paged_slots(a, dev_.stream());
}

void CudaOps::do_argmax(const ArgmaxParams& p) { argmax_rows(p.x, p.rows, p.cols, p.limit, p.out, dev_.stream()); }

void CudaOps::do_sample(const SampleParams& p) {
  if (p.rows == 0) return;
  // The rows and edits come from the host (checked there); they and the kernel's scratch live until
  // the kernel has run (the pool frees in stream order).
  const auto n = static_cast<size_t>(p.rows), e = static_cast<size_t>(p.edit_count);
  DeviceArray<SampleRow> rows(dev_, n);
  DeviceArray<SampleEdit> edits(dev_, std::max<size_t>(e, 1));
  DeviceArray<double> edited(dev_, std::max<size_t>(e, 1));
  const auto allow_words = static_cast<size_t>(p.allow_rows) * static_cast<size_t>((p.limit + 31) / 32);
  DeviceArray<uint32_t> allow(dev_, std::max<size_t>(allow_words, 1));
  dev_.to_device(rows.data(), p.row, n * sizeof(SampleRow));
  if (e) dev_.to_device(edits.data(), p.edits, e * sizeof(SampleEdit));
  if (allow_words) dev_.to_device(allow.data(), p.allow, allow_words * sizeof(uint32_t));
  DeviceArray<uint64_t> word_mass(dev_, n * static_cast<size_t>((p.limit + 31) / 32));
  SampleArgs a;
  a.x = p.x;
  a.rows = p.rows;
  a.cols = p.cols;
  a.limit = p.limit;
  a.row = rows.data();
  a.edits = edits.data();
  a.edited = edited.data();
  a.allow = allow.data();
  a.word_mass = word_mass.data();
  a.token = p.token;
  a.logprob = p.logprob;
  a.top_width = p.top_width;
  a.top_id = p.top_id;
  a.top_logprob = p.top_logprob;
  cuda::sample(a, dev_.stream());
}

}  // namespace dsv4::cuda
