#include "kv/kv_layout.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace dsv4 {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

bool lockstep(const KvGroupSpec& a, const KvGroupSpec& b) {
  return a.kind == b.kind && a.ratio == b.ratio && a.layers == b.layers && a.window == b.window &&
         a.block_window == b.block_window && a.overlap == b.overlap;
}

std::vector<KvUnit> make_units(const std::vector<KvGroupSpec>& groups) {
  std::vector<KvUnit> units;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    const KvGroupSpec& s = groups[static_cast<size_t>(g)];
    auto it = std::find_if(units.begin(), units.end(), [&](const KvUnit& u) { return lockstep(u.rule, s); });
    if (it == units.end()) {
      KvUnit u;
      u.name = s.name;
      u.kind = s.kind;
      u.layers = s.layers;
      u.ratio = s.ratio;
      u.rule = s;
      units.push_back(std::move(u));
      it = units.end() - 1;
    } else {
      it->name += "+" + s.name;
    }
    it->groups.push_back(g);
    it->row_bytes += s.entry_bytes;
  }
  return units;
}

// Most pages live at once while token p is computed, over the last 512 positions before `tokens`
// (the count grows while the window fills, then repeats every 256 positions).
int64_t live_pages(const KvUnit& u, int64_t tokens) {
  int64_t most = 0;
  for (int64_t p = std::max<int64_t>(0, tokens - 2 * kKvBlockTokens); p < tokens; ++p) {
    most = std::max(most, u.page_of(p) - u.page_of(u.first_needed(p)) + 1);
  }
  return most;
}

double unit_waste(const KvUnit& u, int64_t page_bytes) {
  if (!u.sliding()) return 1.0 - static_cast<double>(u.content_bytes()) / static_cast<double>(page_bytes);
  const double need = static_cast<double>(u.rule.window_rows() * u.row_bytes);
  return 1.0 - need / static_cast<double>(u.peak_pages * page_bytes);
}

// Rows-per-page candidates of a sliding unit: those whose window rounding stays within the waste bound
// (or the four best when none does), fewest rows first among equals.
std::vector<int64_t> row_candidates(KvUnit u) {
  std::vector<std::pair<double, int64_t>> scored;
  u.set_rows(1);
  for (int64_t k = 1; k <= u.period; ++k) {
    u.set_rows(k);
    const double live = static_cast<double>(u.peak_pages * k);
    scored.emplace_back(1.0 - static_cast<double>(u.rule.window_rows()) / live, k);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<int64_t> out;
  for (const auto& [w, k] : scored) {
    if (w <= kMaxKvWaste + 1e-12 || out.size() < 4) out.push_back(k);
    if (out.size() >= 16) break;
  }
  return out;
}

struct Choice {
  double max_waste = 2.0;
  int buckets = 0;
  double total_waste = 0;
  std::vector<int64_t> rows;        // per unit
  std::vector<int> bucket_of_unit;  // per unit
  std::vector<int64_t> bucket_bytes;

  bool better_than(const Choice& o) const {
    if (max_waste < o.max_waste - 1e-9) return true;
    if (max_waste > o.max_waste + 1e-9) return false;
    if (buckets != o.buckets) return buckets < o.buckets;
    return total_waste < o.total_waste - 1e-12;
  }
};

// Best split of the units (at their current rows) into at most 3 buckets: sorted by page size, every
// bucket is a run of consecutive sizes whose page is the run's largest member.
void best_partition(const std::vector<KvUnit>& units, const std::vector<int64_t>& rows, Choice& best) {
  const int n = static_cast<int>(units.size());
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> size(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    size[static_cast<size_t>(i)] = round_up(units[static_cast<size_t>(i)].content_bytes(), kKvPageAlign);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return size[static_cast<size_t>(a)] < size[static_cast<size_t>(b)]; });
  for (uint32_t cuts = 0; cuts < (1u << std::max(0, n - 1)); ++cuts) {
    if (__builtin_popcount(cuts) > kMaxKvBuckets - 1) continue;
    Choice c;
    c.rows = rows;
    c.bucket_of_unit.assign(static_cast<size_t>(n), 0);
    c.max_waste = 0;
    int start = 0;
    for (int i = 0; i < n; ++i) {
      const bool last = i == n - 1 || (cuts >> i & 1u);
      if (!last) continue;
      const int64_t page = size[static_cast<size_t>(order[static_cast<size_t>(i)])];
      for (int j = start; j <= i; ++j) {
        const int u = order[static_cast<size_t>(j)];
        c.bucket_of_unit[static_cast<size_t>(u)] = static_cast<int>(c.bucket_bytes.size());
        const double w = unit_waste(units[static_cast<size_t>(u)], page);
        c.max_waste = std::max(c.max_waste, w);
        c.total_waste += w;
      }
      c.bucket_bytes.push_back(page);
      start = i + 1;
    }
    c.buckets = static_cast<int>(c.bucket_bytes.size());
    if (c.better_than(best)) best = std::move(c);
  }
}

