// The engine's flags, defined once for every command that runs the engine (serve, generate, bench
// latency), and the backend and KV dtype ones for the commands that make a backend (bench step,
// golden-check) or plan a cache (kv-plan): the same names, help and defaults everywhere, each also read
// from DSV4_<FLAG> (tools/main.cpp). Every default is read from a default-constructed EngineConfig (which
// takes the scheduling ones from SchedulerConfig and the prefix-caching ones from KvCacheOptions), so each
// value has one default. A new engine flag goes into add_engine_flags and engine_config_json, with its
// field in EngineConfig.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine_config.h"

namespace dsv4::tools {

// What the engine flags set: EngineConfig's fields where a flag's value is the field's, the rest as the
// text users type, resolved by engine_config().
struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_dtype = "auto", indexer_dtype = "auto";  // auto: KvDTypes' defaults
  std::string chunked_prefill_policy{chunk_policy_name(EngineConfig{}.chunked_prefill_policy)};
  std::string scheduling_policy{scheduling_policy_name(EngineConfig{}.scheduling_policy)};
  bool enable_chunked_prefill = true;  // always on (vLLM v1); off is refused
  bool print_config = false;           // --print-engine-config

  // The EngineConfig the flags describe; throws dsv4::Error on values no engine takes. The engine sets
  // weight_bytes itself and callers with a tokenizer set vocab_limit.
  EngineConfig engine_config() const;
};

// The help section that holds the engine flags.
inline constexpr const char* kEngineFlagGroup = "Engine";

// --backend and --threads (defaults: EngineConfig's): what a backend is made of.
void add_backend_flags(CLI::App& cmd, std::string& backend, int& threads);
// --kv-cache-dtype and --indexer-dtype ("auto", KvDTypes' defaults, is the default of each).
void add_kv_dtype_flags(CLI::App& cmd, std::string& kv_cache_dtype, std::string& indexer_dtype);
// Every engine flag, the ones above and --numerics included, plus the hidden --print-engine-config.
void add_engine_flags(CLI::App& cmd, EngineFlags& f);

// The values of the engine flags in a config, by flag name (--print-engine-config).
nlohmann::ordered_json engine_config_json(const EngineConfig& c);

// With --print-engine-config: prints engine_config() as one JSON object on stdout and returns true; the
// command then runs nothing (tests/cli/engine_flags.sh compares what each command resolves).
bool print_engine_config_if_asked(const EngineFlags& f);

}  // namespace dsv4::tools
