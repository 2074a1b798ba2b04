#include "model/parallel_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "core/error.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

constexpr int64_t kScaleBlock = 128;  // rows of one FP8 block scale (MODEL.md §9.2)

int64_t granule_of(WeightFormat f) { return f == WeightFormat::kFp8 ? kScaleBlock : 1; }

// wo_a's slices must stay inside one output group or hold whole groups: each slice reads one group's
// heads (or several whole groups) of the attention output.
bool respects_groups(const RowSplit& s, int64_t group_rows) {
  if (!s.split()) return true;
  const int64_t slice = s.rows / s.parts;
  return slice % group_rows == 0 || group_rows % slice == 0;
}

// The first reason `pc` cannot shard the model, or empty.
std::string refusal(const ModelConfig& c, const ParallelConfig& pc) {
  if (pc.tp < 1 || pc.dp < 1) return fmt::format("sizes must be at least 1 (got tp {}, dp {})", pc.tp, pc.dp);
  if (c.n_heads % pc.tp != 0)
    return fmt::format("tensor-parallel-size {} does not divide the {} attention heads", pc.tp, c.n_heads);
  if (c.index_n_heads % pc.tp != 0)
    return fmt::format("tensor-parallel-size {} does not divide the {} indexer heads", pc.tp, c.index_n_heads);
  const int64_t head_rows = int64_t{c.n_heads / pc.tp} * c.head_dim;
  if (pc.tp > 1 && head_rows % granule_of(c.weight_format) != 0)
    return fmt::format("{} heads per rank are {} rows of wq_b, not whole {}-row scale blocks", c.n_heads / pc.tp,
                       head_rows, kScaleBlock);
  if (pc.expert_parallel && c.n_routed_experts % pc.world() != 0)
    return fmt::format("{} expert-parallel ranks do not divide the {} routed experts", pc.world(), c.n_routed_experts);
  return {};
}

void check_layout(const ModelConfig& c, const ParallelConfig& pc) {
  const std::string why = refusal(c, pc);
  if (why.empty()) return;
  std::vector<std::string> ok;
  for (const auto& w : working_layouts(c, std::max(pc.world(), 1))) ok.push_back(w.describe());
  fail("parallel layout {}: {}; {}", pc.describe(), why,
       ok.empty() ? fmt::format("no layout of {} GPUs fits this model", pc.world())
                  : fmt::format("layouts of {} GPUs that work: {}", pc.world(), fmt::join(ok, "; ")));
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// The expert number in "...ffn.experts.<e>.w1.weight", or -1.
int expert_number(const std::string& name) {
  const auto at = name.find(".experts.");
  if (at == std::string::npos) return -1;
  return std::stoi(name.substr(at + 9));
}

// The split that holds a tensor's rows on each TP rank, by its name in the release (weights.cpp).
const RowSplit* split_of(const std::string& name, const ParallelLayout& l) {
  if (contains(name, ".attn.wq_b.") || contains(name, ".attn.attn_sink")) return &l.heads;
  if (contains(name, ".attn.wo_a.")) return &l.wo_a;
  if (contains(name, ".attn.wo_b.")) return &l.wo_b;
  const bool w2 = contains(name, ".w2.");
  if (contains(name, ".shared_experts.")) return w2 ? &l.shared_out : &l.shared_inter;
  if (contains(name, ".experts.")) return w2 ? &l.routed_out : &l.routed_inter;
  if (name == "head.weight") return &l.vocab;
  return nullptr;
}

std::string rows_text(const RowSplit& s, const char* what) {
  if (!s.split()) return fmt::format("{} replicated", what);
  return fmt::format("{} {} of {} rows", what, s.rows / s.parts, s.rows);
}

std::string range_text(RowRange r) {
  return r.size() == 1 ? fmt::format("{}", r.begin) : fmt::format("{}-{}", r.begin, r.end - 1);
}

}  // namespace

std::string ParallelConfig::describe() const {
  const char* experts = expert_parallel ? "expert-parallel" : tp > 1 ? "experts sliced by tp" : "experts whole";
  return fmt::format("tp {} x dp {}{}", tp, dp, world() > 1 ? fmt::format(", {}", experts) : "");
}

RowRange RowSplit::range(int tp_rank) const {
  if (!split()) return {0, rows};
  const int64_t n = rows / parts;
  return {n * tp_rank, n * (tp_rank + 1)};
}

RowSplit split_rows(int64_t rows, int64_t granule, int tp) {
  if (tp > 1 && rows % (granule * tp) == 0) return {rows, tp};
  return {rows, 1};
}

RankPlace ParallelLayout::place(int rank) const {
  DSV4_CHECK(rank >= 0 && rank < config.world(), "rank {} outside the {} ranks of {}", rank, config.world(),
             config.describe());
  return {rank, rank / config.tp, rank % config.tp};
}

RowRange ParallelLayout::experts_of(int rank) const {
  if (ep_size == 1) return {0, experts};
  const int per = experts / ep_size;
  return {int64_t{per} * rank, int64_t{per} * (rank + 1)};
}

