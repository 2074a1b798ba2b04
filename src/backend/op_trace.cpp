#include "backend/op_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4 {
namespace {

size_t elem_bytes(TraceElem e) {
  switch (e) {
    case TraceElem::kBf16:
      return 2;
    case TraceElem::kU8:
      return 1;
    default:
      return 4;
  }
}

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
    case TraceElem::kU8:
      return r.bytes[i];
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
  const bool codes = b.elem == TraceElem::kI32 || b.elem == TraceElem::kU8;
  d.normalised =
      codes ? static_cast<double>(d.differing) / static_cast<double>(d.count) : std::sqrt(dd / std::max(ss, 1e-30));
  return d;
}

}  // namespace

void OpTrace::keep(std::string op, TraceElem e, ReplayGate gate, const void* p, int64_t rows, int64_t cols,
                   int64_t stride) {
  OpRecord r{std::move(op), e, {}, cols, gate};
  const size_t row_bytes = static_cast<size_t>(cols) * elem_bytes(e);
  r.bytes.resize(static_cast<size_t>(rows) * row_bytes);
  auto* dev = static_cast<uint8_t*>(const_cast<void*>(p));  // an output: the op wrote it
  const size_t dev_stride = static_cast<size_t>(stride ? stride : cols) * elem_bytes(e);
  // f(device address, offset in the record, bytes): one call when the rows are contiguous, else one a row.
  const auto for_rows = [&](auto&& f) {
    if (rows <= 0 || row_bytes == 0) return;
    if (dev_stride == row_bytes) return f(dev, size_t{0}, r.bytes.size());
    for (int64_t i = 0; i < rows; ++i)
      f(dev + static_cast<size_t>(i) * dev_stride, static_cast<size_t>(i) * row_bytes, row_bytes);
  };
  for_rows([&](uint8_t* d, size_t at, size_t n) { dev_.to_host(r.bytes.data() + at, d, n); });
  if (replay_) {
    const OpRecord& from = replayed(r);
    for_rows([&](uint8_t* d, size_t at, size_t n) { dev_.to_device(d, from.bytes.data() + at, n); });
  }
  records_.push_back(std::move(r));
}

void OpTrace::keep_entries(std::string op, ReplayGate gate, const EntryTable& table, const int32_t* slots,
                           int64_t rows) {
  std::vector<int32_t> at(static_cast<size_t>(std::max<int64_t>(rows, 0)));
  if (!at.empty()) dev_.to_host(at.data(), slots, at.size() * sizeof(int32_t));
  const bool f32 = table.format == KvEntryFormat::kF32;
  const size_t eb = static_cast<size_t>(table.entry_bytes);
  OpRecord r{std::move(op), f32 ? TraceElem::kF32 : TraceElem::kU8, {}, static_cast<int64_t>(eb / (f32 ? 4 : 1)), gate};
  for (const int32_t s : at) {
    if (s < 0) continue;
    r.bytes.resize(r.bytes.size() + eb);
    dev_.to_host(r.bytes.data() + r.bytes.size() - eb, table.entry(s), eb);
  }
  if (replay_) {
    const OpRecord& from = replayed(r);
    size_t k = 0;
    for (const int32_t s : at) {
      if (s >= 0) dev_.to_device(table.entry(s), from.bytes.data() + eb * k++, eb);
    }
  }
  records_.push_back(std::move(r));
}

const OpRecord& OpTrace::replayed(const OpRecord& mine) const {
  const size_t i = records_.size();
  DSV4_CHECK(i < replay_->size(), "op replay: call {} ({}) is past the {} calls of the replayed run", i, mine.op,
             replay_->size());
  const OpRecord& r = (*replay_)[i];
  DSV4_CHECK(r.op == mine.op && r.bytes.size() == mine.bytes.size(),
             "op replay: call {} is {} ({} bytes) here and {} ({} bytes) in the replayed run", i, mine.op,
             mine.bytes.size(), r.op, r.bytes.size());
  return r;
}

