// `dsv4 bench comm`: the collectives a sharded model runs (all-gather, all-reduce, all-to-all), timed
// between N ranks of this process on the chosen backend, with nccl-tests' algorithm and bus bandwidth:
// the ceilings the multi-GPU step rows are judged against.
#pragma once

#include <CLI/CLI.hpp>

namespace dsv4::tools {

void setup_bench_comm(CLI::App& cmd);

}  // namespace dsv4::tools
