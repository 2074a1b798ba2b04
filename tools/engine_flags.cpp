#include "tools/engine_flags.h"

#include <fmt/core.h>

#include "core/error.h"
#include "tools/command.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

// CLI11 prints no default for a flag: the help names it.
std::string with_default(const char* what, bool on) { return fmt::format("{} (default: {})", what, on ? "on" : "off"); }

// Every engine flag shows its default in --help and lists under one heading, the same in serve, generate
// and bench.
template <typename T>
CLI::Option* engine_option(CLI::App& cmd, const std::string& name, T& value, const std::string& help) {
  return cmd.add_option(name, value, help)->capture_default_str()->group(kEngineFlagGroup);
}
CLI::Option* engine_flag(CLI::App& cmd, const std::string& name, bool& value, const std::string& help) {
  return cmd.add_flag(name, value, help)->capture_default_str()->group(kEngineFlagGroup);
}

}  // namespace

EngineConfig EngineFlags::engine_config() const {
  DSV4_CHECK(enable_chunked_prefill, "--no-enable-chunked-prefill: chunked prefill is always on (vLLM v1 semantics)");
  EngineConfig c = config;
  c.kv_dtypes = parse_kv_dtypes(kv_cache_dtype, indexer_dtype);
  c.chunked_prefill_policy = parse_chunk_policy(chunked_prefill_policy);
  c.scheduling_policy = parse_scheduling_policy(scheduling_policy);
  return c;
}

void add_backend_flags(CLI::App& cmd, std::string& backend, int& threads) {
  backend = EngineConfig{}.backend;
  threads = EngineConfig{}.threads;
  // Unknown names are refused by make_backend, which lists what this build has.
  engine_option(cmd, "--backend", backend, "cpu | cuda | auto (cuda when a GPU is visible)");
  engine_option(cmd, "--threads", threads, "CPU backend threads (0 = all cores)")->check(CLI::NonNegativeNumber);
}

void add_kv_dtype_flags(CLI::App& cmd, std::string& kv_cache_dtype, std::string& indexer_dtype) {
  kv_cache_dtype = indexer_dtype = "auto";
  engine_option(cmd, "--kv-cache-dtype", kv_cache_dtype, "attention entries (auto: fp8)")
      ->check(CLI::IsMember({"auto", "fp8", "bf16"}));
  engine_option(cmd, "--indexer-dtype", indexer_dtype, "indexer keys (auto: fp4, or bf16 with a bf16 cache)")
      ->check(CLI::IsMember({"auto", "fp4", "fp8", "bf16"}));
}

