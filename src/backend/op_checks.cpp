#include "backend/op_checks.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr int kMaxHc = 64;

void need(const void* ptr, const char* op, const char* field) {
  DSV4_CHECK(ptr != nullptr, "{}: {} is null", op, field);
}

void positive(int64_t v, const char* op, const char* field) {
  DSV4_CHECK(v > 0, "{}: {} must be positive, got {}", op, field, v);
}

void non_negative(int64_t v, const char* op, const char* field) {
  DSV4_CHECK(v >= 0, "{}: {} must be >= 0, got {}", op, field, v);
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// A weight [rows, cols] of any type, with its scales where the type has them.
void check_weight(const Weight& w, int64_t rows, int64_t cols, const char* op, const char* name) {
  DSV4_CHECK(w.data != nullptr, "{}: weight {} has no data", op, name);
  DSV4_CHECK(w.rows == rows && w.cols == cols, "{}: weight {} is [{}, {}], expected [{}, {}]", op, name, w.rows, w.cols,
             rows, cols);
  if (w.type == WeightType::kFp8Block || w.type == WeightType::kFp4Block) {
    DSV4_CHECK(w.scale != nullptr, "{}: {} weight {} has no scale", op, weight_type_name(w.type), name);
    DSV4_CHECK(w.cols % 128 == 0, "{}: {} weight {} has {} input columns, not a multiple of 128", op,
               weight_type_name(w.type), name, w.cols);
  }
}

void check_plain_weight(const Weight& w, int64_t rows, int64_t cols, const char* op, const char* name) {
  check_weight(w, rows, cols, op, name);
  DSV4_CHECK(w.type == WeightType::kBf16 || w.type == WeightType::kF32,
             "{}: weight {} must be bf16 or f32 (computed in fp32), got {}", op, name, weight_type_name(w.type));
}

void check_rope(const RopeConfig& r, int head_dim, const char* op) {
  DSV4_CHECK(r.rope_dim > 0 && r.rope_dim % 2 == 0 && r.rope_dim <= head_dim,
             "{}: rope_dim {} must be even and within head_dim {}", op, r.rope_dim, head_dim);
  DSV4_CHECK(r.theta > 0 && r.factor > 0, "{}: rope theta {} and factor {} must be positive", op, r.theta, r.factor);
}

// eps values and the SwiGLU clamp limit.
void finite_non_negative(float v, const char* op, const char* field) {
  DSV4_CHECK(std::isfinite(v) && v >= 0, "{}: {} must be finite and >= 0, got {}", op, field, v);
}

void check_hc(int hc, int64_t dim, const char* op) {
  DSV4_CHECK(hc > 0 && hc <= kMaxHc, "{}: hc {} must lie in [1, {}]", op, hc, kMaxHc);
  positive(dim, op, "dim");
}

}  // namespace

void check_params(const LinearParams& p) {
  const char* op = "linear";
  non_negative(p.rows, op, "rows");
  DSV4_CHECK(p.groups >= 1, "linear: groups must be >= 1, got {}", p.groups);
  DSV4_CHECK(p.w.rows > 0 && p.w.rows % p.groups == 0, "linear: {} weight rows do not split into {} groups", p.w.rows,
             p.groups);
  check_weight(p.w, p.w.rows, p.w.cols, op, "w");
  positive(p.w.cols, op, "weight cols");
  const int64_t k = p.w.cols * p.groups;
  DSV4_CHECK(p.x_stride == 0 || p.x_stride >= k, "linear: x_stride {} is below K = {}", p.x_stride, k);
  DSV4_CHECK(p.y_stride == 0 || p.y_stride >= p.w.rows, "linear: y_stride {} is below N = {}", p.y_stride, p.w.rows);
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.y, op, "y");
}

void check_params(const RmsNormParams& p) {
  const char* op = "rms_norm";
  non_negative(p.rows, op, "rows");
  positive(p.dim, op, "dim");
  finite_non_negative(p.eps, op, "eps");
  need(p.weight, op, "weight");
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.y, op, "y");
}

void check_params(const HeadRmsNormParams& p) {
  const char* op = "head_rms_norm";
  non_negative(p.rows, op, "rows");
  positive(p.heads, op, "heads");
  positive(p.head_dim, op, "head_dim");
  finite_non_negative(p.eps, op, "eps");
  if (p.positions) check_rope(p.rope, p.head_dim, op);
  if (p.rows > 0) need(p.x, op, "x");
}

