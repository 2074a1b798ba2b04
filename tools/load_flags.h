// How a command gets its model's weights and config: --load-format auto|dummy and --hf-overrides JSON
// (vLLM's names; DSV4_LOAD_FORMAT and DSV4_HF_OVERRIDES through tools/main.cpp), and --seed for the
// dummy weights where the command has no --seed of its own.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "model/model_loader.h"

namespace dsv4::tools {

struct LoadFlags {
  std::string load_format = "auto";
  std::string hf_overrides;      // JSON text; empty: none
  std::optional<uint64_t> seed;  // unset: 0 (vLLM's default)

  // Throws dsv4::Error on malformed overrides.
  LoadOptions options() const;
};

// The help section that holds them.
inline constexpr const char* kLoadFlagGroup = "Model loading";

// --load-format and --hf-overrides; with `seed`, --seed too unless `cmd` has one (whose value the command
// then copies into f.seed before calling options()). Commands that make no weights (inspect, kv-plan) take
// no seed.
void add_load_flags(CLI::App& cmd, LoadFlags& f, bool seed = true);

}  // namespace dsv4::tools