namespace {

// GEMMs whose operands are all wider than 8 bits and whose outputs are fp32 keep fp32's accuracy.
ReplayGate linear_gate(const LinearParams& p) {
  const bool wide = p.w.type == WeightType::kBf16 || p.w.type == WeightType::kF32;
  return wide && p.y_type == ActType::kF32 ? ReplayGate::kFp32Sums : ReplayGate::kLowSums;
}

constexpr ReplayGate kBits = ReplayGate::kBits;

}  // namespace

void OpTrace::do_linear(const LinearParams& p) {
  inner_.linear(p);
  keep("linear", p.y_type == ActType::kF32 ? TraceElem::kF32 : TraceElem::kBf16, linear_gate(p), p.y, p.rows, p.w.rows,
       p.y_stride);
}
void OpTrace::do_rms_norm(const RmsNormParams& p) {
  inner_.rms_norm(p);
  keep("rms_norm", TraceElem::kBf16, kBits, p.y, p.rows, p.dim);
}
void OpTrace::do_head_rms_norm(const HeadRmsNormParams& p) {
  inner_.head_rms_norm(p);
  keep("head_rms_norm", TraceElem::kBf16, kBits, p.x, p.rows, int64_t{p.heads} * p.head_dim);
}
void OpTrace::do_rope(const RopeParams& p) {
  inner_.rope(p);
  keep("rope", TraceElem::kBf16, kBits, p.x, p.rows, int64_t{p.heads} * p.head_dim);
}
void OpTrace::do_hadamard(const HadamardParams& p) {
  inner_.hadamard(p);
  keep("hadamard", TraceElem::kBf16, kBits, p.x, p.rows, p.dim);
}
void OpTrace::do_quant_sim(const QuantSimParams& p) {
  inner_.quant_sim(p);
  keep("quant_sim", TraceElem::kBf16, kBits, p.x, p.rows, p.cols, p.row_stride);
}
void OpTrace::do_store_entries(const StoreEntriesParams& p) {
  inner_.store_entries(p);
  keep_entries("store_entries", kBits, p.table, p.slots, p.rows);
}
void OpTrace::do_kv_insert(const KvInsertParams& p) {
  inner_.kv_insert(p);
  keep_entries("kv_insert", kBits, p.table, p.slots, p.rows);
}
void OpTrace::do_sparse_attention(const SparseAttentionParams& p) {
  inner_.sparse_attention(p);
  keep("sparse_attention", TraceElem::kBf16, kBits, p.out, p.tokens, int64_t{p.heads} * p.head_dim);
}
void OpTrace::do_compressor_step(const CompressorStepParams& p) {
  inner_.compressor_step(p);
  keep_entries("compressor_step", ReplayGate::kFp32Sums, p.state, p.state_slots, p.tokens);
}
void OpTrace::do_compressor_emit(const CompressorEmitParams& p) {
  inner_.compressor_emit(p);
  keep_entries("compressor_emit", kBits, p.out, p.out_slots, p.entries);
}
void OpTrace::do_indexer_topk(const IndexerTopkParams& p) {
  inner_.indexer_topk(p);
  keep("indexer_topk", TraceElem::kI32, ReplayGate::kSelection, p.out_index, p.tokens, p.topk);
}
void OpTrace::keep_hc_pre(const HcPreParams& p) {
  keep("hc_pre.x", TraceElem::kBf16, ReplayGate::kLowSums, p.x, p.tokens, p.dim);
  keep("hc_pre.post", TraceElem::kF32, ReplayGate::kFp32Sums, p.post, p.tokens, p.hc);
  keep("hc_pre.comb", TraceElem::kF32, ReplayGate::kFp32Sums, p.comb, p.tokens, int64_t{p.hc} * p.hc);
}
void OpTrace::keep_hc_post(const HcPostParams& p) {
  keep("hc_post", TraceElem::kBf16, kBits, p.out, p.tokens, p.hc * p.dim);
}
void OpTrace::do_hc_pre(const HcPreParams& p) {
  inner_.hc_pre(p);
  keep_hc_pre(p);
}
void OpTrace::do_hc_post(const HcPostParams& p) {
  inner_.hc_post(p);
  keep_hc_post(p);
}
// The streams the post wrote are the pre's input: replaying, the pre part ran on this run's own streams,
// which the post's gate (the exact op's bits) holds equal to the earlier run's.
void OpTrace::do_hc_post_pre(const HcPostPreParams& p) {
  inner_.hc_post_pre(p);
  keep_hc_post(p.post);
  keep_hc_pre(p.pre);
}
void OpTrace::do_hc_head(const HcHeadParams& p) {
  inner_.hc_head(p);
  keep("hc_head", TraceElem::kBf16, kBits, p.y, p.tokens, p.dim);
}
void OpTrace::do_moe_gate(const MoeGateParams& p) {
  inner_.moe_gate(p);
  keep("moe_gate.indices", TraceElem::kI32, ReplayGate::kSelection, p.indices, p.tokens, p.topk);
  keep("moe_gate.weights", TraceElem::kF32, ReplayGate::kFp32Sums, p.weights, p.tokens, p.topk);
}
void OpTrace::do_moe_experts(const MoeExpertsParams& p) {
  inner_.moe_experts(p);
  keep("moe_experts", TraceElem::kBf16, ReplayGate::kLowSums, p.y, p.tokens, p.dim);
}
void OpTrace::do_moe_pairs(const MoePairsParams& p) {
  inner_.moe_pairs(p);
  keep("moe_pairs", TraceElem::kBf16, ReplayGate::kLowSums, p.out, p.tokens * p.topk, p.out_dim);
}
void OpTrace::do_moe_combine(const MoeCombineParams& p) {
  inner_.moe_combine(p);
  keep("moe_combine", TraceElem::kBf16, ReplayGate::kLowSums, p.y, p.tokens, p.dim);
}
void OpTrace::do_shared_expert(const SharedExpertParams& p) {
  inner_.shared_expert(p);
  keep("shared_expert", TraceElem::kBf16, ReplayGate::kLowSums, p.y, p.tokens, p.dim);
}
void OpTrace::do_swiglu(const SwigluParams& p) {
  inner_.swiglu(p);
  keep("swiglu", TraceElem::kBf16, kBits, p.out, p.rows, p.dim);
}
void OpTrace::do_embed(const EmbedParams& p) {
  inner_.embed(p);
  keep("embed", TraceElem::kBf16, kBits, p.out, p.tokens, p.copies * p.dim);
}
void OpTrace::do_gather_rows(const GatherRowsParams& p) {
  inner_.gather_rows(p);
  keep("gather_rows", TraceElem::kU8, kBits, p.out, p.rows, p.width);
}
void OpTrace::do_paged_slots(const PagedSlotsParams& p) {
  inner_.paged_slots(p);
  keep("paged_slots", TraceElem::kI32, kBits, p.out, p.rows, p.width);
}
void OpTrace::do_argmax(const ArgmaxParams& p) {
  inner_.argmax(p);
  keep("argmax", TraceElem::kI32, kBits, p.out, p.rows, 1);
}
void OpTrace::do_sample(const SampleParams& p) {
  inner_.sample(p);
  keep("sample", TraceElem::kI32, kBits, p.token, p.rows, 1);
  if (p.top_width > 0) keep("sample.top_id", TraceElem::kI32, kBits, p.top_id, p.rows, p.top_width);
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

namespace dsv4 {
namespace {

double gate_bound(ReplayGate g) {
  switch (g) {
    case ReplayGate::kBits:
      return 0;
    case ReplayGate::kLowSums:
      return 3e-5;
    case ReplayGate::kFp32Sums:
      return 1e-10;
    case ReplayGate::kSelection:
      return 0.02;
  }
  return 0;
}

// The worst calc_diff = 1 − 2Σxy / Σ(x² + y²) over the record's 128x128 tiles; 1 where only one of
// a pair is finite (a NaN or an infinity that the other run does not have).
double worst_tile_calc_diff(const OpRecord& a, const OpRecord& b) {
  const int64_t cols = std::max<int64_t>(b.cols, 1);
  const int64_t n = static_cast<int64_t>(b.bytes.size() / elem_bytes(b.elem)), rows = n / cols;
  double worst = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += 128) {
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      double xy = 0, sq = 0;
      for (int64_t r = r0; r < std::min(rows, r0 + 128); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) {
          const double x = value(a, static_cast<size_t>(r * cols + c)), y = value(b, static_cast<size_t>(r * cols + c));
          if (std::isfinite(x) != std::isfinite(y)) return 1.0;
          if (!std::isfinite(x)) continue;
          xy += x * y;
          sq += x * x + y * y;
        }
      }
      if (sq > 0) worst = std::max(worst, 1.0 - 2.0 * xy / sq);
    }
  }
  return worst;
}