void check_params(const RopeParams& p) {
  const char* op = "rope";
  non_negative(p.rows, op, "rows");
  positive(p.heads, op, "heads");
  positive(p.head_dim, op, "head_dim");
  check_rope(p.rope, p.head_dim, op);
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.positions, op, "positions");
}

void check_params(const HadamardParams& p) {
  const char* op = "hadamard";
  non_negative(p.rows, op, "rows");
  DSV4_CHECK(is_pow2(p.dim), "hadamard: dim {} must be a power of two", p.dim);
  DSV4_CHECK(!p.fp4_after || p.dim >= 32, "hadamard: the FP4 simulation after it needs dim >= 32, got {}", p.dim);
  if (p.rows > 0) need(p.x, op, "x");
}

void check_params(const QuantSimParams& p) {
  const char* op = "quant_sim";
  non_negative(p.rows, op, "rows");
  positive(p.cols, op, "cols");
  const int block = p.kind == QuantSim::kFp4 ? 32 : p.block;
  DSV4_CHECK(block > 0 && block <= 512 && p.cols % block == 0,
             "quant_sim: cols {} must be a multiple of the block {} (1..512)", p.cols, block);
  DSV4_CHECK(p.row_stride == 0 || p.row_stride >= p.cols, "quant_sim: row_stride {} is below cols {}", p.row_stride,
             p.cols);
  if (p.rows > 0) need(p.x, op, "x");
}

void check_params(const StoreEntriesParams& p) {
  const char* op = "store_entries";
  non_negative(p.rows, op, "rows");
  check_entry_table(p.table, p.dims, "store_entries: table");
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.slots, op, "slots");
}

void check_params(const KvInsertParams& p) {
  const char* op = "kv_insert";
  non_negative(p.rows, op, "rows");
  check_entry_table(p.table, p.dims, "kv_insert: table");
  DSV4_CHECK(p.dims.rope_dim == p.rope.rope_dim, "kv_insert: rope_dim {} differs from the RoPE config's {}",
             p.dims.rope_dim, p.rope.rope_dim);
  check_rope(p.rope, p.dims.dim, op);
  DSV4_CHECK(p.dims.dim > p.dims.rope_dim && (p.dims.dim - p.dims.rope_dim) % 64 == 0,
             "kv_insert: dim {} - rope_dim {} must be a positive multiple of 64", p.dims.dim, p.dims.rope_dim);
  finite_non_negative(p.eps, op, "eps");
  need(p.norm_weight, op, "norm_weight");
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.positions, op, "positions");
  need(p.slots, op, "slots");
}

void check_params(const SparseAttentionParams& p) {
  const char* op = "sparse_attention";
  non_negative(p.tokens, op, "tokens");
  positive(p.heads, op, "heads");
  positive(p.head_dim, op, "head_dim");
  DSV4_CHECK(p.rope_dim >= 0 && p.rope_dim < p.head_dim, "sparse_attention: rope_dim {} outside [0, head_dim {})",
             p.rope_dim, p.head_dim);
  non_negative(p.window_width, op, "window_width");
  non_negative(p.compressed_width, op, "compressed_width");
  DSV4_CHECK(std::isfinite(p.softmax_scale), "sparse_attention: softmax_scale must be finite");
  const KvEntryDims dims{p.head_dim, p.rope_dim};
  if (p.window_width > 0) check_entry_table(p.window, dims, "sparse_attention: window table");
  if (p.compressed_width > 0) check_entry_table(p.compressed, dims, "sparse_attention: compressed table");
  need(p.sink, op, "sink");
  DSV4_CHECK(!(p.q && p.q_unnormed), "sparse_attention: q and q_unnormed are both set (one of them)");
  if (p.q_unnormed) finite_non_negative(p.q_norm_eps, op, "q_norm_eps");
  if (p.tokens == 0) return;
  DSV4_CHECK(p.q || p.q_unnormed, "sparse_attention: q (or q_unnormed) is null");
  need(p.out, op, "out");
  if (p.window_width > 0) need(p.window_slots, op, "window_slots");
  if (p.compressed_width > 0) need(p.compressed_slots, op, "compressed_slots");
  if (p.positions) check_rope(p.rope, p.head_dim, op);
}