void search(std::vector<KvUnit>& units, const std::vector<std::vector<int64_t>>& cands, size_t i,
            std::vector<int64_t>& rows, Choice& best) {
  if (i == units.size()) return best_partition(units, rows, best);
  for (int64_t k : cands[i]) {
    rows[i] = k;
    units[i].set_rows(k);
    search(units, cands, i + 1, rows, best);
  }
}

}  // namespace

// Rows per page for sliding units are chosen by the bucket search; full units hold one 256-position block.
void KvUnit::set_rows(int64_t rows) {
  if (!sliding()) {
    period = kKvBlockTokens;
    positions_per_page = kKvBlockTokens;
    entries_per_page = kKvBlockTokens / ratio;
  } else {
    const int64_t w = rule.window;
    period = rule.block_window && kKvBlockTokens % w == 0 ? w : kKvBlockTokens;
    positions_per_page = rows;
    entries_per_page = rows;
  }
  period_ = KvDivisor::of(period);
  rows_ = KvDivisor::of(positions_per_page);
  ppp_ = KvDivisor::of((period + positions_per_page - 1) / positions_per_page);
  ratio_ = KvDivisor::of(ratio);
  peak_pages = sliding() ? live_pages(*this, rule.window_rows() + 4 * kKvBlockTokens) : 1;
}

int64_t KvUnit::release_position(int64_t pos) const {
  if (!sliding()) return INT64_MAX;
  if (pos <= 0) return 0;
  if (!rule.block_window) return pos + rule.window - 1;
  const int64_t m = rule.window, need = pos + (rule.overlap ? m : 0);
  return (need + m - 1) / m * m;
}

int64_t KvUnit::pages_for(int64_t tokens) const {
  if (tokens <= 0) return 0;
  if (!sliding()) return (tokens + kKvBlockTokens - 1) / kKvBlockTokens;
  return live_pages(*this, tokens);
}

int64_t KvLayout::allocated_bytes(int unit, int64_t tokens) const {
  const KvUnit& u = units.at(static_cast<size_t>(unit));
  return u.pages_for(tokens) * u.num_layers() * bucket_of(unit).page_bytes;
}

double KvLayout::waste(int unit) const {
  return unit_waste(units.at(static_cast<size_t>(unit)), bucket_of(unit).page_bytes);
}

double KvLayout::max_waste() const {
  double w = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) w = std::max(w, waste(u));
  return w;
}

int KvLayout::find_group(const std::string& name) const {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].name == name) return static_cast<int>(g);
  }
  return -1;
}

KvLayout make_kv_layout(std::vector<KvGroupSpec> groups) {
  DSV4_CHECK(!groups.empty(), "KV layout: the config has no attention layers");
  for (const auto& g : groups) {
    DSV4_CHECK(!g.layers.empty() && g.entry_bytes > 0, "KV layout: group {} has no layers or empty entries", g.name);
    DSV4_CHECK(g.kind == KvGroupKind::kSliding || kKvBlockTokens % g.ratio == 0,
               "KV layout: group {} has ratio {}, which does not divide {}", g.name, g.ratio, kKvBlockTokens);
  }
  KvLayout l;
  l.units = make_units(groups);
  std::vector<std::vector<int64_t>> cands;
  for (KvUnit& u : l.units) {
    u.set_rows(1);
    cands.push_back(u.sliding() ? row_candidates(u) : std::vector<int64_t>{kKvBlockTokens});
  }
  std::vector<int64_t> rows(l.units.size());
  Choice best;
  search(l.units, cands, 0, rows, best);
  for (size_t i = 0; i < l.units.size(); ++i) {
    KvUnit& u = l.units[i];
    u.set_rows(best.rows[i]);
    u.bucket = best.bucket_of_unit[i];
    int64_t offset = 0;
    for (int g : u.groups) {
      u.member_offsets.push_back(offset);
      offset += u.entries_per_page * groups[static_cast<size_t>(g)].entry_bytes;
    }
  }
  for (int64_t bytes : best.bucket_bytes) l.buckets.push_back(KvBucket{bytes, {}});
  for (int u = 0; u < static_cast<int>(l.units.size()); ++u) {
    l.buckets[static_cast<size_t>(l.units[static_cast<size_t>(u)].bucket)].units.push_back(u);
  }
  l.unit_of_group.assign(groups.size(), -1);
  l.member_of_group.assign(groups.size(), -1);
  for (int u = 0; u < static_cast<int>(l.units.size()); ++u) {
    const auto& members = l.units[static_cast<size_t>(u)].groups;
    for (int m = 0; m < static_cast<int>(members.size()); ++m) {
      l.unit_of_group[static_cast<size_t>(members[static_cast<size_t>(m)])] = u;
      l.member_of_group[static_cast<size_t>(members[static_cast<size_t>(m)])] = m;
    }
  }
  l.groups = std::move(groups);
  return l;
}

KvLayout make_kv_layout(const ModelConfig& c, KvDTypes dtypes) { return make_kv_layout(kv_group_specs(c, dtypes)); }

}  // namespace dsv4
