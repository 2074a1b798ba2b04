// dsv4 kv-plan MODEL|config.json: what one request of a given context costs in KV memory, group by
// group, and how many fit in a memory budget (docs/kv_cache.md explains the geometry).
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "io/model_config_json.h"
#include "kv/kv_plan.h"
#include "tools/command.h"
#include "tools/engine_flags.h"
#include "tools/load_flags.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

struct Args {
  std::string model;
  std::optional<int64_t> context;          // unset: the model's max_position_embeddings
  std::string cache_dtype, indexer_dtype;  // add_kv_dtype_flags
  int64_t kv_memory = kDefaultKvMemory;
  int64_t offload_bytes = 0;  // the host tier (--kv-offload-bytes)
  bool json = false;
  LoadFlags load;
  ParallelConfig parallel;
};

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30); }

// Tokens the host tier holds: it keeps blocks as the pools do, so at the plan's allocated bytes per token.
int64_t host_tier_tokens(const KvPlan& p, int64_t offload_bytes) {
  return static_cast<int64_t>(static_cast<double>(offload_bytes) / static_cast<double>(p.allocated_bytes) *
                              static_cast<double>(p.context));
}

nlohmann::ordered_json to_json(const std::string& model, const LoadOptions& load, const KvPlan& p,
                               int64_t offload_bytes) {
  nlohmann::ordered_json j;
  j["model"] = model;
  j.update(load.to_json());
  j["context"] = p.context;
  j["kv_cache_dtype"] = kv_cache_dtype_name(p.dtypes.cache);
  j["indexer_dtype"] = indexer_dtype_name(p.dtypes.indexer);
  j["kv_memory"] = p.kv_memory;
  j["bytes_per_token"] = p.bytes_per_token;
  j["fixed_bytes"] = p.fixed_bytes;
  j["per_sequence_bytes"] = p.per_sequence_bytes;
  j["per_sequence_gib"] = gib(p.per_sequence_bytes);
  j["allocated_bytes"] = p.allocated_bytes;
  j["max_sequences"] = p.max_sequences;
  j["kv_offload_bytes"] = offload_bytes;
  j["host_tier_tokens"] = host_tier_tokens(p, offload_bytes);
  j["v32_estimate_bytes"] = p.v32_estimate_bytes;
  j["max_waste"] = p.max_waste;
  for (const auto& g : p.groups) {
    j["groups"].push_back({{"name", g.name},
                           {"layers", g.layers},
                           {"entry_bytes", g.entry_bytes},
                           {"entries_per_page", g.entries_per_page},
                           {"page_bytes", g.page_bytes},
                           {"bytes_per_token", g.bytes_per_token},
                           {"fixed_bytes", g.fixed_bytes},
                           {"unit", g.unit},
                           {"bucket", g.bucket}});
  }
  for (const auto& u : p.units) {
    j["units"].push_back({{"name", u.name},
                          {"positions_per_page", u.positions_per_page},
                          {"pages_per_sequence", u.pages_per_sequence},
                          {"allocated_bytes", u.allocated_bytes},
                          {"waste", u.waste}});
  }
  for (const auto& b : p.buckets) {
    j["buckets"].push_back(
        {{"page_bytes", b.page_bytes}, {"units", b.units}, {"pages_per_sequence", b.pages_per_sequence}});
  }
  return j;
}