void check_params(const CompressorStepParams& p) {
  const char* op = "compressor_step";
  non_negative(p.tokens, op, "tokens");
  positive(p.dim, op, "dim");
  positive(p.ratio, op, "ratio");
  positive(p.head_dim, op, "head_dim");
  const int64_t cd = (p.ratio == 4 ? 2 : 1) * int64_t{p.head_dim};
  check_plain_weight(p.wkv, cd, p.dim, op, "wkv");
  check_plain_weight(p.wgate, cd, p.dim, op, "wgate");
  need(p.ape, op, "ape");
  DSV4_CHECK(p.state.format == KvEntryFormat::kF32, "compressor_step: the state table must be f32, got {}",
             kv_entry_format_name(p.state.format));
  check_entry_table(p.state, {static_cast<int>(2 * cd), 0}, "compressor_step: state table");
  if (p.tokens == 0) return;
  need(p.x, op, "x");
  need(p.positions, op, "positions");
  need(p.state_slots, op, "state_slots");
}

void check_params(const CompressorEmitParams& p) {
  const char* op = "compressor_emit";
  non_negative(p.entries, op, "entries");
  positive(p.ratio, op, "ratio");
  positive(p.head_dim, op, "head_dim");
  DSV4_CHECK(p.rope.rope_dim == p.rope_dim, "compressor_emit: rope config has rope_dim {}, params {}", p.rope.rope_dim,
             p.rope_dim);
  check_rope(p.rope, p.head_dim, op);
  finite_non_negative(p.norm_eps, op, "norm_eps");
  need(p.norm_weight, op, "norm_weight");
  if (p.indexer) {
    DSV4_CHECK(is_pow2(p.head_dim) && p.head_dim % 32 == 0,
               "compressor_emit: indexer head_dim {} must be a power of two and a multiple of 32", p.head_dim);
  } else {
    DSV4_CHECK((p.head_dim - p.rope_dim) % 64 == 0 && p.head_dim > p.rope_dim,
               "compressor_emit: head_dim {} - rope_dim {} must be a positive multiple of 64", p.head_dim, p.rope_dim);
  }
  const int64_t cd = (p.ratio == 4 ? 2 : 1) * int64_t{p.head_dim};
  DSV4_CHECK(p.state.format == KvEntryFormat::kF32, "compressor_emit: the state table must be f32, got {}",
             kv_entry_format_name(p.state.format));
  check_entry_table(p.state, {static_cast<int>(2 * cd), 0}, "compressor_emit: state table");
  check_entry_table(p.out, {p.head_dim, p.rope_dim}, "compressor_emit: output table");
  if (p.entries == 0) return;
  need(p.block_index, op, "block_index");
  need(p.rows, op, "rows");
  need(p.out_slots, op, "out_slots");
}

void check_params(const IndexerTopkParams& p) {
  const char* op = "indexer_topk";
  non_negative(p.tokens, op, "tokens");
  positive(p.heads, op, "heads");
  positive(p.head_dim, op, "head_dim");
  positive(p.ratio, op, "ratio");
  positive(p.topk, op, "topk");
  non_negative(p.key_stride, op, "key_stride");
  positive(p.sequences, op, "sequences");
  check_entry_table(p.keys, {p.head_dim, 0}, "indexer_topk: key table");
  DSV4_CHECK(!p.out_slots || p.slot_map, "indexer_topk: out_slots needs slot_map");
  if (p.tokens == 0) return;
  need(p.q, op, "q");
  need(p.weights, op, "weights");
  need(p.positions, op, "positions");
  need(p.key_count, op, "key_count");
  need(p.out_index, op, "out_index");
  if (p.key_stride > 0) need(p.key_slots, op, "key_slots");
}

void check_params(const HcPreParams& p) {
  const char* op = "hc_pre";
  non_negative(p.tokens, op, "tokens");
  check_hc(p.hc, p.dim, op);
  DSV4_CHECK(p.sinkhorn_iters >= 1, "hc_pre: sinkhorn_iters must be >= 1, got {}", p.sinkhorn_iters);
  finite_non_negative(p.norm_eps, op, "norm_eps");
  finite_non_negative(p.hc_eps, op, "hc_eps");
  need(p.fn, op, "fn");
  need(p.scale, op, "scale");
  need(p.base, op, "base");
  if (p.tokens == 0) return;
  need(p.h, op, "h");
  need(p.x, op, "x");
  need(p.post, op, "post");
  need(p.comb, op, "comb");
  if (p.out_norm) finite_non_negative(p.out_norm_eps, op, "out_norm_eps");
}