// The call's measure under its gate: bits: 1 when any byte differs; selection: the fraction of
// indices that differ; sums: the worst tile's calc_diff.
double replay_measure(const OpRecord& mine, const OpRecord& exact) {
  if (mine.bytes == exact.bytes) return 0;
  switch (exact.gate) {
    case ReplayGate::kBits:
      return 1;
    case ReplayGate::kSelection:
      return diff(mine, exact).normalised;
    default:
      return worst_tile_calc_diff(mine, exact);
  }
}

const char* gate_name(ReplayGate g) {
  switch (g) {
    case ReplayGate::kBits:
      return "exact bits";
    case ReplayGate::kLowSums:
      return "tile calc_diff";
    case ReplayGate::kFp32Sums:
      return "tile calc_diff (fp32)";
    case ReplayGate::kSelection:
      return "indices differing";
  }
  return "";
}

}  // namespace

ReplayVerdict judge_replay(const std::vector<OpRecord>& replayed, const std::vector<OpRecord>& exact,
                           size_t max_lines) {
  ReplayVerdict v;
  if (replayed.size() != exact.size()) {
    v.pass = false;
    v.lines.push_back(fmt::format("the traces hold {} and {} calls", replayed.size(), exact.size()));
  }
  struct Worst {
    size_t calls = 0, failed = 0;
    double measure = 0;
  };
  std::map<std::pair<std::string, ReplayGate>, Worst> worst;  // one op's calls can fall under two gates
  size_t shown = 0;
  for (size_t i = 0; i < std::min(replayed.size(), exact.size()); ++i) {
    const OpRecord &a = replayed[i], &b = exact[i];
    if (a.op != b.op || a.bytes.size() != b.bytes.size()) {
      v.pass = false;
      v.lines.push_back(fmt::format("call {}: {} vs {}: the traces diverge in shape; stopping", i, a.op, b.op));
      break;
    }
    const double m = replay_measure(a, b), bound = gate_bound(b.gate);
    Worst& w = worst[{b.op, b.gate}];
    ++w.calls;
    w.measure = std::max(w.measure, m);
    if (m <= bound) continue;
    ++w.failed;
    v.pass = false;
    if (shown++ < max_lines)
      v.lines.push_back(fmt::format("call {:5} {:18} {} {:.3e} > {:.0e}", i, b.op, gate_name(b.gate), m, bound));
  }
  for (const auto& [key, w] : worst)
    v.lines.push_back(fmt::format("op {:18} {:5} calls  {:22} worst {:.3e} (bound {:.0e})  {}", key.first, w.calls,
                                  gate_name(key.second), w.measure, gate_bound(key.second),
                                  w.failed ? fmt::format("FAIL in {} calls", w.failed) : "pass"));
  return v;
}

}  // namespace dsv4