void print_text(const std::string& model, const LoadOptions& load, const KvPlan& p) {
  fmt::print("model       {}\n", model);
  fmt::print("weights     {}\n", load.describe());
  fmt::print("cache       {} entries, {} indexer keys, context {} tokens\n", kv_cache_dtype_name(p.dtypes.cache),
             indexer_dtype_name(p.dtypes.indexer), p.context);
  fmt::print("\n{:<16} {:>6} {:>7} {:>8} {:>9} {:>10} {:>12}  {}\n", "group", "layers", "entry B", "entries", "page B",
             "B/token", "fixed B", "unit (bucket)");
  for (const auto& g : p.groups) {
    fmt::print("{:<16} {:>6} {:>7} {:>8} {:>9} {:>10.4f} {:>12}  {} ({})\n", g.name, g.layers, g.entry_bytes,
               g.entries_per_page, g.page_bytes, g.bytes_per_token, g.fixed_bytes, g.unit, g.bucket);
  }
  fmt::print("\n{:<6} {:>10}  {}\n", "bucket", "page B", "units");
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    std::string names;
    for (const auto& n : p.buckets[b].units) names += (names.empty() ? "" : ", ") + n;
    fmt::print("{:<6} {:>10}  {}\n", b, p.buckets[b].page_bytes, names);
  }
  fmt::print("\nbytes per token     {:.4f}\n", p.bytes_per_token);
  fmt::print("fixed per request   {} B ({:.2f} MiB)\n", p.fixed_bytes, static_cast<double>(p.fixed_bytes) / (1 << 20));
  fmt::print("per sequence        {} B ({:.3f} GiB)\n", p.per_sequence_bytes, gib(p.per_sequence_bytes));
  fmt::print(
      "allocated           {} B ({:.3f} GiB, +{:.3f}%; worst unit waste {:.2f}%)\n", p.allocated_bytes,
      gib(p.allocated_bytes),
      100.0 * static_cast<double>(p.allocated_bytes - p.per_sequence_bytes) / static_cast<double>(p.per_sequence_bytes),
      100.0 * p.max_waste);
  fmt::print("max sequences       {} in {} B ({:.1f} GiB)\n", p.max_sequences, p.kv_memory, gib(p.kv_memory));
  fmt::print("V3.2-style estimate {} B ({:.3f} GiB)\n", p.v32_estimate_bytes, gib(p.v32_estimate_bytes));
}

// Under several ranks each GPU of a data-parallel replica holds the replica's whole KV (the one K=V head
// is not split), so the budget is per GPU and the replicas add up.
void print_parallel(const ModelConfig& c, const ParallelLayout& l, const KvPlan& p) {
  for (const auto& line : describe_layout(c, l)) fmt::print("{}\n", line);
  uint64_t most = 0;
  for (int r = 0; r < l.config.world(); ++r) most = std::max(most, weight_bytes_of_rank(c, l, r));
  fmt::print("per GPU             weights up to {:.2f} GiB; --kv-memory holds {} sequences per replica, {} in all\n",
             static_cast<double>(most) / (1 << 30), p.max_sequences, p.max_sequences * l.config.dp);
}

void run(const Args& a) {
  // The KV geometry follows from the config alone: no weights are read or made, whatever the load format.
  const LoadOptions load = a.load.options();
  const ModelConfig c = load_model_config_ex(a.model, load.hf_overrides).config;
  const ParallelLayout layout = plan_parallel(c, a.parallel);
  const KvDTypes dtypes = parse_kv_dtypes(a.cache_dtype, a.indexer_dtype);
  const KvPlan p = make_kv_plan(c, dtypes, a.context.value_or(c.max_position_embeddings), a.kv_memory);
  DSV4_CHECK(p.max_sequences > 0, "kv-plan: --kv-memory {} B cannot hold one request of {} tokens ({} B allocated)",
             p.kv_memory, p.context, p.allocated_bytes);
  if (a.json) {
    nlohmann::ordered_json j = to_json(a.model, load, p, a.offload_bytes);
    j["parallel"] = layout_json(c, layout);
    j["parallel"]["max_sequences"] = p.max_sequences * layout.config.dp;
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(a.model, load, p);
    if (a.offload_bytes > 0) {
      fmt::print("host tier           {} tokens in {} B ({:.1f} GiB, --kv-offload-bytes)\n",
                 host_tier_tokens(p, a.offload_bytes), a.offload_bytes, gib(a.offload_bytes));
    }
    if (layout.config.world() > 1) print_parallel(c, layout, p);
  }
}

void setup(CLI::App& cmd) {
  static Args a;
  add_model_option(cmd, a.model);
  cmd.add_option("--context", a.context, "tokens per request (default: max_position_embeddings)");
  add_kv_dtype_flags(cmd, a.cache_dtype, a.indexer_dtype);
  cmd.add_option("--kv-memory", a.kv_memory, "KV memory budget in bytes (suffixes KiB, MiB, GiB allowed)")
      ->transform(CLI::AsSizeValue(false));
  cmd.add_option("--kv-offload-bytes", a.offload_bytes,
                 "host tier of the prefix cache in bytes (suffixes allowed): its capacity in tokens")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--json", a.json, "print one JSON object");
  add_load_flags(cmd, a.load, /*seed=*/false);
  add_parallel_flags(cmd, a.parallel);
  cmd.callback([] { run(a); });
}

}  // namespace

DSV4_COMMAND("kv-plan", "KV cache capacity planner: bytes per token, per request, and requests per budget", setup);

}  // namespace dsv4::tools