void check_params(const HcPostParams& p) {
  const char* op = "hc_post";
  non_negative(p.tokens, op, "tokens");
  check_hc(p.hc, p.dim, op);
  if (p.tokens == 0) return;
  need(p.x, op, "x");
  need(p.residual, op, "residual");
  need(p.post, op, "post");
  need(p.comb, op, "comb");
  need(p.out, op, "out");
}

void check_params(const HcPostPreParams& p) {
  check_params(p.post);
  check_params(p.pre);
  DSV4_CHECK(p.pre.h == p.post.out, "hc_post_pre: the pre must read the streams the post writes (pre.h == post.out)");
  DSV4_CHECK(p.pre.tokens == p.post.tokens && p.pre.hc == p.post.hc && p.pre.dim == p.post.dim,
             "hc_post_pre: the post's shape [{}, {}, {}] and the pre's [{}, {}, {}] differ", p.post.tokens, p.post.hc,
             p.post.dim, p.pre.tokens, p.pre.hc, p.pre.dim);
}

void check_params(const HcHeadParams& p) {
  const char* op = "hc_head";
  non_negative(p.tokens, op, "tokens");
  check_hc(p.hc, p.dim, op);
  finite_non_negative(p.norm_eps, op, "norm_eps");
  finite_non_negative(p.hc_eps, op, "hc_eps");
  need(p.fn, op, "fn");
  need(p.scale, op, "scale");
  need(p.base, op, "base");
  if (p.tokens == 0) return;
  need(p.h, op, "h");
  need(p.y, op, "y");
  if (p.out_norm) finite_non_negative(p.out_norm_eps, op, "out_norm_eps");
}

void check_params(const MoeGateParams& p) {
  const char* op = "moe_gate";
  non_negative(p.tokens, op, "tokens");
  positive(p.dim, op, "dim");
  positive(p.experts, op, "experts");
  DSV4_CHECK(p.topk > 0 && p.topk <= p.experts, "moe_gate: topk {} must lie in [1, experts {}]", p.topk, p.experts);
  check_plain_weight(p.weight, p.experts, p.dim, op, "gate");
  DSV4_CHECK(std::isfinite(p.route_scale), "moe_gate: route_scale must be finite");
  if (p.tid2eid) positive(p.vocab, op, "vocab");
  if (p.tokens == 0) return;
  need(p.x, op, "x");
  need(p.indices, op, "indices");
  need(p.weights, op, "weights");
  if (p.tid2eid) need(p.token_ids, op, "token_ids");
}

void check_params(const MoeExpertsParams& p) {
  const char* op = "moe_experts";
  non_negative(p.tokens, op, "tokens");
  positive(p.dim, op, "dim");
  positive(p.inter_dim, op, "inter_dim");
  positive(p.experts, op, "experts");
  DSV4_CHECK(p.topk > 0 && p.topk <= p.experts, "moe_experts: topk {} must lie in [1, experts {}]", p.topk, p.experts);
  finite_non_negative(p.swiglu_limit, op, "swiglu_limit");
  need(p.w1, op, "w1");
  need(p.w3, op, "w3");
  need(p.w2, op, "w2");
  for (int e = 0; e < p.experts; ++e) {
    check_weight(p.w1[e], p.inter_dim, p.dim, op, "w1");
    check_weight(p.w3[e], p.inter_dim, p.dim, op, "w3");
    check_weight(p.w2[e], p.dim, p.inter_dim, op, "w2");
  }
  check_weight(p.shared_w1, p.inter_dim, p.dim, op, "shared w1");
  check_weight(p.shared_w3, p.inter_dim, p.dim, op, "shared w3");
  check_weight(p.shared_w2, p.dim, p.inter_dim, op, "shared w2");
  DSV4_CHECK(p.shared_y || !p.shared_on_side, "moe_experts: shared_on_side without shared_y");
  if (p.tokens == 0) return;
  need(p.x, op, "x");
  need(p.y, op, "y");
  need(p.indices, op, "indices");
  need(p.weights, op, "weights");
}

