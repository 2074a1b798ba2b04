#include "tools/parallel_flags.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace dsv4::tools {

void add_parallel_flags(CLI::App& cmd, ParallelConfig& p) {
  const char* group = "Parallelism";
  cmd.add_option("--tensor-parallel-size", p.tp, "GPUs that split each layer's heads and rows (-tp)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--data-parallel-size", p.dp,
                 "replicas of the attention, each with its own requests and KV; the MoE spans all of them (-dp)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(group);
  cmd.add_flag("--enable-expert-parallel", p.expert_parallel,
               "routed experts owned whole by ranks (tp x dp of them) instead of sliced by tp")
      ->group(group);
}

void add_node_flags(CLI::App& cmd, NodeConfig& n) {
  const char* group = "Hosts";  // only on the commands that span hosts (not serve)
  cmd.add_option("--nnodes", n.nnodes, "hosts the ranks span, each running this command with its share (NCCL)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--node-rank", n.node_rank, "this host's place among them (0: the host the others meet at)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--master-addr", n.master_addr, "host 0's address, as the other hosts reach it")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--master-port", n.master_port, "the port host 0 listens at for the others")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str()
      ->group(group);
}

std::vector<std::string> expand_parallel_short_flags(int argc, const char* const* argv) {
  constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kShort = {
      {{"-tp", "--tensor-parallel-size"}, {"-dp", "--data-parallel-size"}}};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [s, l] : kShort) {
      if (a == s || (a.size() > s.size() && a.starts_with(s) && a[s.size()] == '='))
        a = std::string(l) + a.substr(s.size());
    }
    out.push_back(std::move(a));
  }
  return out;
}

nlohmann::ordered_json layout_json(const ModelConfig& cfg, const ParallelLayout& layout) {
  const ParallelConfig& p = layout.config;
  nlohmann::ordered_json j = {{"tensor_parallel_size", p.tp},
                              {"data_parallel_size", p.dp},
                              {"enable_expert_parallel", p.expert_parallel},
                              {"world_size", p.world()},
                              {"wo_a_local", layout.wo_a_local}};
  for (int r = 0; r < p.world(); ++r) {
    const RankPlace at = layout.place(r);
    const RowRange heads = layout.heads.range(at.tp_rank), experts = layout.experts_of(r);
    j["ranks"].push_back({{"rank", r},
                          {"dp_rank", at.dp_rank},
                          {"tp_rank", at.tp_rank},
                          {"heads", {heads.begin, heads.end}},
                          {"experts", {experts.begin, experts.end}},
                          {"weight_bytes", weight_bytes_of_rank(cfg, layout, r)}});
  }
  return j;
}

}  // namespace dsv4::tools
