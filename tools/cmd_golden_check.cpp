// dsv4 golden-check MODEL: replays a golden folder's call pattern and compares with the reference.
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/op_trace.h"
#include "core/error.h"
#include "io/model_config_json.h"
#include "model_tools/golden_check.h"
#include "tools/command.h"
#include "tools/command_ranks.h"
#include "tools/engine_flags.h"
#include "tools/load_flags.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

struct Args {
  std::string model, expected, layers, backend, compare_ops, step_mode = "auto", numerics;
  std::optional<double> max_rms_ratio, min_argmax_agreement, max_block_rms_rel;
  int threads = 0;
  bool no_blocks = false;
  bool replay = false;
  LoadFlags load;
  ParallelConfig parallel;
  NodeConfig nodes;
};

// Runs the check on both backends with every op's outputs recorded, and prints where they part.
// Replay (the replay gate of spec/NUMERICS.md): the other backend runs first, on the exact tier, and
// this backend's ops are each fed its outputs; exits 3 when an op fails its gate.
void compare_ops(const GoldenOptions& o, Backend& backend, const Args& a) {
  Backend other = make_backend(a.compare_ops, a.threads, a.replay ? Numerics::kExact : std::optional<Numerics>{});
  spdlog::info("golden-check: comparing op by op with {}{}", other.description,
               a.replay ? ", replaying its inputs" : "");
  GoldenOptions eager = o;  // the trace reads every op's outputs back: nothing can be recorded
  if (!eager.step_mode || *eager.step_mode == StepMode::kGraphs) eager.step_mode = StepMode::kPadded;
  eager.side_queues = false;  // both backends then issue the same ops in the same order
  OpTrace theirs(*other.ops, *other.device);
  run_golden_check(eager, theirs, *other.device);
  OpTrace mine(*backend.ops, *backend.device, a.replay ? &theirs.records() : nullptr);
  run_golden_check(eager, mine, *backend.device);
  fmt::print("{} calls traced\n", mine.records().size());
  if (!a.replay) {
    for (const auto& line : compare_traces(mine.records(), theirs.records())) fmt::print("{}\n", line);
    return;
  }
  const ReplayVerdict v = judge_replay(mine.records(), theirs.records());
  for (const auto& line : v.lines) fmt::print("{}\n", line);
  nlohmann::ordered_json j;
  j["numerics"] = numerics_name(backend.numerics);
  j["replay"] = true;
  j["calls"] = mine.records().size();
  j["pass"] = v.pass;
  fmt::print("{}\n", j.dump());
  set_exit_code(v.pass ? 0 : 3);
}

// The golden pattern on every rank of the layout (each replica runs it too): the figures are rank 0's
// (every rank has the whole logits).
GoldenResult sharded_golden_check(const GoldenOptions& o, const ParallelLayout& layout, const Backend& like,
                                  const Args& a) {
  std::vector<GoldenResult> results(static_cast<size_t>(layout.config.world()));
  const CommandRanks ranks{layout.config, like.name, like.numerics, a.threads, a.nodes};
  run_command_ranks(ranks, [&](RankContext& r) {
    results[static_cast<size_t>(r.local_rank)] =
        run_golden_check(o, *r.backend.ops, *r.backend.device, r.shard(layout));
  });
  return results.front();  // this host's first rank's
}

void run(const Args& a) {
  GoldenOptions o;
  o.model = a.model;
  o.expected = a.expected;
  o.layers = a.layers;
  o.blocks = !a.no_blocks;
  o.step_mode = parse_step_mode(a.step_mode);  // "auto": the model's own
  o.load = a.load.options();
  const ParallelLayout layout = plan_parallel(load_model_config_ex(o.model, o.load.hf_overrides).config, a.parallel);
  Backend backend = make_backend(a.backend, a.threads, parse_numerics(a.numerics));
  spdlog::info("golden-check: backend {}", backend.description);
  o.thresholds = load_thresholds(o.model / "tolerance.json", backend.numerics);
  if (a.max_rms_ratio) o.thresholds.max_rms_ratio = a.max_rms_ratio;
  if (a.min_argmax_agreement) o.thresholds.min_argmax_agreement = a.min_argmax_agreement;
  if (a.max_block_rms_rel) o.thresholds.max_block_rms_rel = a.max_block_rms_rel;
  DSV4_CHECK(!a.replay || !a.compare_ops.empty(), "golden-check: --replay needs --compare-ops BACKEND");
  if (!a.compare_ops.empty()) {
    require_one_rank(layout, "golden-check --compare-ops");
    return compare_ops(o, backend, a);
  }
  const GoldenResult r = layout.config.world() == 1 && a.nodes.nnodes == 1
                             ? run_golden_check(o, *backend.ops, *backend.device)
                             : sharded_golden_check(o, layout, backend, a);
  nlohmann::ordered_json j;
  j["numerics"] = numerics_name(backend.numerics);
  j["parallel"] = layout.config.describe();
  j["rms_ratio"] = r.rms_ratio;
  j["argmax_agreement"] = r.argmax_agreement;
  j["blocks"] = nlohmann::ordered_json::array();
  for (const auto& b : r.blocks) j["blocks"].push_back({{"layer", b.layer}, {"rms_rel", b.rms_rel}});
  j["pass"] = r.pass;
  fmt::print("{}\n", j.dump());
  for (const auto& f : r.failures) spdlog::error("golden-check: {}", f);
  set_exit_code(r.pass ? 0 : 3);
}

void setup(CLI::App& cmd) {
  static Args a;
  add_model_option(cmd, a.model);
  cmd.add_option("--expected", a.expected, "expected logits (default MODEL/expected.safetensors)");
  cmd.add_option("--layers", a.layers, "per-block outputs (default MODEL/expected_layers.safetensors)");
  add_backend_flags(cmd, a.backend, a.threads);
  // The thresholds come from that tier's part of tolerance.json.
  add_numerics_option(cmd, a.numerics)->group(kEngineFlagGroup);
  add_parallel_flags(cmd, a.parallel);
  add_node_flags(cmd, a.nodes);
  cmd.add_option("--max-rms-ratio", a.max_rms_ratio, "end-to-end threshold (default tolerance.json)");
  cmd.add_option("--min-argmax-agreement", a.min_argmax_agreement, "end-to-end threshold (default tolerance.json)");
  cmd.add_option("--max-block-rms-rel", a.max_block_rms_rel, "per-block threshold (default tolerance.json)");
  cmd.add_flag("--no-blocks", a.no_blocks, "skip the isolated-block checks");
  cmd.add_option("--step-mode", a.step_mode,
                 "decode steps: auto (as the engine runs them), eager, padded (to their recorded shape), graphs")
      ->check(CLI::IsMember({"auto", "eager", "padded", "graphs"}))
      ->capture_default_str();
  add_load_flags(cmd, a.load);
  cmd.add_option("--compare-ops", a.compare_ops,
                 "instead of checking, run the pattern on this backend too and name the ops whose outputs differ");
  cmd.add_flag("--replay", a.replay,
               "with --compare-ops: feed each op the other backend's exact-tier outputs and hold it to its gate "
               "(spec/NUMERICS.md's replay gate)");
  cmd.callback([] { run(a); });
}

}  // namespace

DSV4_COMMAND("golden-check", "compare the engine with a golden folder of reference outputs", setup);

}  // namespace dsv4::tools