void check_params(const MoePairsParams& p) {
  const char* op = "moe_pairs";
  non_negative(p.tokens, op, "tokens");
  positive(p.in_dim, op, "in_dim");
  positive(p.out_dim, op, "out_dim");
  positive(p.experts, op, "experts");
  DSV4_CHECK(p.topk > 0 && p.topk <= p.experts, "moe_pairs: topk {} must lie in [1, experts {}]", p.topk, p.experts);
  finite_non_negative(p.swiglu_limit, op, "swiglu_limit");
  const bool up = p.stage == MoeStage::kUp;
  const auto check_views = [&](const Weight* w, const char* name) {
    need(w, op, name);
    for (int e = 0; e < p.experts; ++e)
      if (w[e].data) check_weight(w[e], p.out_dim, p.in_dim, op, name);
  };
  if (up) {
    check_views(p.w1, "w1");
    check_views(p.w3, "w3");
  } else {
    check_views(p.w2, "w2");
  }
  if (p.tokens == 0) return;
  need(p.in, op, "in");
  need(p.out, op, "out");
  need(p.indices, op, "indices");
  if (up) need(p.weights, op, "weights");
}

void check_params(const MoeCombineParams& p) {
  const char* op = "moe_combine";
  non_negative(p.tokens, op, "tokens");
  positive(p.dim, op, "dim");
  DSV4_CHECK(p.topk > 0, "moe_combine: topk {} must be positive", p.topk);
  if (p.tokens == 0) return;
  need(p.pairs, op, "pairs");
  need(p.indices, op, "indices");
  need(p.shared_y, op, "shared_y");
  need(p.y, op, "y");
}

void check_params(const SharedExpertParams& p) {
  const char* op = "shared_expert";
  non_negative(p.tokens, op, "tokens");
  positive(p.dim, op, "dim");
  positive(p.inter_dim, op, "inter_dim");
  check_weight(p.w1, p.inter_dim, p.dim, op, "w1");
  check_weight(p.w3, p.inter_dim, p.dim, op, "w3");
  check_weight(p.w2, p.dim, p.inter_dim, op, "w2");
  if (p.tokens == 0) return;
  need(p.x, op, "x");
  need(p.y, op, "y");
}

void check_params(const SwigluParams& p) {
  const char* op = "swiglu";
  non_negative(p.rows, op, "rows");
  positive(p.dim, op, "dim");
  finite_non_negative(p.limit, op, "limit");
  if (p.rows == 0) return;
  need(p.g, op, "g");
  need(p.u, op, "u");
  need(p.out, op, "out");
}

void check_params(const GatherRowsParams& p) {
  const char* op = "gather_rows";
  non_negative(p.rows, op, "rows");
  non_negative(p.in_rows, op, "in_rows");
  positive(p.width, op, "width");
  DSV4_CHECK(p.rows == 0 || (p.in && p.index && p.out), "gather_rows: {} rows need in, index and out", p.rows);
}

void check_params(const EmbedParams& p) {
  const char* op = "embed";
  non_negative(p.tokens, op, "tokens");
  positive(p.vocab, op, "vocab");
  positive(p.dim, op, "dim");
  positive(p.copies, op, "copies");
  need(p.table, op, "table");
  if (p.tokens == 0) return;
  need(p.ids, op, "ids");
  need(p.out, op, "out");
}

void check_params(const ArgmaxParams& p) {
  const char* op = "argmax";
  non_negative(p.rows, op, "rows");
  positive(p.cols, op, "cols");
  DSV4_CHECK(p.limit >= 1 && p.limit <= p.cols, "argmax: limit {} outside [1, cols {}]", p.limit, p.cols);
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.out, op, "out");
}

