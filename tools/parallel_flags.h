// The multi-GPU flags as vLLM spells them, on every command that runs or plans a model:
// --tensor-parallel-size (-tp), --data-parallel-size (-dp), --enable-expert-parallel.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/rank_group.h"
#include "model/parallel_layout.h"

namespace dsv4::tools {

void add_parallel_flags(CLI::App& cmd, ParallelConfig& p);
// --nnodes, --node-rank, --master-addr, --master-port (torchrun's and vLLM's): the hosts a run spans.
void add_node_flags(CLI::App& cmd, NodeConfig& n);

// argv with vLLM's short forms (-tp 2, -tp=2, -dp 4) spelled long: CLI11 names of one dash are one
// letter, and -tp would read as -t -p.
std::vector<std::string> expand_parallel_short_flags(int argc, const char* const* argv);

// The layout's sizes and each rank's weight bytes, for --json outputs (kv-plan, inspect).
nlohmann::ordered_json layout_json(const ModelConfig& cfg, const ParallelLayout& layout);

}  // namespace dsv4::tools
