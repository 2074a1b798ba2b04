#include "kv/kv_plan.h"

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr int64_t kMaxContext = int64_t{1} << 32;

// ceil(Σ layers·entry·context/ratio) in integers (every ratio divides 256; no overflow below kMaxContext).
int64_t growth_bytes(const std::vector<KvGroupSpec>& groups, int64_t context) {
  int64_t scaled = 0;  // in 1/256 bytes
  for (const auto& g : groups) {
    if (g.kind == KvGroupKind::kFull) scaled += g.num_layers() * g.entry_bytes * context * (kKvBlockTokens / g.ratio);
  }
  return (scaled + kKvBlockTokens - 1) / kKvBlockTokens;
}

}  // namespace

KvPlan make_kv_plan(const ModelConfig& c, KvDTypes dtypes, int64_t context, int64_t kv_memory) {
  DSV4_CHECK(context > 0 && context <= kMaxContext, "kv-plan: --context must lie in [1, {}], got {}", kMaxContext,
             context);
  DSV4_CHECK(kv_memory > 0, "kv-plan: --kv-memory must be positive, got {}", kv_memory);
  const KvLayout l = make_kv_layout(c, dtypes);
  KvPlan p;
  p.dtypes = dtypes;
  p.context = context;
  p.kv_memory = kv_memory;
  for (size_t g = 0; g < l.groups.size(); ++g) {
    const KvGroupSpec& s = l.groups[g];
    const KvUnit& u = l.units[static_cast<size_t>(l.unit_of_group[g])];
    p.groups.push_back({s.name, s.num_layers(), s.entry_bytes, u.entries_per_page, u.entries_per_page * s.entry_bytes,
                        s.bytes_per_token(), s.fixed_bytes(), u.name, u.bucket});
    p.bytes_per_token += s.bytes_per_token();
    p.fixed_bytes += s.fixed_bytes();
  }
  for (int i = 0; i < static_cast<int>(l.units.size()); ++i) {
    const KvUnit& u = l.units[static_cast<size_t>(i)];
    const int64_t alloc = l.allocated_bytes(i, context);
    p.units.push_back({u.name, u.positions_per_page, u.pages_for(context), alloc, l.waste(i)});
    p.allocated_bytes += alloc;
  }
  for (const KvBucket& b : l.buckets) {
    KvBucketPlan bp{b.page_bytes, {}, 0};
    for (int u : b.units) {
      bp.units.push_back(l.units[static_cast<size_t>(u)].name);
      bp.pages_per_sequence +=
          l.units[static_cast<size_t>(u)].pages_for(context) * l.units[static_cast<size_t>(u)].num_layers();
    }
    p.buckets.push_back(std::move(bp));
  }
  p.per_sequence_bytes = growth_bytes(l.groups, context) + p.fixed_bytes;
  p.max_sequences = kv_memory / p.allocated_bytes;
  p.v32_estimate_bytes = kV32BytesPerTokenPerLayer * c.n_layers * context;
  p.max_waste = l.max_waste();
  return p;
}

}  // namespace dsv4