ParallelLayout plan_parallel(const ModelConfig& c, const ParallelConfig& pc) {
  check_layout(c, pc);
  const int tp = pc.tp;
  ParallelLayout l;
  l.config = pc;
  l.experts = c.n_routed_experts;
  l.heads = {c.n_heads, tp};
  const int64_t group_rows = c.o_lora_rank;
  l.wo_a = split_rows(int64_t{c.o_groups} * group_rows, granule_of(c.weight_format), tp);
  if (!respects_groups(l.wo_a, group_rows)) l.wo_a.parts = 1;
  l.wo_a_local = tp == 1 || (l.wo_a.split() && c.o_groups % tp == 0);
  l.wo_b = split_rows(c.dim, granule_of(c.weight_format), tp);
  l.shared_inter = split_rows(c.moe_inter_dim, kScaleBlock, tp);  // the shared expert is FP8
  l.shared_out = split_rows(c.dim, kScaleBlock, tp);
  if (pc.expert_parallel) {
    l.ep_size = pc.world();
    l.routed_inter = {c.moe_inter_dim, 1};
    l.routed_out = {c.dim, 1};
  } else {
    l.routed_inter = split_rows(c.moe_inter_dim, granule_of(c.expert_format), tp);
    l.routed_out = split_rows(c.dim, granule_of(c.expert_format), tp);
  }
  l.vocab = split_rows(c.vocab_size, 1, tp);
  return l;
}

std::vector<ParallelConfig> working_layouts(const ModelConfig& cfg, int world) {
  std::vector<ParallelConfig> out;
  for (int tp = world; tp >= 1; --tp) {
    if (world % tp != 0) continue;
    for (bool ep : {false, true}) {
      const ParallelConfig pc{tp, world / tp, ep};
      if (world == 1 && ep) continue;
      if (refusal(cfg, pc).empty()) out.push_back(pc);
    }
  }
  return out;
}

uint64_t weight_bytes_of_rank(const ModelConfig& cfg, const ParallelLayout& l, int rank) {
  (void)l.place(rank);  // checks the rank
  const RowRange mine = l.experts_of(rank);
  uint64_t total = 0;
  for (const auto& t : checkpoint_tensor_specs(cfg)) {
    const int e = contains(t.name, ".shared_experts.") ? -1 : expert_number(t.name);
    if (e >= 0 && (e < mine.begin || e >= mine.end)) continue;
    const int64_t numel = std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1}, std::multiplies<>());
    const RowSplit* s = split_of(t.name, l);
    const int parts = s ? s->parts : 1;
    total += static_cast<uint64_t>(numel / parts) * dtype_size(t.dtype);
  }
  return total;
}

void require_one_rank(const ParallelLayout& layout, std::string_view command) {
  DSV4_CHECK(layout.config.world() == 1,
             "{}: {} runs one rank so far (the layout is valid: serve, generate, bench latency, bench step and "
             "golden-check run a replica's "
             "tensor-parallel ranks on the cpu backend; kv-plan and inspect plan it)",
             layout.config.describe(), command);
}

std::vector<std::string> describe_layout(const ModelConfig& c, const ParallelLayout& l) {
  const ParallelConfig& pc = l.config;
  std::vector<std::string> lines;
  lines.push_back(fmt::format("parallel   {} ({} rank{})", pc.describe(), pc.world(), pc.world() == 1 ? "" : "s"));
  if (pc.world() == 1) return lines;
  lines.push_back(
      fmt::format("  per rank: {} of {} heads; {}{}; {}; {}, {}; routed experts {}; {}", c.n_heads / pc.tp, c.n_heads,
                  rows_text(l.wo_a, "wo_a"), l.wo_a_local ? " (local groups)" : " (attention output gathered)",
                  rows_text(l.wo_b, "wo_b"), rows_text(l.shared_inter, "shared w1/w3"), rows_text(l.shared_out, "w2"),
                  l.ep_size > 1 ? fmt::format("{} of {} whole", c.n_routed_experts / l.ep_size, c.n_routed_experts)
                                : rows_text(l.routed_inter, "sliced: w1/w3") + ", " + rows_text(l.routed_out, "w2"),
                  rows_text(l.vocab, "head")));
  lines.push_back(
      "  KV: each data-parallel replica's sequences; every TP rank of it holds their whole KV (one shared K=V head)");
  for (int r = 0; r < pc.world(); ++r) {
    const RankPlace at = l.place(r);
    lines.push_back(fmt::format("  rank {} (dp {}, tp {}): heads {}, experts {}, vocab {}, weights {:.2f} GiB", r,
                                at.dp_rank, at.tp_rank, range_text(l.heads.range(at.tp_rank)),
                                range_text(l.experts_of(r)), range_text(l.vocab.range(at.tp_rank)),
                                static_cast<double>(weight_bytes_of_rank(c, l, r)) / (1 << 30)));
  }
  return lines;
}

}  // namespace dsv4