namespace {

// --max-model-len, --max-num-seqs, --max-num-batched-tokens, --kv-cache-memory, --kv-offload-bytes,
// --gpu-memory-utilization, --block-size: what bounds requests and sizes the KV cache.
void add_limit_flags(CLI::App& cmd, EngineConfig& c) {
  engine_option(cmd, "--max-model-len", c.max_model_len,
                fmt::format("positions per request (0 = the model's, at most {} on the cpu backend, or what the KV "
                            "cache holds)",
                            kCpuDefaultMaxModelLen))
      ->check(CLI::NonNegativeNumber);
  engine_option(cmd, "--max-num-seqs", c.max_num_seqs, "running requests at most")->check(CLI::PositiveNumber);
  engine_option(cmd, "--max-num-batched-tokens", c.max_num_batched_tokens,
                "tokens per engine step at most (0 = 8192 on a GPU of at least 70 GiB, else 2048: vLLM's server "
                "defaults)")
      ->check(CLI::NonNegativeNumber);
  engine_option(cmd, "--kv-cache-memory", c.kv_cache_memory,
                "KV cache bytes (KiB, MiB, GiB suffixes; 0 = CPU min(4 GiB, 25% of RAM), GPU from "
                "--gpu-memory-utilization)")
      ->transform(CLI::AsSizeValue(false));
  engine_option(cmd, "--kv-offload-bytes", c.kv_offload_bytes,
                "host-memory tier of the prefix cache: evicted blocks are kept there and brought back (KiB, MiB, "
                "GiB suffixes; 0 = off; auto = half the host memory available at startup; pinned on a GPU)")
      ->transform(CLI::Validator(
          [](std::string& s) {
            if (s == "auto") {
              s = std::to_string(kKvOffloadAuto);
              return std::string();
            }
            const std::string given = s;
            std::string err;
            try {
              err = CLI::AsSizeValue(false)(s);
            } catch (const CLI::Error&) {
              err = "unreadable";
            }
            return err.empty() ? err : "SIZE or auto: a size (KiB, MiB, GiB suffixes) or auto, not \"" + given + "\"";
          },
          "SIZE or auto"));
  engine_option(cmd, "--gpu-memory-utilization", c.gpu_memory_utilization,
                "CUDA backend: share of the GPU's memory for weights, activations and KV cache")
      ->check(CLI::Range(0.0, 1.0));
  engine_option(cmd, "--block-size", c.block_size, "KV block size in tokens (only 256)");
}

// Prefix caching and how prefills share steps with decodes.
void add_scheduling_flags(CLI::App& cmd, EngineFlags& f) {
  EngineConfig& c = f.config;
  engine_flag(cmd, "--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
              with_default("reuse cached prompt prefixes", c.enable_prefix_caching));
  engine_option(cmd, "--prefix-cache-retention-interval", c.prefix_cache_retention_interval,
                "sliding-window checkpoints kept: 0 = last prompt block, N = every N tokens, -1 = every block");
  engine_flag(cmd, "--enable-chunked-prefill,!--no-enable-chunked-prefill", f.enable_chunked_prefill,
              "split long prompts across steps (always on)");
  engine_option(cmd, "--chunked-prefill-policy", f.chunked_prefill_policy,
                "latency (decodes keep their pace) or budget (vLLM's)")
      ->check(CLI::IsMember({"latency", "budget"}));
  engine_option(cmd, "--scheduling-policy", f.scheduling_policy,
                "fcfs (arrival order) or priority (requests' priority field, lower first; vLLM's)")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  engine_option(cmd, "--max-prefill-chunk", c.max_prefill_chunk, "prefill tokens per request per step (0 = no cap)")
      ->check(CLI::NonNegativeNumber);
  engine_option(cmd, "--itl-slack", c.itl_slack,
                "latency policy: a step with prefill may take (1 + slack) x a decode-only step")
      ->check(CLI::NonNegativeNumber);
  engine_option(cmd, "--itl-target-ms", c.itl_target_ms,
                "latency policy: a step with prefill may also take up to this long (0 = the slack alone)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace

void add_engine_flags(CLI::App& cmd, EngineFlags& f) {
  add_backend_flags(cmd, f.config.backend, f.config.threads);
  add_numerics_option(cmd, f.config.numerics)->group(kEngineFlagGroup);
  add_limit_flags(cmd, f.config);
  add_kv_dtype_flags(cmd, f.kv_cache_dtype, f.indexer_dtype);
  engine_flag(cmd, "--enforce-eager", f.config.enforce_eager,
              with_default("CUDA: run decode steps eagerly instead of replaying CUDA graphs", f.config.enforce_eager));
  add_scheduling_flags(cmd, f);
  add_parallel_flags(cmd, f.config.parallel);
  cmd.add_flag("--print-engine-config", f.print_config, "print the resolved engine flags as JSON and exit")
      ->group("");  // hidden: for tests
}

nlohmann::ordered_json engine_config_json(const EngineConfig& c) {
  return {{"backend", c.backend},
          {"threads", c.threads},
          {"numerics", c.numerics},
          {"max-model-len", c.max_model_len},
          {"max-num-seqs", c.max_num_seqs},
          {"max-num-batched-tokens", c.max_num_batched_tokens},
          {"kv-cache-memory", c.kv_cache_memory},
          {"kv-offload-bytes", c.kv_offload_bytes},
          {"gpu-memory-utilization", c.gpu_memory_utilization},
          {"block-size", c.block_size},
          {"kv-cache-dtype", kv_cache_dtype_name(c.kv_dtypes.cache)},
          {"indexer-dtype", indexer_dtype_name(c.kv_dtypes.indexer)},
          {"enforce-eager", c.enforce_eager},
          {"enable-prefix-caching", c.enable_prefix_caching},
          {"prefix-cache-retention-interval", c.prefix_cache_retention_interval},
          {"chunked-prefill-policy", chunk_policy_name(c.chunked_prefill_policy)},
          {"scheduling-policy", scheduling_policy_name(c.scheduling_policy)},
          {"max-prefill-chunk", c.max_prefill_chunk},
          {"itl-slack", c.itl_slack},
          {"itl-target-ms", c.itl_target_ms},
          {"tensor-parallel-size", c.parallel.tp},
          {"data-parallel-size", c.parallel.dp},
          {"enable-expert-parallel", c.parallel.expert_parallel}};
}

bool print_engine_config_if_asked(const EngineFlags& f) {
  if (!f.print_config) return false;
  fmt::print("{}\n", engine_config_json(f.engine_config()).dump());
  return true;
}

}  // namespace dsv4::tools
