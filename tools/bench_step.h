// `dsv4 bench step`: model forwards timed in isolation (decode at batch x context, one prefill).
#pragma once

#include <CLI/CLI.hpp>

namespace dsv4::tools {

void setup_bench_step(CLI::App& cmd);

}  // namespace dsv4::tools