void check_params(const SampleParams& p) {
  const char* op = "sample";
  non_negative(p.rows, op, "rows");
  positive(p.cols, op, "cols");
  DSV4_CHECK(p.limit >= 1 && p.limit <= std::min(p.cols, kSampleMaxLimit),
             "sample: limit {} outside [1, min(cols {}, {})]", p.limit, p.cols, kSampleMaxLimit);
  non_negative(p.edit_count, op, "edit_count");
  DSV4_CHECK(p.edit_count <= INT32_MAX, "sample: {} edits exceed the 32-bit edit index", p.edit_count);
  DSV4_CHECK(p.top_width >= 0 && p.top_width <= kSampleMaxLogprobs, "sample: top_width {} outside [0, {}]", p.top_width,
             kSampleMaxLogprobs);
  if (p.rows == 0) return;
  need(p.x, op, "x");
  need(p.row, op, "row");
  need(p.token, op, "token");
  if (p.edit_count > 0) need(p.edits, op, "edits");
  non_negative(p.allow_rows, op, "allow_rows");
  if (p.allow_rows > 0) need(p.allow, op, "allow");
  for (int64_t k = 0; k < p.allow_rows; ++k) DSV4_CHECK(p.allow[k] != nullptr, "sample: allow-set {} is null", k);
  if (p.top_width > 0) {
    need(p.top_id, op, "top_id");
    need(p.top_logprob, op, "top_logprob");
  }
  int32_t prev_end = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    const SampleRow& s = p.row[r];
    DSV4_CHECK(std::isfinite(s.temperature) && s.temperature >= 0,
               "sample: row {} temperature {} must be finite and >= 0", r, s.temperature);
    DSV4_CHECK(s.top_k >= 0, "sample: row {} top_k {} must be >= 0", r, s.top_k);
    DSV4_CHECK(s.top_p > 0 && s.top_p <= 1, "sample: row {} top_p {} outside (0, 1]", r, s.top_p);
    DSV4_CHECK(s.min_p >= 0 && s.min_p <= 1, "sample: row {} min_p {} outside [0, 1]", r, s.min_p);
    DSV4_CHECK(s.u >= 0 && s.u < 1, "sample: row {} u {} outside [0, 1)", r, s.u);
    DSV4_CHECK(s.logprobs >= -1 && s.logprobs <= p.top_width, "sample: row {} logprobs {} outside [-1, top_width {}]",
               r, s.logprobs, p.top_width);
    if (s.logprobs >= 0) need(p.logprob, op, "logprob");
    DSV4_CHECK(s.edit_begin >= prev_end && s.edit_begin <= s.edit_end && s.edit_end <= p.edit_count,
               "sample: row {} edits [{}, {}) overlap the previous row's or leave [0, {})", r, s.edit_begin, s.edit_end,
               p.edit_count);
    prev_end = s.edit_end;
    DSV4_CHECK(s.force_id >= -1 && s.force_id < p.limit, "sample: row {} force_id {} outside [-1, limit {})", r,
               s.force_id, p.limit);
    DSV4_CHECK(s.allow_row >= -1 && s.allow_row < p.allow_rows, "sample: row {} allow_row {} outside [-1, {})", r,
               s.allow_row, p.allow_rows);
    for (int32_t e = s.edit_begin; e < s.edit_end; ++e) {
      const SampleEdit& d = p.edits[e];
      DSV4_CHECK(d.id >= 0 && d.id < p.limit, "sample: edit {} id {} outside [0, limit {})", e, d.id, p.limit);
      DSV4_CHECK(e == s.edit_begin || p.edits[e - 1].id <= d.id, "sample: row {} edit ids must ascend (edit {})", r, e);
      DSV4_CHECK(std::isfinite(d.pos_div) && d.pos_div > 0 && std::isfinite(d.neg_mul) && d.neg_mul > 0 &&
                     std::isfinite(d.add),
                 "sample: edit {} needs finite factors > 0 and a finite addend", e);
    }
  }
}

void check_params(const PagedSlotsParams& p) {
  const char* op = "paged_slots";
  non_negative(p.rows, op, "rows");
  non_negative(p.width, op, "width");
  non_negative(p.lists, op, "lists");
  non_negative(p.page_stride, op, "page_stride");
  positive(p.per_page, op, "per_page");
  if (p.rows == 0 || p.width == 0) return;
  need(p.list, op, "list");
  need(p.count, op, "count");
  need(p.out, op, "out");
  positive(p.lists, op, "lists");
  need(p.pages, op, "pages");
  if (p.list_row) positive(p.page_rows, op, "page_rows");
  if (!p.map.pages) return;
  non_negative(p.map.blocks, op, "map.blocks");
  positive(p.map.layers, op, "map.layers");
  DSV4_CHECK(p.map.layer >= 0 && p.map.layer < p.map.layers, "paged_slots: map layer {} of {}", p.map.layer,
             p.map.layers);
}

}  // namespace dsv4
