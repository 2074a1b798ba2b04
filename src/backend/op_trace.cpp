#include "backend/op_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/number_formats.h"

namespace dsv4 {
namespace {

size_t elem_bytes(TraceElem e) { return e == TraceElem::kBf16 ? 2 : 4; }

double value(const OpRecord& r, size_t i) {
  switch (r.elem) {
    case TraceElem::kBf16: {
      uint16_t v;
      std::memcpy(&v, r.bytes.data() + 2 * i, 2);
      return bf16_to_float(v);
    }
    case TraceElem::kF32: {
      float v;
      std::memcpy(&v, r.bytes.data() + 4 * i, 4);
      return v;
    }
    case TraceElem::kI32: {
      int32_t v;
      std::memcpy(&v, r.bytes.data() + 4 * i, 4);
      return v;
    }
  }
  return 0;
}

struct Diff {
  size_t differing = 0, count = 0;
  double normalised = 0;  // rms(a − b) / rms(b); for indices the fraction that differ
};

Diff diff(const OpRecord& a, const OpRecord& b) {
  Diff d;
  d.count = b.bytes.size() / elem_bytes(b.elem);
  if (a.bytes == b.bytes) return d;
  double dd = 0, ss = 0;
  for (size_t i = 0; i < d.count; ++i) {
    const double x = value(a, i), y = value(b, i);
    const bool same = x == y || (std::isnan(x) && std::isnan(y));
    d.differing += same ? 0 : 1;
    if (!same) dd += std::isfinite(x - y) ? (x - y) * (x - y) : INFINITY;
    ss += std::isfinite(y) ? y * y : 0;
  }
  d.normalised = b.elem == TraceElem::kI32 ? static_cast<double>(d.differing) / static_cast<double>(d.count)
                                           : std::sqrt(dd / std::max(ss, 1e-30));
  return d;
}

}  // namespace

void OpTrace::keep(std::string op, TraceElem e, const void* p, int64_t rows, int64_t cols, int64_t stride) {
  OpRecord r{std::move(op), e, {}};
  const size_t row_bytes = static_cast<size_t>(cols) * elem_bytes(e);
  r.bytes.resize(static_cast<size_t>(rows) * row_bytes);
  const auto* src = static_cast<const uint8_t*>(p);
  const size_t src_stride = static_cast<size_t>(stride ? stride : cols) * elem_bytes(e);
  if (rows > 0 && row_bytes > 0) {
    if (src_stride == row_bytes) {
      dev_.to_host(r.bytes.data(), src, r.bytes.size());
    } else {
      for (int64_t i = 0; i < rows; ++i)
        dev_.to_host(r.bytes.data() + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(i) * src_stride,
                     row_bytes);
    }
  }
  records_.push_back(std::move(r));
}

void OpTrace::do_linear(const LinearParams& p) {
  inner_.linear(p);
  keep("linear", p.y_type == ActType::kF32 ? TraceElem::kF32 : TraceElem::kBf16, p.y, p.rows, p.w.rows, p.y_stride);
}
void OpTrace::do_rms_norm(const RmsNormParams& p) {
  inner_.rms_norm(p);
  keep("rms_norm", TraceElem::kBf16, p.y, p.rows, p.dim);
}
void OpTrace::do_head_rms_norm(const HeadRmsNormParams& p) {
  inner_.head_rms_norm(p);
  keep("head_rms_norm", TraceElem::kBf16, p.x, p.rows, int64_t{p.heads} * p.head_dim);
}
void OpTrace::do_rope(const RopeParams& p) {
  inner_.rope(p);
  keep("rope", TraceElem::kBf16, p.x, p.rows, int64_t{p.heads} * p.head_dim);
}
void OpTrace::do_hadamard(const HadamardParams& p) {
  inner_.hadamard(p);
  keep("hadamard", TraceElem::kBf16, p.x, p.rows, p.dim);
}
void OpTrace::do_quant_sim(const QuantSimParams& p) {
  inner_.quant_sim(p);
  keep("quant_sim", TraceElem::kBf16, p.x, p.rows, p.cols, p.row_stride);
}
void OpTrace::do_store_entries(const StoreEntriesParams& p) { inner_.store_entries(p); }
void OpTrace::do_kv_insert(const KvInsertParams& p) { inner_.kv_insert(p); }
void OpTrace::do_sparse_attention(const SparseAttentionParams& p) {
  inner_.sparse_attention(p);
  keep("sparse_attention", TraceElem::kBf16, p.out, p.tokens, int64_t{p.heads} * p.head_dim);
}
void OpTrace::do_compressor_step(const CompressorStepParams& p) { inner_.compressor_step(p); }
void OpTrace::do_compressor_emit(const CompressorEmitParams& p) { inner_.compressor_emit(p); }
void OpTrace::do_indexer_topk(const IndexerTopkParams& p) {
  inner_.indexer_topk(p);
  keep("indexer_topk", TraceElem::kI32, p.out_index, p.tokens, p.topk);
}
void OpTrace::do_hc_pre(const HcPreParams& p) {
  inner_.hc_pre(p);
  keep("hc_pre.x", TraceElem::kBf16, p.x, p.tokens, p.dim);
  keep("hc_pre.post", TraceElem::kF32, p.post, p.tokens, p.hc);
  keep("hc_pre.comb", TraceElem::kF32, p.comb, p.tokens, int64_t{p.hc} * p.hc);
}
void OpTrace::do_hc_post(const HcPostParams& p) {
  inner_.hc_post(p);
  keep("hc_post", TraceElem::kBf16, p.out, p.tokens, p.hc * p.dim);
}
void OpTrace::do_hc_head(const HcHeadParams& p) {
  inner_.hc_head(p);
  keep("hc_head", TraceElem::kBf16, p.y, p.tokens, p.dim);
}
void OpTrace::do_moe_gate(const MoeGateParams& p) {
  inner_.moe_gate(p);
  keep("moe_gate.indices", TraceElem::kI32, p.indices, p.tokens, p.topk);
  keep("moe_gate.weights", TraceElem::kF32, p.weights, p.tokens, p.topk);
}
void OpTrace::do_moe_experts(const MoeExpertsParams& p) {
  inner_.moe_experts(p);
  keep("moe_experts", TraceElem::kBf16, p.y, p.tokens, p.dim);
}
void OpTrace::do_shared_expert(const SharedExpertParams& p) {
  inner_.shared_expert(p);
  keep("shared_expert", TraceElem::kBf16, p.y, p.tokens, p.dim);
}
void OpTrace::do_swiglu(const SwigluParams& p) {
  inner_.swiglu(p);
  keep("swiglu", TraceElem::kBf16, p.out, p.rows, p.dim);
}
void OpTrace::do_embed(const EmbedParams& p) {
  inner_.embed(p);
  keep("embed", TraceElem::kBf16, p.out, p.tokens, p.copies * p.dim);
}
void OpTrace::do_paged_slots(const PagedSlotsParams& p) {
  inner_.paged_slots(p);
  keep("paged_slots", TraceElem::kI32, p.out, p.rows, p.width);
}
void OpTrace::do_argmax(const ArgmaxParams& p) {
  inner_.argmax(p);
  keep("argmax", TraceElem::kI32, p.out, p.rows, 1);
}
void OpTrace::do_sample(const SampleParams& p) {
  inner_.sample(p);
  keep("sample", TraceElem::kI32, p.token, p.rows, 1);
  if (p.top_width > 0) keep("sample.top_id", TraceElem::kI32, p.top_id, p.rows, p.top_width);
}

std::vector<std::string> compare_traces(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                                        size_t max_lines) {
  std::vector<std::string> lines;
  if (a.size() != b.size()) lines.push_back(fmt::format("the traces hold {} and {} calls", a.size(), b.size()));
  std::map<std::string, std::pair<double, size_t>> worst;  // op -> (worst normalised, calls differing)
  size_t shown = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i].op != b[i].op || a[i].bytes.size() != b[i].bytes.size()) {
      lines.push_back(fmt::format("call {}: {} vs {}: the traces diverge in shape; stopping", i, a[i].op, b[i].op));
      break;
    }
    const Diff d = diff(a[i], b[i]);
    if (d.differing == 0) continue;
    auto& w = worst[a[i].op];
    w.first = std::max(w.first, d.normalised);
    ++w.second;
    if (shown++ < max_lines)
      lines.push_back(fmt::format("call {:5} {:18} {:8} of {:8} differ, normalised {:.3e}", i, a[i].op, d.differing,
                                  d.count, d.normalised));
  }
  for (const auto& [op, w] : worst)
    lines.push_back(fmt::format("op {:18} differs in {} calls, worst normalised {:.3e}", op, w.second, w.first));
  return lines;
}

}  // namespace dsv4
