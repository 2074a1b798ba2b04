// dsv4 inspect MODEL [--json]: configuration, parameter counts per dtype, KV bytes per token.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "core/kv_entry.h"
#include "io/model_config_json.h"
#include "kv/kv_plan.h"
#include "model/model_loader.h"
#include "model_tools/default_model.h"
#include "tools/command.h"
#include "tools/load_flags.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

const char* format_name(WeightFormat f) {
  return f == WeightFormat::kFp4 ? "fp4" : f == WeightFormat::kFp8 ? "fp8" : "bf16";
}

struct DTypeCount {
  uint64_t tensors = 0;
  uint64_t elements = 0;  // stored elements (bytes for I8)
  uint64_t bytes = 0;
};

// KV bytes per token per layer kind (MODEL.md §10): what grows with the context, windows excluded.
struct KvPerToken {
  std::string name;
  double ratio4, ratio128;
};

std::vector<KvPerToken> kv_per_token(const ModelConfig& c) {
  const KvEntryDims attn{c.head_dim, c.rope_head_dim}, index{c.index_head_dim, 0};
  auto row = [&](const char* name, KvEntryFormat kv, KvEntryFormat ix) {
    const double e = static_cast<double>(kv_entry_bytes(kv, attn));
    const double k = static_cast<double>(kv_entry_bytes(ix, index));
    return KvPerToken{name, e / 4 + k / 4, e / 128};
  };
  return {row("bf16", KvEntryFormat::kBf16, KvEntryFormat::kBf16),
          row("fp8 + fp4 indexer", KvEntryFormat::kAttnFp8, KvEntryFormat::kIndexFp4),
          row("fp8 + fp8 indexer", KvEntryFormat::kAttnFp8, KvEntryFormat::kIndexFp8)};
}

// What inspect reads: the config and the tensor inventory, from the checkpoint or (dummy) the config alone.
struct Inspected {
  std::filesystem::path dir;
  LoadOptions load;
  ModelConfig config;
  std::vector<TensorSpec> tensors;
};

Inspected inspect(const std::filesystem::path& dir, const LoadOptions& load) {
  if (load.format == LoadFormat::kDummy) {
    // Nothing is made: the inventory follows from the config.
    const ModelConfig c = load_model_config_ex(dir, load.hf_overrides).config;
    return {dir, load, c, checkpoint_tensor_specs(c)};
  }
  const LoadedModel m = load_model(dir, load);
  return {dir, load, m.config, m.tensors()};
}

void print_text(const Inspected& m, const std::map<std::string, DTypeCount>& counts, uint64_t params) {
  const ModelConfig& c = m.config;
  fmt::print("model            {}\n", m.dir.string());
  fmt::print("weights          {}\n", m.load.describe());
  fmt::print("dim              {}\n", c.dim);
  fmt::print("layers           {} + {} MTP\n", c.n_layers, c.n_mtp_layers);
  fmt::print("compress_ratios  [{}] (last {} = MTP)\n", fmt::join(c.compress_ratios, ", "), c.n_mtp_layers);
  fmt::print("layer kinds      ratio 0: {}, ratio 4: {}, ratio 128: {}\n", c.count_layers_with_ratio(0),
             c.count_layers_with_ratio(4), c.count_layers_with_ratio(128));
  fmt::print("heads            {} x {}, rope dims {} (last)\n", c.n_heads, c.head_dim, c.rope_head_dim);
  fmt::print("q_lora_rank      {}\n", c.q_lora_rank);
  fmt::print("o_groups x rank  {} x {}\n", c.o_groups, c.o_lora_rank);
  fmt::print("window_size      {}\n", c.window_size);
  fmt::print("indexer          {} x {}, index_topk {}\n", c.index_n_heads, c.index_head_dim, c.index_topk);
  fmt::print("experts          {} routed, top-{}, moe_inter_dim {} (+{} shared)\n", c.n_routed_experts,
             c.n_activated_experts, c.moe_inter_dim, c.n_shared_experts);
  fmt::print("hash layers      {}\n", c.n_hash_layers);
  fmt::print("routing          score_func {}, route_scale {}, swiglu_limit {}\n",
             to_hf_config_json(c)["scoring_func"].get<std::string>(), c.route_scale, c.swiglu_limit);
  fmt::print("vocab_size       {}\n", c.vocab_size);
  fmt::print("rope             theta {} / compress {}, YaRN factor {}, original {}, beta {}/{}\n", c.rope_theta,
             c.compress_rope_theta, c.rope_factor, c.original_seq_len, c.beta_fast, c.beta_slow);
  fmt::print("hc               mult {}, sinkhorn iters {}, eps {}\n", c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps);
  fmt::print("dtypes           weights {}, experts {}, scales ue8m0\n", format_name(c.weight_format),
             format_name(c.expert_format));
  fmt::print("max positions    {}\n\n", c.max_position_embeddings);
  fmt::print("{:<10} {:>8} {:>16} {:>16}\n", "dtype", "tensors", "elements", "bytes");
  for (const auto& [name, n] : counts) fmt::print("{:<10} {:>8} {:>16} {:>16}\n", name, n.tensors, n.elements, n.bytes);
  fmt::print("parameters       {} (packed FP4 counts two per byte)\n\n", params);
  fmt::print("KV bytes per token (compressed entries, all main layers; windows and states excluded)\n");
  fmt::print("{:<20} {:>10} {:>10} {:>12}\n", "cache", "ratio 4", "ratio 128", "model total");
  for (const auto& k : kv_per_token(c)) {
    const double total = k.ratio4 * c.count_layers_with_ratio(4) + k.ratio128 * c.count_layers_with_ratio(128);
    fmt::print("{:<20} {:>10.4f} {:>10.4f} {:>12.2f}\n", k.name, k.ratio4, k.ratio128, total);
  }
  const KvPlan plan = make_kv_plan(c, {}, c.max_position_embeddings);
  fmt::print(
      "\none sequence of {} tokens (fp8 + fp4 indexer, `dsv4 kv-plan` for more): {:.2f} B/token + {} fixed "
      "= {} bytes ({:.3f} GiB); the pools charge {} bytes\n",
      plan.context, plan.bytes_per_token, plan.fixed_bytes, plan.per_sequence_bytes,
      static_cast<double>(plan.per_sequence_bytes) / (1 << 30), plan.allocated_bytes);
}

