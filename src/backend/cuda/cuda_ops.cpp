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
#include "backend/cuda/weight_view.h"
#include "backend/moe_routing.h"
#include "backend/rope.h"
#include "core/error.h"

namespace dsv4::cuda {

CudaOps::CudaOps(CudaDevice& dev, const GemmPolicy& gemm)
    : dev_(dev),
      gemm_(std::make_unique<GemmRunner>(dev.main_stream(), gemm, dev.error_flag())),
      moe_(std::make_unique<MoeRunner>(*gemm_, dev.main_stream())),
      hc_counters_(dev, static_cast<size_t>(std::max<int64_t>(1, gemm.hc_post_pre_max_tokens))) {
  DSV4_CHECK(dev.stream() == dev.main_stream(), "CudaOps: made inside a side branch");
  dev.fill_zero(hc_counters_.data(), hc_counters_.size() * sizeof(int32_t));
}

CudaOps::~CudaOps() = default;

uint64_t CudaOps::scratch_epoch() const { return cuda::scratch_epoch(); }

int64_t CudaOps::step_workspace_bytes(const ModelConfig& m, int64_t tokens) const {
  // The runtime's own: the context, cuBLASLt's handle, the stream-ordered allocator's slack.
  constexpr int64_t kRuntime = int64_t{2} << 30;
  // Routed rows, with the padded layout's up to 3 an expert (moe.cu).
  const int64_t routed = tokens * m.n_activated_experts + 3 * int64_t{m.n_routed_experts};
  const int64_t wide = std::max(m.dim, m.moe_inter_dim);
  GemmWorkspaceQuery q;
  q.rows = tokens;
  q.routed_rows = routed;
  q.max_k = std::max({m.dim, m.moe_inter_dim, m.o_groups * m.o_lora_rank, m.q_lora_rank});
  q.max_n = std::max({int64_t{m.n_heads} * m.head_dim, m.dim, m.moe_inter_dim});
  q.largest_fp8_weight = int64_t{m.n_heads} * m.head_dim * m.q_lora_rank;  // wq_b
  // Each stream's runner (the main one and the side queue's) keeps its own GEMM scratch.
  const int64_t gemm = 2 * gemm_workspace_bytes(q, gemm_->policy(), DeviceCaps{sm_count()});
  // The MoE's routed rows (bf16), their codes and scales, the w1 / w3 outputs, the shared expert's.
  const int64_t moe = routed * (2 * m.dim + wide + wide / 128 * 4 + 4 * m.moe_inter_dim) + tokens * m.dim * 2;
  // Sparse attention's shadow (attention_mqa.cu) on a step of many tokens: its bf16 rows, each list
  // element's code, each row's name (8 bytes) and its hash table (8 bytes a bucket, under 8 buckets a row).
  const int64_t width = int64_t{m.window_size} + m.index_topk;
  const int64_t shadow_from = gemm_->policy().attention_shadow_min_tokens;
  const int64_t shadow_rows = std::min(cuda::kMqaShadowRows, tokens * width);
  const int64_t shadow = shadow_from > 0 && tokens >= shadow_from
                             ? shadow_rows * (2 * m.head_dim + 8 + 64) + tokens * width * 4 + (int64_t{1} << 13)
                             : 0;
  return kRuntime + gemm + moe + shadow;
}

int64_t CudaOps::optional_workspace_bytes(const ModelConfig& m) const {
  // FP4 experts kept re-encoded for cuBLASLt's route (GemmPolicy::lt_experts_resident): every MoE layer's
  // w1 / w3 pair and w2, the whole model's (a rank holding a share of the experts asks more than it takes).
  if (!gemm_->policy().lt_experts_resident || m.expert_format != WeightFormat::kFp4) return 0;
  const int64_t layers = m.n_layers + m.n_mtp_layers, e = m.n_routed_experts;
  return layers * (widened_bytes(2 * e, m.moe_inter_dim, m.dim) + widened_bytes(e, m.dim, m.moe_inter_dim));
}

void CudaOps::grant_optional_workspace(int64_t bytes) { gemm_->set_kept_budget(bytes); }

GemmRunner& CudaOps::gemm() {
  if (dev_.stream() == dev_.main_stream()) return *gemm_;
  if (!side_gemm_) {
    scratch_moves(dev_.stream(), "a side-stream GEMM runner");
    side_gemm_ = std::make_unique<GemmRunner>(dev_.stream(), gemm_->policy(), dev_.error_flag());
    side_gemm_->set_kept_budget(0);  // the MoE runs on the main runner: a grant counts one runner's copies
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

void CudaOps::do_rms_norm(const RmsNormParams& p) { cuda::rms_norm(p, dev_.stream()); }

void CudaOps::do_head_rms_norm(const HeadRmsNormParams& p) {
  cuda::head_rms_norm(p, p.positions ? frequencies(p.rope) : nullptr, dev_.stream());
}

void CudaOps::do_rope(const RopeParams& p) { cuda::rope(p, frequencies(p.rope), dev_.stream()); }

void CudaOps::do_hadamard(const HadamardParams& p) { cuda::hadamard(p, dev_.stream()); }

void CudaOps::do_quant_sim(const QuantSimParams& p) { cuda::quant_sim(p, dev_.stream()); }

void CudaOps::do_store_entries(const StoreEntriesParams& p) {
  cuda::store_entries(p, dev_.error_flag(), dev_.stream());
}

void CudaOps::do_kv_insert(const KvInsertParams& p) {
  cuda::kv_insert(p, frequencies(p.rope), dev_.error_flag(), dev_.stream());
}

void CudaOps::do_sparse_attention(const SparseAttentionParams& p) {
  cuda::sparse_attention(p, p.positions ? frequencies(p.rope) : nullptr, dev_.error_flag(), dev_.stream(),
                         gemm_->policy().attention_shadow_min_tokens);
}

void CudaOps::do_compressor_step(const CompressorStepParams& p) {
  if (p.tokens == 0) return;
  // a and g as true fp32 GEMMs: on the exact tier the CPU's sums in one launch (so the pooled entries
  // and the indexer's choices made from them match the CPU backend), on the fast tier fp32 sums in a
  // fixed order (spec/NUMERICS.md; for many rows the bf16 weights on cuBLASLt).
  const int64_t cd = p.wkv.rows;
  DeviceArray<float> ag(dev_, static_cast<size_t>(2 * p.tokens * cd));
  GemmArgs a;
  a.x = p.x;
  a.rows = p.tokens;
  a.w = gemm_weight(p.wkv);
  a.y = ag.data();
  a.out = GemmOut::kF32;
  gemm().run_pair(a, gemm_weight(p.wgate), ag.data() + p.tokens * cd);
  compressor_store(p, ag.data(), ag.data() + p.tokens * cd, dev_.error_flag(), dev_.stream());
}

void CudaOps::do_compressor_emit(const CompressorEmitParams& p) {
  cuda::compressor_emit(p, frequencies(p.rope), dev_.error_flag(), dev_.stream());
}

void CudaOps::do_indexer_topk(const IndexerTopkParams& p) {
  const GemmPolicy& policy = gemm_->policy();
  const cuda::IndexerDots dots =
      policy.numerics == Numerics::kFast ? policy.indexer_dots : cuda::IndexerDots::kCudaCores;
  cuda::indexer_topk(p, dev_.error_flag(), dots, dev_.stream());
}

void CudaOps::do_moe_gate(const MoeGateParams& p) {
  DSV4_CHECK(dev_.stream() == dev_.main_stream(), "CudaOps: moe_gate runs on the main stream only");
  moe_->gate(p, dev_.error_flag());
}

void CudaOps::do_moe_experts(const MoeExpertsParams& p) {
  DSV4_CHECK(dev_.stream() == dev_.main_stream(), "CudaOps: moe_experts runs on the main stream only");
  if (p.shared_on_side) {
    moe_->experts(p, dev_.error_flag(), false, [this] { dev_.join_side(); });
  } else {
    moe_->experts(p, dev_.error_flag());
  }
}

// On whichever stream is current (the model runs it on the side one, beside the routed experts).
void CudaOps::do_shared_expert(const SharedExpertParams& p) {
  if (p.tokens == 0) return;
  const auto n = static_cast<size_t>(p.tokens * p.inter_dim);
  DeviceArray<uint16_t> g(dev_, n), u(dev_, n);
  cuda::shared_expert(gemm(), p, false, g.data(), u.data(), dev_.stream());
}

void CudaOps::do_swiglu(const SwigluParams& p) { cuda::swiglu(p, false, dev_.stream()); }

// Experts split across ranks, composed of the linear and swiglu ops expert by expert over rows gathered
// by the host's routing (it reads the indices back: a sharded step runs eagerly). Row for row the
// arithmetic of moe_experts' routed experts on either tier (the fast tier's SwiGLU exp included); a
// grouped kernel is the fast path to come.
// Rows move by gather_rows: every expert's inputs into expert order at once, and the outputs, computed
// in that order, back into pair order at once.
void CudaOps::do_moe_pairs(const MoePairsParams& p) {
  if (p.tokens == 0) return;
  const bool up = p.stage == MoeStage::kUp;
  const bool fast = gemm_->policy().numerics == Numerics::kFast;
  const int64_t n_pairs = p.tokens * p.topk;
  std::vector<int32_t> idx(static_cast<size_t>(n_pairs));
  std::vector<float> wts(up ? idx.size() : 0);
  dev_.to_host(idx.data(), p.indices, idx.size() * sizeof(int32_t));
  if (up) dev_.to_host(wts.data(), p.weights, wts.size() * sizeof(float));
  const MoeRouting r = route_pairs("moe_pairs", idx.data(), up ? wts.data() : nullptr, p.tokens, p.topk, p.experts);
  // Per routed row j (expert order): the input row it reads; per pair q: its routed row (pair order).
  std::vector<int32_t> lists(static_cast<size_t>(2 * n_pairs));
  for (int64_t j = 0; j < n_pairs; ++j) {
    lists[static_cast<size_t>(j)] =
        static_cast<int32_t>(up ? r.tokens[static_cast<size_t>(j)] : r.pairs[static_cast<size_t>(j)]);
    lists[static_cast<size_t>(n_pairs + r.pairs[static_cast<size_t>(j)])] = static_cast<int32_t>(j);
  }
  const DeviceArray<int32_t> rows(dev_, lists);
  const DeviceArray<float> routed_weights = up ? DeviceArray<float>(dev_, r.weights) : DeviceArray<float>();
  // Every routed row's input in expert order at once (one gather, one buffer for all experts).
  DeviceArray<uint16_t> routed_in(dev_, static_cast<size_t>(n_pairs * p.in_dim));
  gather_rows({p.in, up ? p.tokens : n_pairs, rows.data(), n_pairs, p.in_dim * 2, routed_in.data()});
  DeviceArray<uint16_t> routed_out(dev_, static_cast<size_t>(n_pairs * p.out_dim));
  DeviceArray<uint16_t> routed_u =
      up ? DeviceArray<uint16_t>(dev_, static_cast<size_t>(n_pairs * p.out_dim)) : DeviceArray<uint16_t>();
  bool every_pair = true;
  for (int e = 0; e < p.experts; ++e) {
    const int64_t b = r.offsets[static_cast<size_t>(e)], n = r.offsets[static_cast<size_t>(e) + 1] - b;
    if (n == 0) continue;
    if (!(up ? p.w1 : p.w2)[e].data) {  // another rank's expert: its pairs' rows stay as they are
      every_pair = false;
      continue;
    }
    const uint16_t* in = routed_in.data() + b * p.in_dim;
    uint16_t* out = routed_out.data() + b * p.out_dim;
    if (up) {
      uint16_t* u = routed_u.data() + b * p.out_dim;
      linear({in, n, p.w1[e], out});
      linear({in, n, p.w3[e], u});
      cuda::swiglu({out, u, n, p.out_dim, p.swiglu_limit, routed_weights.data() + b, out}, fast, dev_.stream());
    } else {
      linear({in, n, p.w2[e], out});
    }
  }
  const size_t out_row = static_cast<size_t>(p.out_dim) * 2;
  if (every_pair)
    return gather_rows({routed_out.data(), n_pairs, rows.data() + n_pairs, n_pairs, p.out_dim * 2, p.out});
  for (int e = 0; e < p.experts; ++e) {  // some pairs were skipped: only the computed rows go back
    if (!(up ? p.w1 : p.w2)[e].data) continue;
    for (int64_t j = r.offsets[static_cast<size_t>(e)]; j < r.offsets[static_cast<size_t>(e) + 1]; ++j)
      dev_.copy(p.out + r.pairs[static_cast<size_t>(j)] * p.out_dim, routed_out.data() + j * p.out_dim, out_row);
  }
}

void CudaOps::do_moe_combine(const MoeCombineParams& p) { cuda::moe_combine(p, dev_.stream()); }

void CudaOps::do_hc_pre(const HcPreParams& p) {
  const bool fast = gemm_->policy().numerics == Numerics::kFast;
  DeviceArray<float> scratch(dev_,
                             static_cast<size_t>(hc_scratch_floats(p.tokens, p.hc, p.dim, (2 + p.hc) * p.hc, fast)));
  cuda::hc_pre(p, scratch.data(), gemm_->policy(), dev_.stream());
}

void CudaOps::do_hc_post(const HcPostParams& p) { cuda::hc_post(p, dev_.stream()); }

void CudaOps::do_hc_post_pre(const HcPostPreParams& p) {
  const HcPreParams& q = p.pre;
  const bool fast = gemm_->policy().numerics == Numerics::kFast;
  DeviceArray<float> scratch(dev_,
                             static_cast<size_t>(hc_scratch_floats(q.tokens, q.hc, q.dim, (2 + q.hc) * q.hc, fast)));
  cuda::hc_post_pre(p, scratch.data(), hc_counters_.data(), gemm_->policy(), dev_.stream());
}

void CudaOps::do_hc_head(const HcHeadParams& p) {
  const bool fast = gemm_->policy().numerics == Numerics::kFast;
  DeviceArray<float> scratch(dev_, static_cast<size_t>(hc_scratch_floats(p.tokens, p.hc, p.dim, p.hc, fast)));
  cuda::hc_head(p, scratch.data(), gemm_->policy(), dev_.stream());
}

void CudaOps::do_embed(const EmbedParams& p) { cuda::embed(p, dev_.error_flag(), dev_.stream()); }

void CudaOps::do_gather_rows(const GatherRowsParams& p) { cuda::gather_rows(p, dev_.error_flag(), dev_.stream()); }

void CudaOps::do_paged_slots(const PagedSlotsParams& p) { cuda::paged_slots(p, dev_.error_flag(), dev_.stream()); }

void CudaOps::do_argmax(const ArgmaxParams& p) { cuda::argmax(p, dev_.stream()); }

void CudaOps::do_sample(const SampleParams& p) {
  if (p.rows == 0) return;
  // The rows and edits come from the host (checked there); they and the kernel's scratch live until
  // the kernel has run (the pool frees in stream order).
  const auto n = static_cast<size_t>(p.rows), e = static_cast<size_t>(p.edit_count);
  DeviceArray<SampleRow> rows(dev_, n);
  DeviceArray<SampleEdit> edits(dev_, std::max<size_t>(e, 1));
  DeviceArray<double> edited(dev_, std::max<size_t>(e, 1));
  const auto set_words = static_cast<size_t>((p.limit + 31) / 32);
  const auto allow_words = static_cast<size_t>(p.allow_rows) * set_words;
  DeviceArray<uint32_t> allow(dev_, std::max<size_t>(allow_words, 1));
  dev_.to_device(rows.data(), p.row, n * sizeof(SampleRow));
  if (e) dev_.to_device(edits.data(), p.edits, e * sizeof(SampleEdit));
  // Each set from where it lies into its row of the device array (the kernel indexes them by allow_row).
  for (size_t k = 0; k < static_cast<size_t>(p.allow_rows); ++k)
    dev_.to_device(allow.data() + k * set_words, p.allow[k], set_words * sizeof(uint32_t));
  DeviceArray<uint64_t> word_mass(dev_, n * static_cast<size_t>((p.limit + 31) / 32));
  cuda::sample(p, {rows.data(), edits.data(), edited.data(), allow_words ? allow.data() : nullptr, word_mass.data()},
               dev_.stream());
}

}  // namespace dsv4::cuda