void run(const std::string& model, const LoadFlags& load, bool json_out, const ParallelConfig& parallel) {
  const Inspected m = inspect(model.empty() ? ensure_default_model() : std::filesystem::path(model), load.options());
  const ParallelLayout layout = plan_parallel(m.config, parallel);
  std::map<std::string, DTypeCount> counts;
  uint64_t params = 0;
  for (const TensorSpec& t : m.tensors) {
    const std::string& name = t.name;
    auto& c = counts[std::string(dtype_name(t.dtype))];
    const uint64_t numel = t.nbytes() / dtype_size(t.dtype);
    c.tensors++;
    c.elements += numel;
    c.bytes += t.nbytes();
    const bool fp4 = t.dtype == DType::kI8 && name.find(".experts.") != std::string::npos;
    if (t.dtype != DType::kF8E8M0) params += fp4 ? 2 * numel : numel;  // scales are not parameters
  }
  if (!json_out) {
    print_text(m, counts, params);
    if (parallel.world() > 1) {
      fmt::print("\n");
      for (const auto& line : describe_layout(m.config, layout)) fmt::print("{}\n", line);
    }
    return;
  }
  nlohmann::ordered_json j;
  j["model"] = m.dir.string();
  j.update(m.load.to_json());
  j["config"] = to_hf_config_json(m.config);
  j["expert_dtype"] = format_name(m.config.expert_format);
  j["parameters"] = params;
  for (const auto& [name, n] : counts)
    j["dtypes"][name] = {{"tensors", n.tensors}, {"elements", n.elements}, {"bytes", n.bytes}};
  for (const auto& k : kv_per_token(m.config)) {
    j["kv_bytes_per_token"][k.name] = {
        {"ratio_4", k.ratio4},
        {"ratio_128", k.ratio128},
        {"ratio_0", 0},
        {"total", k.ratio4 * m.config.count_layers_with_ratio(4) + k.ratio128 * m.config.count_layers_with_ratio(128)}};
  }
  const KvPlan plan = make_kv_plan(m.config, {}, m.config.max_position_embeddings);
  j["kv_plan"] = {{"context", plan.context},
                  {"bytes_per_token", plan.bytes_per_token},
                  {"fixed_bytes", plan.fixed_bytes},
                  {"per_sequence_bytes", plan.per_sequence_bytes},
                  {"allocated_bytes", plan.allocated_bytes}};
  j["parallel"] = layout_json(m.config, layout);
  fmt::print("{}\n", j.dump(2));
}

void setup(CLI::App& cmd) {
  static std::string model;
  static bool json_out = false;
  static LoadFlags load;
  static ParallelConfig parallel;
  add_model_option(cmd, model, /*required=*/false)
      ->description("model folder (default: the embedded model); with --load-format dummy, config.json is enough");
  cmd.add_flag("--json", json_out, "print one JSON object");
  add_load_flags(cmd, load, /*seed=*/false);
  add_parallel_flags(cmd, parallel);
  cmd.callback([] { run(model, load, json_out, parallel); });
}

}  // namespace

DSV4_COMMAND("inspect", "show a model's configuration, parameter counts and KV bytes per token", setup);

}  // namespace dsv4::tools
